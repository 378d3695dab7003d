"""Answers to the CLIs' token-count calls, computed by the gateway itself.

Claude Code calls ``POST /v1/messages/count_tokens`` (Anthropic) and the Gemini CLI
``POST /v1beta/models/{model}:countTokens``. The gateway answers both with LiteLLM's token counter
(``litellm.token_counter`` with its bundled default tiktoken encoding; hub tokenizers are never
downloaded), so the count is exact for OpenAI models and an estimate for others, and it needs no
provider, key or network. Nothing is sent to the provider and nothing is recorded as a driver call:
a count costs nothing and is not part of the cell's spend.
"""

from __future__ import annotations

import json
from typing import Any

from autorl.gateway.translate import load_litellm


class CountError(ValueError):
    """The body is not a count request of its protocol (answered with HTTP 400)."""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _anthropic(body: dict[str, Any]) -> list[dict[str, str]]:
    """An Anthropic Messages request as chat messages: every block that is not text counts as its
    JSON.
    """
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise CountError(
            "an Anthropic count_tokens request needs `messages`, a list of {role, content}"
        )
    chat: list[dict[str, str]] = []
    system = body.get("system")
    if isinstance(system, list):
        system = "\n".join(
            b.get("text", "") if isinstance(b, dict) and b.get("type") == "text" else _text(b)
            for b in system
        )
    if system:
        chat.append({"role": "system", "content": _text(system)})
    if body.get("tools"):
        chat.append({"role": "system", "content": json.dumps(body["tools"])})
    for message in messages:
        if not isinstance(message, dict):
            raise CountError(
                f"every message must be an object with role and content, got {message!r:.80}"
            )
        content = message.get("content", "")
        if isinstance(content, list):
            content = "\n".join(
                b.get("text", "") if isinstance(b, dict) and b.get("type") == "text" else _text(b)
                for b in content
            )
        chat.append({"role": str(message.get("role", "user")), "content": _text(content)})
    return chat


def _gemini(body: dict[str, Any]) -> list[dict[str, str]]:
    """A Gemini countTokens request (``contents``, or a whole ``generateContentRequest``) as chat
    messages.
    """
    request = body.get("generateContentRequest")
    request = request if isinstance(request, dict) else body
    contents = request.get("contents")
    if not isinstance(contents, list):
        raise CountError(
            "a Gemini countTokens request needs `contents` (or "
            "`generateContentRequest.contents`), a list"
        )

    def parts_text(content: Any) -> str:
        parts = content.get("parts", []) if isinstance(content, dict) else []
        return "\n".join(
            p["text"] if isinstance(p, dict) and isinstance(p.get("text"), str) else _text(p)
            for p in parts
        )

    chat: list[dict[str, str]] = []
    system = request.get("systemInstruction") or request.get("system_instruction")
    if system:
        chat.append({"role": "system", "content": parts_text(system)})
    if request.get("tools"):
        chat.append({"role": "system", "content": json.dumps(request["tools"])})
    for content in contents:
        role = content.get("role", "user") if isinstance(content, dict) else "user"
        chat.append(
            {"role": "assistant" if role == "model" else "user", "content": parts_text(content)}
        )
    return chat


def count_tokens(protocol: str, body: dict[str, Any], model: str) -> int:
    """Input tokens of a count request of ``protocol`` (``messages`` or ``gemini``).

    Raises:
        CountError: the body lacks the protocol's messages or contents.
    """
    chat = _anthropic(body) if protocol == "messages" else _gemini(body)
    litellm = load_litellm()
    return int(litellm.token_counter(model=model, messages=chat))


def count_response(protocol: str, tokens: int) -> dict[str, Any]:
    """The protocol's answer to a count request.

    >>> count_response("messages", 12), count_response("gemini", 12)
    ({'input_tokens': 12}, {'totalTokens': 12})
    """
    return {"input_tokens": tokens} if protocol == "messages" else {"totalTokens": tokens}
