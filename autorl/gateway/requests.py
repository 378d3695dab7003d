"""The request bodies the gateway accepts, per protocol: the allow-list of what reaches a provider.

Every byte of a request comes from the sealed agent, so only the fields named here are forwarded,
on the native pass-through routes and the LiteLLM-translated ones alike (docs/threat-model.md).
Each model is the protocol's own request schema, cut down to what a coding CLI uses: the
conversation, tools, sampling settings, streaming and the small metadata fields the CLIs send.
Anything else is dropped, never an error, and the dropped names are reported so that the call's
record says what was removed. Left out on purpose:

- anything that chooses where or how the call is made: ``base_url``, ``api_base``, ``api_key``,
  ``extra_headers``, ``extra_body``, ``timeout``, ``num_retries``, ``callbacks``,
  ``mock_response``, ``custom_llm_provider`` (LiteLLM reads all of these from its keyword
  arguments, and the translated path passes the body as keyword arguments);
- provider-side state of the operator's account: ``previous_response_id``, ``conversation``,
  ``prompt``, ``background``, ``cachedContent``, ``container``;
- billing choices: ``service_tier`` (priority tiers cost more than the driver's price);
- tools the provider runs itself, which reach the network from outside the sandbox: web search
  and fetch, code execution, MCP servers, file search, image generation, Google Search, URL
  context (see :data:`HOSTED_TOOL_TYPES`; Gemini tools keep only ``functionDeclarations``);
- media the provider would fetch or look up itself: an image, document or file given by URL or
  by a provider file id, anywhere in the conversation, is replaced by a text part saying so
  (inline ``data:`` and base64 media, which is what the CLIs send, are kept).

A body nested deeper than :data:`MAX_DEPTH` is refused (the CLIs' are about a dozen levels deep),
so that no JSON walker of the gateway or its libraries runs out of stack on one.

Message and tool contents are kept as JSON objects (:data:`JsonObject`): they are the model's
input, which cannot steer the upstream call, and their shapes vary across model versions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

# A JSON object from the request, kept as it came (``Any``: already parsed JSON, and not
# re-validated node by node because a long conversation has megabytes of it).
JsonObject = dict[str, Any]
BodyKind = Literal["chat", "responses", "messages", "gemini", "messages_count", "gemini_count"]

# Deepest nesting of a body; the CLIs' bodies are about a dozen levels deep.
MAX_DEPTH = 100
# What stands in for a media part that the provider would have fetched or looked up.
REMOTE_MEDIA_NOTE = "[media given by URL or file id removed by the driver gateway]"
# Tool ``type`` prefixes of tools the provider executes itself (Anthropic server tools, OpenAI
# hosted tools): each would give the agent network access outside its sandbox.
HOSTED_TOOL_TYPES = (
    "web_search",
    "web_fetch",
    "code_execution",
    "mcp",
    "file_search",
    "code_interpreter",
    "image_generation",
)


class RequestBody(BaseModel):
    """Base of every request model: unknown fields are ignored (and reported by :func:`parse`)."""

    model_config = ConfigDict(extra="ignore")


class StreamOptions(RequestBody):
    """OpenAI ``stream_options`` (chat completions and Responses)."""

    include_usage: bool | None = None
    include_obfuscation: bool | None = None


class ChatRequest(RequestBody):
    """OpenAI chat completions (``POST /v1/chat/completions``); OpenCode and OpenHands use it."""

    model: str | None = None
    messages: list[JsonObject]
    tools: list[JsonObject] | None = None
    tool_choice: str | JsonObject | None = None
    parallel_tool_calls: bool | None = None
    functions: list[JsonObject] | None = None
    function_call: str | JsonObject | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    n: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    response_format: JsonObject | None = None
    seed: int | None = None
    reasoning_effort: str | None = None
    verbosity: str | None = None
    modalities: list[str] | None = None
    prediction: JsonObject | None = None
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    # Sampling extras of OpenAI-compatible servers (vLLM), which the local driver serves.
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None


class Reasoning(RequestBody):
    """OpenAI Responses ``reasoning``."""

    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None


class TextConfig(RequestBody):
    """OpenAI Responses ``text`` (output format and verbosity)."""

    format: JsonObject | None = None
    verbosity: str | None = None


class ResponsesRequest(RequestBody):
    """OpenAI Responses (``POST /v1/responses``); Codex uses it."""

    model: str | None = None
    input: str | list[JsonObject] | None = None
    instructions: str | None = None
    tools: list[JsonObject] | None = None
    tool_choice: str | JsonObject | None = None
    parallel_tool_calls: bool | None = None
    reasoning: Reasoning | None = None
    store: bool | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    include: list[str] | None = None
    prompt_cache_key: str | None = None
    text: TextConfig | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_logprobs: int | None = None
    truncation: str | None = None
    metadata: dict[str, str] | None = None
    client_metadata: dict[str, str] | None = None  # Codex's session and turn ids
    user: str | None = None
    safety_identifier: str | None = None


class AnthropicMetadata(RequestBody):
    """Anthropic ``metadata`` (Claude Code sends its session as ``user_id``)."""

    user_id: str | None = None


class Thinking(RequestBody):
    """Anthropic extended thinking."""

    type: str
    budget_tokens: int | None = None
    display: str | None = None


class MessagesRequest(RequestBody):
    """Anthropic Messages (``POST /v1/messages``); Claude Code uses it."""

    model: str | None = None
    messages: list[JsonObject]
    max_tokens: int | None = None
    system: str | list[JsonObject] | None = None
    metadata: AnthropicMetadata | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    tools: list[JsonObject] | None = None
    tool_choice: JsonObject | None = None
    thinking: Thinking | None = None
    context_management: JsonObject | None = None
    output_format: JsonObject | None = None
    output_config: JsonObject | None = None


class MessagesCountRequest(RequestBody):
    """Anthropic ``POST /v1/messages/count_tokens`` (answered by the gateway, never forwarded)."""

    model: str | None = None
    messages: list[JsonObject] | None = None
    system: str | list[JsonObject] | None = None
    tools: list[JsonObject] | None = None
    tool_choice: JsonObject | None = None
    thinking: Thinking | None = None
    context_management: JsonObject | None = None


class GeminiBody(RequestBody):
    """Base of the Gemini models: camelCase on the wire, snake_case accepted (as by Google)."""

    model_config = ConfigDict(
        extra="ignore",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
    )


class ThinkingConfig(GeminiBody):
    """Gemini ``generationConfig.thinkingConfig``."""

    include_thoughts: bool | None = None
    thinking_budget: int | None = None
    thinking_level: str | None = None


class GenerationConfig(GeminiBody):
    """Gemini ``generationConfig``."""

    stop_sequences: list[str] | None = None
    response_mime_type: str | None = None
    response_schema: JsonObject | None = None
    response_json_schema: Any = None
    response_modalities: list[str] | None = None
    candidate_count: int | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | float | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    response_logprobs: bool | None = None
    logprobs: int | None = None
    thinking_config: ThinkingConfig | None = None


class GeminiTool(GeminiBody):
    """A Gemini tool: function declarations only (Google Search, URL context and code execution
    run at the provider, outside the sandbox)."""

    function_declarations: list[JsonObject] | None = None


class GeminiRequest(GeminiBody):
    """Gemini ``generateContent`` / ``streamGenerateContent``; the Gemini CLI uses them."""

    model: str | None = None
    contents: list[JsonObject]
    system_instruction: JsonObject | None = None
    tools: list[GeminiTool] | None = None
    tool_config: JsonObject | None = None
    safety_settings: list[JsonObject] | None = None
    generation_config: GenerationConfig | None = None


class GeminiCountRequest(GeminiBody):
    """Gemini ``countTokens``: ``contents`` or a whole ``generateContentRequest``."""

    contents: list[JsonObject] | None = None
    generate_content_request: GeminiRequest | None = None


MODELS: dict[BodyKind, type[RequestBody]] = {
    "chat": ChatRequest,
    "responses": ResponsesRequest,
    "messages": MessagesRequest,
    "gemini": GeminiRequest,
    "messages_count": MessagesCountRequest,
    "gemini_count": GeminiCountRequest,
}


class RequestError(ValueError):
    """The body does not fit the protocol's request schema (answered with HTTP 400)."""


def _dropped(model: BaseModel, raw: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted names of the keys of ``raw`` that ``model`` ignored, nested models included."""
    fields = type(model).model_fields
    by_key = {name: name for name in fields} | {
        f.alias: name for name, f in fields.items() if f.alias
    }
    dropped: list[str] = []
    for key, value in raw.items():
        name = by_key.get(key)
        if name is None:
            dropped.append(prefix + key)
            continue
        child = getattr(model, name)
        if isinstance(child, BaseModel) and isinstance(value, Mapping):
            dropped += _dropped(child, value, f"{prefix}{key}.")
        elif isinstance(child, list) and isinstance(value, list):
            for item, sub in zip(child, value, strict=False):
                if isinstance(item, BaseModel) and isinstance(sub, Mapping):
                    dropped += _dropped(item, sub, f"{prefix}{key}[].")
    return dropped


def _is_hosted(tool: Any) -> bool:
    kind = tool.get("type") if isinstance(tool, dict) else None
    return isinstance(kind, str) and kind.startswith(HOSTED_TOOL_TYPES)


def _too_deep(value: Any, limit: int) -> bool:
    """Whether ``value`` nests containers deeper than ``limit`` (iteratively: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


def _remote(url: Any) -> bool:
    if isinstance(url, dict):
        url = url.get("url")
    return isinstance(url, str) and not url.startswith("data:")


def _remote_media(protocol: str, part: Any) -> str | None:
    """What kind of provider-fetched reference the content part ``part`` is, or None.

    >>> _remote_media("chat", {"type": "image_url", "image_url": {"url": "https://x/a.png"}})
    'image_url'
    >>> _remote_media("messages", {"type": "image", "source": {"type": "base64", "data": "..."}})
    """
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if protocol == "chat":
        if kind == "image_url" and _remote(part.get("image_url")):
            return "image_url"
        file = part.get("file")
        if kind == "file" and isinstance(file, dict) and "file_id" in file:
            return "file_id"
    elif protocol == "responses":
        if kind in ("input_image", "input_file"):
            if _remote(part.get("image_url")) or _remote(part.get("file_url")):
                return f"{kind} url"
            if "file_id" in part:
                return f"{kind} file_id"
    elif protocol == "messages":
        source = part.get("source")
        if isinstance(source, dict) and source.get("type") in ("url", "file"):
            return f"{kind} source {source.get('type')}"
    elif protocol == "gemini" and "fileData" in part:
        return "fileData"
    return None


def _note_part(protocol: str) -> dict[str, str]:
    """A text part of ``protocol`` that stands in for a removed media part."""
    if protocol == "gemini":
        return {"text": REMOTE_MEDIA_NOTE}
    return {"type": "input_text" if protocol == "responses" else "text", "text": REMOTE_MEDIA_NOTE}


def _without_remote_media(protocol: str, value: Any, removed: list[str]) -> Any:
    """``value`` with every remote media part (:func:`_remote_media`) replaced by a text part."""
    if isinstance(value, list):
        out: list[Any] = []
        for item in value:
            kind = _remote_media(protocol, item)
            if kind is None:
                out.append(_without_remote_media(protocol, item, removed))
                continue
            removed.append(kind)
            out.append(_note_part(protocol))
        return out
    if isinstance(value, dict):
        return {k: _without_remote_media(protocol, v, removed) for k, v in value.items()}
    return value


# The fields that hold a protocol's conversation (where media parts can be).
_CONVERSATION = {
    "chat": ("messages",),
    "responses": ("input",),
    "messages": ("messages", "system"),
    "gemini": ("contents", "systemInstruction"),
}


def parse(protocol: BodyKind, body: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The allowed part of a request body of ``protocol``, and what was dropped from it.

    Returns:
        The body as it will be forwarded (only allowed fields, as the client spelled their values;
        Gemini names in camelCase) and the sorted, de-duplicated names of dropped fields (nested
        ones dotted, list items as ``[]``, hosted tools as ``tools[].type=<type>``, media
        references as ``remote media (<kind>)``).

    Raises:
        RequestError: an allowed field has a value of the wrong type, a required one is missing,
            or the body is nested too deeply.

    >>> parse("chat", {"messages": [], "base_url": "http://evil", "stream_options": {"x": 1}})
    ({'messages': [], 'stream_options': {}}, ['base_url', 'stream_options.x'])
    >>> parse("gemini", {"contents": [], "tools": [{"googleSearch": {}}]})
    ({'contents': [], 'tools': []}, ['tools[].googleSearch'])
    """
    model_type = MODELS[protocol]
    if _too_deep(body, MAX_DEPTH):
        raise RequestError(f"request body nested more than {MAX_DEPTH} levels deep")
    try:
        model = model_type.model_validate(body)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(body)'}: {e['msg']}"
            for e in error.errors()[:5]
        )
        raise RequestError(
            f"request body does not fit the {protocol} request schema: {problems}"
        ) from error
    dropped = _dropped(model, body)
    dumped = model.model_dump(mode="json", by_alias=True, exclude_unset=True)
    # In the client's order of fields, as a pass-through should be.
    fields = model_type.model_fields
    wire = {key: f.alias or key for key, f in fields.items()} | {
        f.alias: f.alias for f in fields.values() if f.alias
    }
    order = [wire[key] for key in body if key in wire]
    allowed = {key: dumped[key] for key in order if key in dumped} | dumped
    # Hosted tools are dropped as whole list items, by their type.
    if protocol in ("chat", "responses", "messages") and isinstance(allowed.get("tools"), list):
        hosted = [t for t in allowed["tools"] if _is_hosted(t)]
        allowed["tools"] = [t for t in allowed["tools"] if not _is_hosted(t)]
        dropped += [f"tools[].type={t['type']}" for t in hosted]
    if protocol == "gemini" and isinstance(allowed.get("tools"), list):
        # A tool left empty by the filter would be refused by the provider: leave it out.
        allowed["tools"] = [t for t in allowed["tools"] if t]
    removed: list[str] = []
    for key in _CONVERSATION.get(protocol, ()):
        if key in allowed:
            allowed[key] = _without_remote_media(protocol, allowed[key], removed)
    dropped += [f"remote media ({kind})" for kind in removed]
    return allowed, sorted(set(dropped))
