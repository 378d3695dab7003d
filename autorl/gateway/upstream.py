"""Forwarding one call to the provider: URL, headers, retries with exponential backoff.

A call on a protocol the provider speaks natively is passed through with its body cut to the
protocol's allow-list (:mod:`autorl.gateway.requests`; the model rewritten and, for streamed chat
completions, usage reporting switched on). Of the client's headers only :data:`FORWARDED_HEADERS`
reach the provider, and of the query only :data:`FORWARDED_QUERY`: nothing the agent sends may
choose the upstream URL, its key or its other headers (docs/threat-model.md).
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Iterable, Mapping

import httpx

from autorl.gateway.settings import DriverSettings

# The client headers a provider needs to serve the CLIs' calls (protocol version, beta features,
# streaming); every other header of the agent's is dropped. The body's type is the gateway's own.
FORWARDED_HEADERS = frozenset({"accept", "anthropic-version", "anthropic-beta", "openai-beta"})
# The only query parameters forwarded, per protocol: Gemini's streaming format and the flag the
# Anthropic SDK's beta client adds (``key``, which may carry the gateway token, never is).
FORWARDED_QUERY = {"gemini": frozenset({("alt", "sse")}), "messages": frozenset({("beta", "true")})}
# Provider headers that describe its connection, set cookies or name the operator's account.
_DROP_RESPONSE = frozenset(
    {
        "content-length",
        "content-encoding",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "set-cookie",
        "openai-organization",
        "openai-project",
        "anthropic-organization-id",
    }
)
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 520, 522, 524, 529})


def upstream_url(settings: DriverSettings, protocol: str, suffix: str, query: str = "") -> str:
    """The provider URL of a call: the protocol's base URL plus the route's suffix.

    >>> from autorl.gateway.settings import DriverSettings
    >>> s = DriverSettings("d", "google", "m", "u", None, {"gemini": "https://g/v1beta"},
    ...                    None, None, None, None, 1, 1, 1, 1, True)
    >>> upstream_url(s, "gemini", "/models/m:streamGenerateContent", "alt=sse")
    'https://g/v1beta/models/m:streamGenerateContent?alt=sse'
    """
    url = settings.protocols[protocol] + suffix
    return f"{url}?{query}" if query else url


def forwarded_query(protocol: str, params: Iterable[tuple[str, str]]) -> str:
    """The part of a client's query string that is forwarded (:data:`FORWARDED_QUERY`).

    >>> forwarded_query("gemini", [("alt", "sse"), ("key", "gateway-token"), ("x", "y")])
    'alt=sse'
    >>> forwarded_query("chat", [("alt", "sse")])
    ''
    """
    allowed = FORWARDED_QUERY.get(protocol, frozenset())
    kept = [f"{k}={v}" for k, v in params if (k, v) in allowed]
    return "&".join(dict.fromkeys(kept))


def auth_headers(protocol: str, api_key: str | None) -> dict[str, str]:
    """The provider's own way of sending the real key for ``protocol``."""
    if api_key is None:
        return {}
    if protocol == "messages":
        return {"x-api-key": api_key}
    if protocol == "gemini":
        return {"x-goog-api-key": api_key}
    return {"authorization": f"Bearer {api_key}"}


def request_headers(
    incoming: Mapping[str, str], protocol: str, api_key: str | None
) -> dict[str, str]:
    """The client's :data:`FORWARDED_HEADERS`, the gateway's own body headers and the provider key.

    >>> incoming = {"Anthropic-Beta": "b", "x-api-key": "gateway-token", "Host": "elsewhere"}
    >>> sorted(request_headers(incoming, "messages", None))
    ['accept-encoding', 'anthropic-beta', 'anthropic-version', 'content-type']
    """
    headers = {k.lower(): v for k, v in incoming.items() if k.lower() in FORWARDED_HEADERS}
    headers["content-type"] = "application/json"  # the gateway serialises the body itself
    # Uncompressed, so that usage can be read from the stream as it passes.
    headers["accept-encoding"] = "identity"
    if protocol == "messages":
        headers.setdefault("anthropic-version", "2023-06-01")
    return headers | auth_headers(protocol, api_key)


def response_headers(upstream: httpx.Headers) -> dict[str, str]:
    """The provider's response headers that make sense to relay."""
    return {k: v for k, v in upstream.items() if k.lower() not in _DROP_RESPONSE}


def backoff_s(settings: DriverSettings, attempt: int, retry_after: str | None) -> float:
    """Delay before retry number ``attempt`` (1-based): exponential, or the provider's
    ``Retry-After``, capped at ``max_backoff_s``.

    >>> from autorl.gateway.settings import DriverSettings
    >>> s = DriverSettings(
    ...     "d", "openai", "m", "u", None, {"chat": "u"},
    ...     None, None, None, None, 1, 5, 0.5, 3.0, True,
    ... )
    >>> [backoff_s(s, n, None) for n in (1, 2, 3, 4)]
    [0.5, 1.0, 2.0, 3.0]
    >>> backoff_s(s, 1, "2")
    2.0
    """
    delay: float = settings.initial_backoff_s * 2 ** (attempt - 1)  # int ** int is typed Any
    if retry_after:
        try:
            delay = float(retry_after)
        except ValueError:
            parsed = email.utils.parsedate_to_datetime(retry_after) if retry_after else None
            if parsed is not None:
                delay = parsed.timestamp() - time.time()
    return max(0.0, min(delay, settings.max_backoff_s))


class UpstreamFailure(Exception):
    """The provider could not be reached after every attempt."""

    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


async def send_with_retries(
    client: httpx.AsyncClient,
    settings: DriverSettings,
    url: str,
    headers: dict[str, str],
    payload: bytes,
) -> tuple[httpx.Response, int, str | None]:
    """POST ``payload`` and return the open (streaming) response, the attempts made and the last
    retried error.

    Provider 429/5xx answers and connection errors are retried with exponential backoff up to
    ``settings.max_attempts``; the last such answer is returned as it is when attempts run out.

    Raises:
        UpstreamFailure: when the last attempt failed to connect at all.
    """
    last_error: str | None = None
    for attempt in range(1, settings.max_attempts + 1):
        request = client.build_request(
            "POST", url, content=payload, headers=headers, timeout=settings.timeout_s
        )
        try:
            response = await client.send(request, stream=True)
        except httpx.TransportError as error:
            last_error = f"{type(error).__name__}: {error}"
            if attempt == settings.max_attempts:
                raise UpstreamFailure(
                    f"provider unreachable at {url} after {attempt} attempt(s): {last_error}",
                    attempt,
                ) from error
            await asyncio.sleep(backoff_s(settings, attempt, None))
            continue
        if response.status_code in RETRY_STATUSES and attempt < settings.max_attempts:
            body = await response.aread()
            await response.aclose()
            last_error = f"HTTP {response.status_code}: {body[:300].decode(errors='replace')}"
            await asyncio.sleep(backoff_s(settings, attempt, response.headers.get("retry-after")))
            continue
        return response, attempt, last_error
    raise AssertionError("unreachable")  # the loop returns or raises on its last attempt
