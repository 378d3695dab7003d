"""Token usage from a provider's response, per protocol, for JSON bodies and SSE streams.

Protocols: ``chat`` (OpenAI chat completions), ``responses`` (OpenAI Responses), ``messages``
(Anthropic Messages) and ``gemini`` (Google generateContent). Input tokens include cached and
cache-creation tokens; output tokens include reasoning/thinking tokens.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any


@dataclass
class Usage:
    """Tokens of one call (None until the provider reported them)."""

    tokens_in: int | None = None
    tokens_out: int | None = None
    cached_in: int | None = None


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def apply(protocol: str, payload: Any, usage: Usage) -> None:
    """Update ``usage`` from one JSON body or one decoded SSE event of ``protocol``.

    >>> u = Usage()
    >>> apply("chat", {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3}}, u)
    >>> (u.tokens_in, u.tokens_out)
    (12, 3)
    >>> u = Usage()
    >>> start = {"usage": {"input_tokens": 5, "cache_read_input_tokens": 7}}
    >>> apply("messages", {"type": "message_start", "message": start}, u)
    >>> apply("messages", {"type": "message_delta", "usage": {"output_tokens": 9}}, u)
    >>> (u.tokens_in, u.tokens_out, u.cached_in)
    (12, 9, 7)
    """
    if not isinstance(payload, dict):
        return
    if protocol == "chat":
        _from_chat(payload.get("usage"), usage)
    elif protocol == "responses":
        # Streams carry usage on response.completed/incomplete/failed; a JSON body is the response.
        response = (
            payload.get("response")
            if "type" in payload and isinstance(payload.get("response"), dict)
            else payload
        )
        if isinstance(response, dict) and isinstance(response.get("usage"), dict):
            raw = response["usage"]
            usage.tokens_in = _int(raw.get("input_tokens"))
            usage.tokens_out = _int(raw.get("output_tokens"))
            usage.cached_in = _int((raw.get("input_tokens_details") or {}).get("cached_tokens"))
    elif protocol == "messages":
        _from_messages(payload, usage)
    elif protocol == "gemini":
        raw = payload.get("usageMetadata")
        if isinstance(raw, dict):
            usage.tokens_in = _int(raw.get("promptTokenCount"))
            usage.tokens_out = _int(raw.get("candidatesTokenCount")) + _int(
                raw.get("thoughtsTokenCount")
            )
            usage.cached_in = _int(raw.get("cachedContentTokenCount"))


def _from_chat(raw: Any, usage: Usage) -> None:
    if isinstance(raw, dict):
        usage.tokens_in = _int(raw.get("prompt_tokens"))
        usage.tokens_out = _int(raw.get("completion_tokens"))
        usage.cached_in = _int((raw.get("prompt_tokens_details") or {}).get("cached_tokens"))


def _from_messages(payload: dict[str, Any], usage: Usage) -> None:
    kind = payload.get("type")
    raw = (
        payload["message"].get("usage")
        if kind == "message_start" and isinstance(payload.get("message"), dict)
        else payload.get("usage")
    )
    if not isinstance(raw, dict):
        return
    if kind != "message_delta" or "input_tokens" in raw:
        cached = _int(raw.get("cache_read_input_tokens"))
        if "input_tokens" in raw or cached:
            usage.tokens_in = (
                _int(raw.get("input_tokens"))
                + cached
                + _int(raw.get("cache_creation_input_tokens"))
            )
            usage.cached_in = cached
    if "output_tokens" in raw:
        # message_delta carries the cumulative output count.
        usage.tokens_out = _int(raw.get("output_tokens"))


_RESPONSES_FINAL = ("response.completed", "response.incomplete", "response.failed")


def is_final(protocol: str, payload: Any) -> bool:
    """Whether a stream event of ``protocol`` carries the call's final usage.

    >>> is_final("messages", {"type": "message_delta", "usage": {"output_tokens": 9}})
    True
    >>> is_final("messages", {"type": "message_start", "message": {"usage": {"output_tokens": 1}}})
    False
    """
    if not isinstance(payload, dict):
        return False
    if protocol == "chat":
        return isinstance(payload.get("usage"), dict)
    if protocol == "responses":
        return payload.get("type") in _RESPONSES_FINAL
    if protocol == "messages":
        return payload.get("type") == "message_delta" and isinstance(payload.get("usage"), dict)
    # Gemini repeats usage on every chunk; the one with a finish reason is the last.
    candidates = payload.get("candidates")
    finished = isinstance(candidates, list) and any(
        isinstance(c, dict) and c.get("finishReason") for c in candidates
    )
    return finished and isinstance(payload.get("usageMetadata"), dict)


def _texts(value: Any) -> int:
    """Characters of the strings in ``value`` (a streamed delta or tool call)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_texts(v) for v in value.values())
    if isinstance(value, list):
        return sum(_texts(v) for v in value)
    return 0


def output_chars(protocol: str, payload: Any) -> int:
    """Characters of model output (text, reasoning, tool calls) in one stream event of ``protocol``.

    Events that echo the request or the whole response (``response.created``,
    ``message_start``, ``*.done``) count nothing: their text was counted from its deltas.

    >>> output_chars("chat", {"choices": [{"delta": {"content": "hello"}}]})
    5
    >>> output_chars("responses", {"type": "response.output_text.delta", "delta": "hi"})
    2
    """
    if not isinstance(payload, dict):
        return 0
    if protocol == "chat":
        choices = payload.get("choices")
        if not isinstance(choices, list):
            return 0
        return sum(_texts(c.get("delta")) for c in choices if isinstance(c, dict))
    if protocol == "responses":
        kind, delta = payload.get("type"), payload.get("delta")
        is_delta = isinstance(kind, str) and kind.endswith(".delta")
        return len(delta) if is_delta and isinstance(delta, str) else 0
    if protocol == "messages":
        return _texts(payload.get("delta")) if payload.get("type") == "content_block_delta" else 0
    candidates = payload.get("candidates")
    if not isinstance(candidates, list):
        return 0
    return sum(
        _texts((c.get("content") or {}).get("parts")) for c in candidates if isinstance(c, dict)
    )


class SSEUsageParser:
    """Feeds on raw SSE bytes as they stream by and keeps the usage they report.

    Attributes:
        usage: The usage reported so far.
        final: Whether the final usage event was seen (else :attr:`usage` may be partial or empty).
        output_chars: Characters of model output relayed so far (:func:`output_chars`).
    """

    def __init__(self, protocol: str) -> None:
        """Parse events of ``protocol``."""
        self.protocol = protocol
        self.usage = Usage()
        self.events = 0
        self.final = False
        self.output_chars = 0
        self._buffer = b""

    def feed(self, chunk: bytes) -> None:
        """Consume the next bytes of the stream (events may be split across chunks)."""
        self._buffer += chunk
        while True:
            cut = _event_end(self._buffer)
            if cut is None:
                return
            event, self._buffer = self._buffer[: cut[0]], self._buffer[cut[1] :]
            self._event(event)

    def close(self) -> Usage:
        """Parse what is left (a stream may end without a blank line) and return the usage."""
        if self._buffer.strip():
            self._event(self._buffer)
        self._buffer = b""
        return self.usage

    def _event(self, raw: bytes) -> None:
        data = b"\n".join(
            line[5:].lstrip()
            for line in raw.replace(b"\r\n", b"\n").split(b"\n")
            if line.startswith(b"data:")
        )
        if not data or data.strip() == b"[DONE]":
            return
        try:
            payload = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return
        self.events += 1
        apply(self.protocol, payload, self.usage)
        self.final = self.final or is_final(self.protocol, payload)
        self.output_chars += output_chars(self.protocol, payload)


def _event_end(buffer: bytes) -> tuple[int, int] | None:
    """Where the first complete SSE event ends: (end of event, start of the next)."""
    best: tuple[int, int] | None = None
    for separator in (b"\n\n", b"\r\n\r\n"):
        index = buffer.find(separator)
        if index != -1 and (best is None or index < best[0]):
            best = (index, index + len(separator))
    return best


def usage_from_json(protocol: str, body: bytes) -> Usage:
    """Usage of a non-streamed response body (an unparseable body has none)."""
    usage = Usage()
    with contextlib.suppress(json.JSONDecodeError, UnicodeDecodeError):
        apply(protocol, json.loads(body), usage)
    return usage
