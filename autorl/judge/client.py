"""Judge LLM client: OpenAI-compatible chat completions, cached on disk, bounded in concurrency.

A judge is configured by name like an agent's driver: ``conf/driver/<name>.yaml``, loaded with
:func:`autorl.config.load_driver_config`. Any driver with an OpenAI chat completions route
(``protocols.chat``) works: ``openai``, ``openai_compatible``, ``google`` and ``anthropic``
through their OpenAI-compatible endpoints.

An empty reply, or one the caller's ``parse`` rejects, raises :class:`JudgeError` and is never
cached: a judge that could not answer (a thinking model that spent its token budget before
answering, a truncated or malformed reply) is an infrastructure failure, never a verdict. Graders
must let :class:`JudgeError` propagate rather than score the item as lost or "incorrect".
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autorl.config import load_driver_config
from autorl.engine.base import ChatMessage
from autorl.errors import AutorlError, ConfigError, PrerequisiteError
from autorl.judge.cache import JudgeCache
from autorl.schema import PricePerMtok

logger = logging.getLogger(__name__)

_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class JudgeError(AutorlError):
    """The judge endpoint failed (after retries) or answered something unusable (empty,
    unparseable).

    An infrastructure failure, never a verdict: the item it was asked about has no score.
    """


class JudgeReplyError(JudgeError):
    """The judge answered, but its reply is unusable: empty, or rejected by the caller's ``parse``
    check.
    """


ReplyParser = Callable[[str], object]
"""Checks a judge reply: returns anything (ignored) for a usable reply, raises ``ValueError``
otherwise.
"""


@dataclass(frozen=True)
class JudgeSpec:
    """Where a judge lives and how to pay for it.

    Attributes:
        name: The driver's name (``conf/driver/<name>.yaml``) or a local server's name.
        model: Model id sent in each request.
        base_url: API root, e.g. ``https://api.openai.com/v1``.
        api_key_env: Environment variable holding the API key; ``None`` for keyless local servers.
        price_per_mtok: USD per million input and output tokens, if known.
    """

    name: str
    model: str
    base_url: str
    api_key_env: str | None = None
    price_per_mtok: PricePerMtok | None = None

    @property
    def identity(self) -> str:
        """What the cache keys answers by: the judge's name and model (not its URL)."""
        return f"{self.name}/{self.model}"


def load_judge_spec(name: str) -> JudgeSpec:
    """The judge of driver ``name`` (:func:`autorl.config.load_driver_config`).

    It is reached at the driver's chat completions root, ``protocols.chat``.

    Raises:
        ConfigError: No such driver ("did you mean" and the valid names), or it has no model or no
            OpenAI chat completions route.
    """
    driver = load_driver_config(name)
    chat = driver.chat_root()
    if not chat or not driver.model:
        raise ConfigError(
            f"driver {name!r} cannot judge: a judge needs a model and an OpenAI chat completions "
            "route (driver.model and driver.protocols.chat)"
        )
    return JudgeSpec(
        name=name,
        model=driver.model,
        base_url=chat,
        api_key_env=driver.api_key_env,
        price_per_mtok=driver.price_per_mtok,
    )


@dataclass
class JudgeUsage:
    """What a client spent: requests sent, answers served from the cache, tokens and cost."""

    requests: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def as_dict(self, price: PricePerMtok | None) -> dict[str, Any]:
        """JSON-ready summary; ``cost_usd`` is ``None`` when the price is unknown."""
        cost = None
        if price is not None:
            cost = (self.prompt_tokens * price.input + self.completion_tokens * price.output) / 1e6
        return {
            "requests": self.requests,
            "cache_hits": self.cache_hits,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": cost,
        }


class JudgeClient:
    """Sends chat requests to one judge; answers are cached and at most ``concurrency`` are in
    flight.
    """

    def __init__(
        self,
        spec: JudgeSpec,
        *,
        params: dict[str, Any],
        concurrency: int,
        cache_dir: Path | None,
        timeout_s: float = 120.0,
        max_retries: int = 4,
    ) -> None:
        """Prepare the HTTP client.

        Args:
            spec: The judge.
            params: Extra request fields sent verbatim (e.g. ``{"max_completion_tokens": 100}``);
                part of the cache key.
            concurrency: Most requests in flight at once.
            cache_dir: Root of the answer cache; ``None`` disables caching.
            timeout_s: Per-request timeout.
            max_retries: Retries of a request that failed with a transport error, 408/409/429 or
                5xx.

        Raises:
            PrerequisiteError: The judge needs an API key that is not set.
        """
        import httpx

        if concurrency < 1:
            raise ConfigError(f"judge concurrency must be at least 1, got {concurrency}")
        headers = {"Content-Type": "application/json"}
        if spec.api_key_env:
            key = os.environ.get(spec.api_key_env)
            if not key:
                raise PrerequisiteError(
                    f"judge {spec.name!r} needs an API key: set {spec.api_key_env} in the grader's "
                    "environment"
                )
            headers["Authorization"] = f"Bearer {key}"
        self.spec = spec
        self.params = dict(params)
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.cache = JudgeCache(cache_dir, spec.identity) if cache_dir is not None else None
        self.usage = JudgeUsage()
        self._http = httpx.Client(
            base_url=spec.base_url,
            headers=headers,
            timeout=timeout_s,
            limits=httpx.Limits(max_connections=concurrency),
        )

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()

    def __enter__(self) -> JudgeClient:
        """Use as a context manager that closes the client."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the client."""
        self.close()

    def _request(self, messages: list[ChatMessage]) -> dict[str, Any]:
        return {"model": self.spec.model, "messages": messages, **self.params}

    def complete(self, messages: list[ChatMessage], parse: ReplyParser | None = None) -> str:
        """The judge's answer to one chat (from the cache when it has a usable one).

        Args:
            messages: The chat.
            parse: Checks the reply (raises ``ValueError`` when it is unusable); an unusable reply
                raises :class:`JudgeReplyError` and is not cached. A cached answer that is empty or
                that ``parse`` rejects (written before these checks) is asked again and overwritten.

        Raises:
            JudgeError: The judge failed; :class:`JudgeReplyError` when its reply is empty or
                rejected by ``parse``.
        """
        request = self._request(messages)
        if self.cache is not None and (cached := self.cache.get(request)) is not None:
            if self._problem(cached, parse) is None:
                with self.usage.lock:
                    self.usage.cache_hits += 1
                return cached
            logger.warning(
                "judge %s: ignoring an unusable cached answer %r; asking again",
                self.spec.identity,
                cached[:80],
            )
        answer = self._post(request)
        if (problem := self._problem(answer, parse)) is not None:
            raise JudgeReplyError(
                f"judge {self.spec.identity} gave an unusable reply ({problem}): {answer[:300]!r}; "
                "it was not cached. Check the judge's prompt and judge_params (e.g. a token cap "
                "too small for its format)"
            )
        if self.cache is not None:
            self.cache.put(request, answer)
        return answer

    def complete_many(
        self, chats: list[list[ChatMessage]], parse: ReplyParser | None = None
    ) -> list[str]:
        """Answers to many chats, in order, with at most ``concurrency`` requests in flight.

        Raises:
            JudgeError: As :meth:`complete`, for the first chat that failed (usable answers are
                cached).
        """
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="judge") as pool:
            return list(pool.map(lambda chat: self.complete(chat, parse), chats))

    @staticmethod
    def _problem(answer: str, parse: ReplyParser | None) -> str | None:
        """Why ``answer`` is unusable, or ``None`` when it is usable."""
        if not answer.strip():
            return "empty"
        if parse is not None:
            try:
                parse(answer)
            except ValueError as error:
                return f"unparseable: {error}"
        return None

    def _post(self, request: dict[str, Any]) -> str:
        import httpx

        delay = 1.0
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                response = self._http.post("/chat/completions", json=request)
            except httpx.TransportError as error:
                if last:
                    raise JudgeError(
                        f"judge {self.spec.identity} at {self.spec.base_url} unreachable: {error}"
                    ) from error
                logger.warning("judge request failed (%s); retrying in %.0f s", error, delay)
            else:
                if response.status_code == 200:
                    return self._answer(response.json())
                if response.status_code not in _RETRY_STATUS or last:
                    raise JudgeError(
                        f"judge {self.spec.identity} answered HTTP {response.status_code}: "
                        f"{response.text[:500]}"
                    )
                logger.warning(
                    "judge answered HTTP %s; retrying in %.0f s", response.status_code, delay
                )
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    def _answer(self, body: dict[str, Any]) -> str:
        """The reply text of a 200 response; usage is counted even when the reply is empty.

        Raises:
            JudgeError: No ``choices[0].message``; :class:`JudgeReplyError` for empty content (with
                the finish reason and a fix).
        """
        try:
            choice = body["choices"][0]
            message = choice["message"]
            content = message.get("content")
        except (KeyError, IndexError, TypeError, AttributeError) as error:
            raise JudgeError(
                f"judge {self.spec.identity} sent no choices[0].message.content: {str(body)[:300]}"
            ) from error
        usage = body.get("usage") or {}
        with self.usage.lock:
            self.usage.requests += 1
            self.usage.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.usage.completion_tokens += int(usage.get("completion_tokens") or 0)
        text = str(content or "")
        if not text.strip():
            finish = choice.get("finish_reason")
            hint = (
                "it ran out of tokens, typically a thinking model spending its whole budget on "
                "reasoning: raise max_completion_tokens / max_tokens in judge_params or lower its "
                "reasoning effort"
                if finish == "length"
                else "check the judge model and judge_params"
            )
            raise JudgeReplyError(
                f"judge {self.spec.identity} sent an empty reply (finish_reason={finish!r}); "
                f"{hint}. Empty replies are never cached or scored"
            )
        return text
