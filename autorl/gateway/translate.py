"""Calls on a protocol the provider does not speak, translated by LiteLLM.

Examples: Claude Code (Anthropic Messages) driven by GPT-5, Codex (Responses) driven by Claude,
the Gemini CLI (generateContent) driven by GPT-4o. LiteLLM converts the request to the provider's
protocol and the answer (JSON or stream) back. It is imported on the first translated call only
(it takes seconds to import), never by a cell whose CLI speaks the provider's own protocol.

LiteLLM takes the request's fields as keyword arguments next to the settings of the call itself
(``api_base``, ``api_key``, ``extra_headers``, ``mock_response``...), so the body it gets is cut
to the protocol's allow-list first (:mod:`autorl.gateway.requests`) and checked against
:data:`LITELLM_CONTROL` here again.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from autorl.gateway.settings import LITELLM_PREFIX, DriverSettings
from autorl.gateway.usage import Usage, usage_from_json

# LiteLLM keyword arguments that set up the call rather than describe the request.
LITELLM_CONTROL = frozenset(
    {
        "api_base",
        "base_url",
        "api_key",
        "api_version",
        "extra_headers",
        "headers",
        "extra_body",
        "extra_query",
        "timeout",
        "num_retries",
        "max_retries",
        "callbacks",
        "success_callback",
        "failure_callback",
        "mock_response",
        "mock_tool_calls",
        "mock_timeout",
        "custom_llm_provider",
        "user_api_key",
        "litellm_params",
        "litellm_metadata",
        "litellm_logging_obj",
        "litellm_call_id",
        "client",
        "organization",
        "project",
        "use_chat_completions_api",
        "model_list",
        "fallbacks",
        "input_cost_per_token",
        "output_cost_per_token",
        "aws_access_key_id",
        "aws_secret_access_key",
        "vertex_credentials",
        "vertex_project",
        "azure_ad_token",
    }
)


class TranslationError(Exception):
    """LiteLLM could not serve the call; carries the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Translated:
    """A translated answer: a JSON body, or a stream of SSE bytes (``stream`` set)."""

    content: bytes = b""
    usage: Usage = field(default_factory=Usage)
    stream: AsyncIterator[bytes] | None = None


def load_litellm() -> Any:
    """LiteLLM, imported on first use and set up for the gateway (nothing fetched from the
    network).
    """
    # The bundled price map; never fetch it from the network at import.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.telemetry = False
    # Token counts (autorl.gateway.count) use the bundled tiktoken encoding, never a hub tokenizer
    # download.
    litellm.disable_hf_tokenizer_download = True
    litellm.drop_params = True  # a parameter the target provider lacks is dropped, not an error
    # Messages → chat completions (which every provider here serves), not → OpenAI Responses.
    litellm.use_chat_completions_url_for_anthropic_messages = True
    return litellm


def _to_jsonable(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json", exclude_none=True, warnings=False)
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    return obj


def sse_bytes(protocol: str, chunk: Any) -> bytes:
    """One streamed item from LiteLLM as SSE bytes in ``protocol``'s framing.

    >>> sse_bytes("responses", {"type": "response.completed", "response": {}})
    b'event: response.completed\\ndata: {"type": "response.completed", "response": {}}\\n\\n'
    >>> sse_bytes("chat", {"choices": []})
    b'data: {"choices": []}\\n\\n'
    """
    if isinstance(chunk, bytes):
        return chunk
    if isinstance(chunk, str):
        return chunk.encode()
    payload = _to_jsonable(chunk)
    data = json.dumps(payload)
    if protocol in ("responses", "messages") and isinstance(payload, dict) and "type" in payload:
        return f"event: {payload['type']}\ndata: {data}\n\n".encode()
    return f"data: {data}\n\n".encode()


async def call(
    settings: DriverSettings, protocol: str, body: dict[str, Any], api_key: str | None
) -> Translated:
    """Serve one call of ``protocol`` with the provider's own protocol, through LiteLLM.

    Raises:
        TranslationError: LiteLLM rejected the call or the provider failed (after LiteLLM's own
            ``num_retries`` retries on 429/5xx).
    """
    # The body comes cut to its allow-list (autorl.gateway.requests), whose fields are request
    # fields only; a name LiteLLM reads as a setting of the call itself (where to send it, with
    # which key or headers, whether to answer it at all) must still never come from the agent.
    control = sorted(body.keys() & LITELLM_CONTROL)
    if control:
        raise TranslationError(f"request fields not allowed: {', '.join(control)}", status=400)
    litellm = load_litellm()
    # Every provider here serves OpenAI chat completions (Anthropic and Google through their
    # OpenAI-compatible endpoints), so that is the one target LiteLLM translates to when listed.
    if "chat" in settings.protocols:
        target, api_base = f"openai/{settings.model}", settings.protocols["chat"]
    else:
        target, api_base = (
            f"{LITELLM_PREFIX[settings.provider]}/{settings.model}",
            settings.base_url,
        )
    common: dict[str, Any] = {
        "api_base": api_base,
        "api_key": api_key or "none",
        "timeout": settings.timeout_s,
        "num_retries": settings.max_attempts - 1,
    }
    request = {k: v for k, v in body.items() if k != "model"}
    stream = bool(request.get("stream"))
    try:
        if protocol == "messages":
            result = await litellm.anthropic.messages.acreate(model=target, **request, **common)
        elif protocol == "responses":
            result = await litellm.aresponses(
                model=target,
                **request,
                **common,
                use_chat_completions_api="chat" in settings.protocols,
            )
        elif protocol == "chat":
            result = await litellm.acompletion(model=target, **request, **common)
        elif protocol == "gemini":
            raise TranslationError(
                f"driver {settings.name!r} ({settings.provider}) does not speak the Gemini API "
                "that this CLI uses; use a google driver with the gemini-cli agent",
                status=400,
            )
        else:
            raise TranslationError(f"unknown protocol {protocol!r}", status=404)
    except TranslationError:
        raise
    except Exception as error:  # noqa: BLE001 - LiteLLM raises many types; all become one HTTP error
        status = int(getattr(error, "status_code", 502) or 502)
        raise TranslationError(
            f"driver call via LiteLLM failed: {type(error).__name__}: {error}", status=status
        ) from error
    if not stream:
        content = json.dumps(_to_jsonable(result)).encode()
        return Translated(content=content, usage=usage_from_json(protocol, content))

    async def events() -> AsyncIterator[bytes]:
        try:
            async for chunk in result:
                yield sse_bytes(protocol, chunk)
            if protocol == "chat":
                yield b"data: [DONE]\n\n"
        finally:
            # A stream the agent closed early: close LiteLLM's, and with it the provider's.
            aclose = getattr(result, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    return Translated(stream=events())
