"""The driver gateway against a hostile agent, over real HTTP (docs/threat-model.md).

Two real listeners: the configured upstream (the replay LLM server, or a gated stand-in where a
test must hold calls open) and a trap that must never be called. Every byte of each request comes
from the agent: fields that would choose the upstream, its key, headers, retries or a mocked
answer are dropped on every route, native and translated; budgets hold under concurrency; a
stream the agent cuts short is still charged; an oversized body is refused while it arrives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from autorl.gateway import requests
from autorl.gateway.upstream import request_headers
from tests.helpers.gateway_cell import (
    KEY,
    TOKEN,
    Listener,
    native_settings,
    sent_requests,
    settings_at,
)
from tests.helpers.replay_llm_server import ReplayServer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli_requests"
# One shell tool's parameters, in each protocol's tool list.
SHELL_SCHEMA = {
    "type": "object",
    "properties": {"command": {"type": "string"}},
    "required": ["command"],
}
SHELL_CHAT = [{"type": "function", "function": {"name": "bash", "parameters": SHELL_SCHEMA}}]
SHELL_MESSAGES = [{"name": "Bash", "input_schema": SHELL_SCHEMA}]
SHELL_GEMINI = [
    {"functionDeclarations": [{"name": "run_shell_command", "parametersJsonSchema": SHELL_SCHEMA}]}
]


def _hostile(trap: str) -> dict[str, Any]:
    """Body fields that would steer the call if they got through, all pointing at ``trap``."""
    return {
        "base_url": f"{trap}/v1",
        "api_base": f"{trap}/v1",
        "api_key": "agent-chosen-key",
        "extra_headers": {"x-evil": "1", "authorization": "Bearer agent-chosen-key"},
        "extra_body": {"api_base": trap},
        "extra_query": {"key": "x"},
        "mock_response": "MOCKED BY THE AGENT",
        "num_retries": 9,
        "max_retries": 9,
        "timeout": 0.001,
        "callbacks": ["langfuse"],
        "success_callback": ["langfuse"],
        "custom_llm_provider": "openai",
        "user_api_key": "agent-chosen-key",
        "litellm_params": {"api_base": trap},
        "litellm_metadata": {"api_base": trap},
        "organization": "org-evil",
        "headers": {"x-evil": "1"},
        "service_tier": "priority",
        "previous_response_id": "resp_other_cell",
        "mcp_servers": [{"type": "url", "url": trap, "name": "evil"}],
    }


HOSTILE_HEADERS = {
    "x-evil": "1",
    "openai-organization": "org-evil",
    "openai-project": "proj-evil",
    "x-goog-user-project": "evil",
    "x-forwarded-host": "evil",
    "cookie": "a=b",
    "anthropic-version": "2023-06-01",
}

# Route name -> (path and query, protocol, the body before the hostile fields are added).
ROUTES = {
    "chat": (
        "/v1/chat/completions",
        "chat",
        {
            "model": "m",
            "messages": [{"role": "user", "content": "go"}],
            "tools": SHELL_CHAT,
            "metadata": {"note": "ok"},
        },
    ),
    "chat-stream": (
        "/v1/chat/completions",
        "chat",
        {
            "model": "m",
            "stream": True,
            "tools": SHELL_CHAT,
            "messages": [{"role": "user", "content": "go"}],
        },
    ),
    "responses": (
        "/v1/responses",
        "responses",
        {
            "model": "m",
            "input": [{"type": "message", "role": "user", "content": "go"}],
            "tools": [
                {
                    "type": "function",
                    "name": "exec_command",
                    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
                },
                {"type": "web_search"},
                {"type": "mcp", "server_url": "TRAP", "server_label": "x"},
            ],
        },
    ),
    "responses-stream": (
        "/v1/responses",
        "responses",
        {
            "model": "m",
            "stream": True,
            "input": [{"type": "message", "role": "user", "content": "go"}],
        },
    ),
    "messages": (
        "/v1/messages",
        "messages",
        {
            "model": "c",
            "max_tokens": 256,
            "messages": [{"role": "user", "content": "go"}],
            "metadata": {"user_id": "u", "api_base": "TRAP"},
            "tools": [*SHELL_MESSAGES, {"type": "web_fetch_20250910", "name": "web_fetch"}],
        },
    ),
    "messages-stream": (
        "/v1/messages",
        "messages",
        {
            "model": "c",
            "max_tokens": 256,
            "stream": True,
            "messages": [{"role": "user", "content": "go"}],
        },
    ),
    "gemini": (
        "/v1beta/models/g:generateContent?key=" + TOKEN,
        "gemini",
        {
            "contents": [{"role": "user", "parts": [{"text": "go"}]}],
            "tools": [*SHELL_GEMINI, {"googleSearch": {}}, {"urlContext": {}}],
            "generationConfig": {"maxOutputTokens": 64, "api_base": "TRAP"},
        },
    ),
    "gemini-stream": (
        "/v1beta/models/g:streamGenerateContent?alt=sse&key=" + TOKEN + "&upload=TRAP",
        "gemini",
        {"contents": [{"role": "user", "parts": [{"text": "go"}]}], "tools": SHELL_GEMINI},
    ),
}


def _body(route: str, trap: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(json.dumps(ROUTES[route][2]).replace("TRAP", trap))
    return body | _hostile(trap)


def _check_forwarded(sent: dict[str, Any], protocol: str, trap: str) -> None:
    """The upstream got the configured key, the gateway's headers and none of the agent's extras."""
    text = json.dumps(sent["body"])
    assert (
        trap.split("//")[1] not in text and "agent-chosen-key" not in text and "MOCKED" not in text
    ), text[:600]
    for name in (
        "base_url",
        "api_base",
        "api_key",
        "extra_headers",
        "extra_body",
        "mock_response",
        "num_retries",
        "timeout",
        "callbacks",
        "custom_llm_provider",
        "user_api_key",
        "service_tier",
        "mcp_servers",
    ):
        assert name not in sent["body"], name
    headers = {k.lower(): v for k, v in sent["headers"].items()}
    assert (
        "x-evil" not in headers and "openai-organization" not in headers and "cookie" not in headers
    )
    assert "x-goog-user-project" not in headers and "openai-project" not in headers
    key_header = {"messages": "x-api-key", "gemini": "x-goog-api-key"}.get(
        protocol, "authorization"
    )
    assert headers[key_header] == (KEY if key_header != "authorization" else f"Bearer {KEY}")
    assert TOKEN not in json.dumps(headers)


@pytest.mark.parametrize("route", list(ROUTES))
def test_native_routes_forward_only_the_allow_list(
    route: str, replay: ReplayServer, trap: Listener, gateways: Any
) -> None:
    gateway, calls = gateways(native_settings(replay))
    suffix, protocol, _ = ROUTES[route]
    before = len(sent_requests(replay))
    response = httpx.post(
        f"{gateway.url}{suffix}",
        json=_body(route, trap.url),
        headers={"authorization": f"Bearer {TOKEN}"} | HOSTILE_HEADERS,
        timeout=60,
    )
    assert response.status_code == 200, response.text[:500]
    assert "MOCKED" not in response.text and "from the listener" not in response.text
    assert trap.hits == []
    [sent] = sent_requests(replay)[before:]
    _check_forwarded(sent, protocol, trap.url)
    assert sent["path"].startswith(
        "/v1beta/models/local-model:" if protocol == "gemini" else "/v1/"
    )
    if route == "gemini-stream":
        assert "event-stream" in response.headers["content-type"] and "upload" not in sent["path"]
    [call] = calls
    assert call.status_code == 200 and call.translated == 0 and call.tokens_in and call.tokens_out
    assert (
        call.error is not None
        and "dropped request fields" in call.error
        and "base_url" in call.error
    )
    tools = json.dumps(sent["body"].get("tools", []))
    assert "web_search" not in tools and "web_fetch" not in tools and "googleSearch" not in tools, (
        tools
    )


@pytest.mark.parametrize("route", ["responses", "responses-stream", "messages", "messages-stream"])
def test_translated_routes_reach_only_the_configured_chat_endpoint(
    route: str, replay: ReplayServer, trap: Listener, gateways: Any
) -> None:
    """A chat-only driver: LiteLLM translates, and gets none of the agent's call settings."""
    gateway, calls = gateways(settings_at(replay.base_url, protocols={"chat": replay.base_url}))
    suffix, protocol, _ = ROUTES[route]
    before = len(sent_requests(replay))
    response = httpx.post(
        f"{gateway.url}{suffix}",
        json=_body(route, trap.url),
        headers={"x-api-key": TOKEN} | HOSTILE_HEADERS,
        timeout=60,
    )
    assert response.status_code == 200, response.text[:500]
    assert "MOCKED" not in response.text and trap.hits == []
    [sent] = sent_requests(replay)[before:]
    assert sent["protocol"] == "chat" and sent["path"] == "/v1/chat/completions"
    _check_forwarded(sent, "chat", trap.url)
    [call] = calls
    assert call.translated == 1 and call.status_code == 200 and call.tokens_in and call.tokens_out
    assert "dropped request fields" in (call.error or "") and "mock_response" in (call.error or "")


def test_gemini_on_a_driver_without_it_and_the_count_routes_reach_nobody(
    replay: ReplayServer, trap: Listener, gateways: Any
) -> None:
    gateway, calls = gateways(settings_at(replay.base_url, protocols={"chat": replay.base_url}))
    before = len(sent_requests(replay))
    gemini = httpx.post(
        f"{gateway.url}/v1beta/models/g:generateContent",
        json=_body("gemini", trap.url),
        headers={"x-goog-api-key": TOKEN},
        timeout=60,
    )
    assert gemini.status_code == 400 and "Gemini" in gemini.json()["error"]["message"]
    count = _body("messages", trap.url) | {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    counted = httpx.post(
        f"{gateway.url}/v1/messages/count_tokens",
        json=count,
        headers={"x-api-key": TOKEN},
        timeout=60,
    )
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0
    wrapped = {
        "generateContentRequest": {"model": "models/g"} | _body("gemini", trap.url)
    } | _hostile(trap.url)
    gemini_count = httpx.post(
        f"{gateway.url}/v1beta/models/g:countTokens",
        json=wrapped,
        headers={"x-goog-api-key": TOKEN},
        timeout=60,
    )
    assert gemini_count.status_code == 200 and gemini_count.json()["totalTokens"] > 0
    bad_model = httpx.post(
        f"{gateway.url}/v1beta/models/g%3Fkey=x:generateContent",
        json=_body("gemini", trap.url),
        headers={"x-goog-api-key": TOKEN},
        timeout=60,
    )
    assert bad_model.status_code in (400, 404)
    assert trap.hits == [] and sent_requests(replay)[before:] == []
    assert [c.status_code for c in calls] == [400]


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_recorded_cli_requests_pass_the_allow_list_whole(path: Path) -> None:
    """What each real CLI sends (tests/fixtures/cli_requests/record.py) loses nothing."""
    for request in json.loads(path.read_text()):
        protocol = request["protocol"]
        allowed, dropped = requests.parse(protocol, request["body"])
        assert dropped == [], (path.stem, dropped)
        assert list(allowed) == list(request["body"])  # the client's order, every field
        headers = request_headers(request["headers"], protocol, KEY)
        assert "gateway-token" not in json.dumps(headers)
        for name in ("anthropic-version", "anthropic-beta"):
            if name in request["headers"]:
                assert headers[name] == request["headers"][name]
        if (
            protocol == "messages"
        ):  # Claude Code's count_tokens calls send the same fields but the output's
            count = {
                k: v
                for k, v in request["body"].items()
                if k in requests.MessagesCountRequest.model_fields
            }
            assert requests.parse("messages_count", count)[1] == []
        if protocol == "gemini":  # the Gemini CLI's countTokens calls: contents, or a whole request
            assert (
                requests.parse("gemini_count", {"contents": request["body"]["contents"]})[1] == []
            )
            assert (
                requests.parse("gemini_count", {"generateContentRequest": request["body"]})[1] == []
            )


def test_recorded_cli_requests_are_served_natively_with_nothing_dropped(
    replay: ReplayServer, gateways: Any
) -> None:
    gateway, calls = gateways(native_settings(replay))
    sent = 0
    for path in sorted(FIXTURES.glob("*.json")):
        for request in json.loads(path.read_text()):
            query = "?alt=sse" if request["path"].endswith(":streamGenerateContent") else ""
            headers = {
                k: v
                for k, v in request["headers"].items()
                if k in ("anthropic-version", "anthropic-beta")
            }
            response = httpx.post(
                f"{gateway.url}{request['path']}{query}",
                json=request["body"],
                headers=headers | {"authorization": f"Bearer {TOKEN}"},
                timeout=60,
            )
            assert response.status_code == 200, (path.stem, response.text[:300])
            sent += 1
    assert len(calls) == sent and all(c.error is None for c in calls), [c.error for c in calls]


@pytest.mark.parametrize("cli", ["codex", "claude-code"])
def test_recorded_cli_requests_are_served_translated(
    cli: str, replay: ReplayServer, gateways: Any
) -> None:
    """Codex and Claude Code on a chat-only driver: LiteLLM takes every field they send."""
    gateway, calls = gateways(settings_at(replay.base_url, protocols={"chat": replay.base_url}))
    [request] = json.loads((FIXTURES / f"{cli}.json").read_text())
    response = httpx.post(
        f"{gateway.url}{request['path']}",
        json=request["body"],
        headers={"x-api-key": TOKEN, "anthropic-version": "2023-06-01"},
        timeout=60,
    )
    assert response.status_code == 200, response.text[:500]
    [call] = calls
    assert call.translated == 1 and call.error is None and call.tokens_in and call.tokens_out


def test_models_and_health_tell_only_the_model_and_the_cells_totals(
    replay: ReplayServer, gateways: Any
) -> None:
    gateway, calls = gateways(settings_at(replay.base_url))
    assert (
        httpx.get(f"{gateway.url}/v1/models", headers={"authorization": "Bearer nope"}).status_code
        == 401
    )
    models = httpx.get(f"{gateway.url}/v1/models", headers={"x-goog-api-key": TOKEN})
    assert models.json()["data"] == [
        {"id": "local-model", "object": "model", "owned_by": "openai_compatible"}
    ]
    health = httpx.get(f"{gateway.url}/health").json()
    assert set(health) == {
        "status",
        "driver",
        "model",
        "calls",
        "tokens_in",
        "tokens_out",
        "cost_usd",
    }
    assert KEY not in json.dumps(health) + models.text and calls == []


def test_a_gemini_call_forwards_only_alt_sse_of_its_query(trap: Listener, gateways: Any) -> None:
    upstream = Listener()  # answers with a JSON body: only the URL it was called at matters here
    try:
        settings = settings_at(f"{upstream.url}/v1", protocols={"gemini": f"{upstream.url}/v1beta"})
        gateway, _ = gateways(settings)
        body = {"contents": [{"role": "user", "parts": [{"text": "go"}]}]}
        query = f"alt=sse&key={TOKEN}&alt=json&uploadType=resumable&$callback=x&url={trap.url}"
        response = httpx.post(
            f"{gateway.url}/v1beta/models/g:streamGenerateContent?{query}", json=body, timeout=30
        )
        assert response.status_code == 200 and trap.hits == []
        [hit] = upstream.hits
        assert hit["path"] == "/v1beta/models/local-model:streamGenerateContent?alt=sse"
        assert hit["headers"]["x-goog-api-key"] == KEY
    finally:
        upstream.close()


def _media_bodies(trap: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """Per protocol: a call whose conversation points the provider at ``trap`` for media."""
    image = f"{trap}/exfil.png?data=secret"
    return {
        "chat": (
            "/v1/chat/completions",
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "look"},
                            {"type": "image_url", "image_url": {"url": image}},
                            {"type": "file", "file": {"file_id": "file-of-another-cell"}},
                        ],
                    }
                ]
            },
        ),
        "responses": (
            "/v1/responses",
            {
                "input": [
                    {
                        "type": "message",
                        "role": "user",
                        "content": [
                            {"type": "input_image", "image_url": image},
                            {"type": "input_file", "file_url": image},
                            {"type": "input_text", "text": "look"},
                        ],
                    }
                ]
            },
        ),
        "messages": (
            "/v1/messages",
            {
                "max_tokens": 64,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "source": {"type": "url", "url": image}},
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "content": [
                                    {
                                        "type": "document",
                                        "source": {"type": "file", "file_id": "file_x"},
                                    }
                                ],
                            },
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "iVBO",
                                },
                            },
                        ],
                    }
                ],
            },
        ),
        "gemini": (
            "/v1beta/models/g:generateContent",
            {
                "contents": [
                    {
                        "role": "user",
                        "parts": [
                            {"text": "look"},
                            {"fileData": {"mimeType": "image/png", "fileUri": image}},
                        ],
                    }
                ]
            },
        ),
    }


@pytest.mark.parametrize("protocol", ["chat", "responses", "messages", "gemini"])
def test_media_given_by_url_or_file_id_never_reaches_the_provider(
    protocol: str, replay: ReplayServer, trap: Listener, gateways: Any
) -> None:
    gateway, calls = gateways(native_settings(replay))
    path, body = _media_bodies(trap.url)[protocol]
    before = len(sent_requests(replay))
    response = httpx.post(
        f"{gateway.url}{path}", json=body, headers={"x-api-key": TOKEN}, timeout=30
    )
    assert response.status_code == 200, response.text[:300]
    [sent] = sent_requests(replay)[before:]
    text = json.dumps(sent["body"])
    assert trap.url not in text and "file_id" not in text and "fileUri" not in text, text
    assert requests.REMOTE_MEDIA_NOTE in text and trap.hits == []
    assert protocol != "messages" or "iVBO" in text  # inline media stays
    assert "remote media" in (calls[0].error or "")


def test_a_deeply_nested_body_is_a_400_not_a_crash(replay: ReplayServer, gateways: Any) -> None:
    gateway, calls = gateways(settings_at(replay.base_url))
    url, headers = f"{gateway.url}/v1/chat/completions", {"authorization": f"Bearer {TOKEN}"}
    before = len(sent_requests(replay))
    for depth in (150, 5000, 200_000):
        nested = "[" * depth + "]" * depth
        content = '{"messages": [{"role": "user", "content": "x", "extra": ' + nested + "}]}"
        response = httpx.post(url, content=content, headers=headers, timeout=30)
        assert response.status_code == 400 and "nested" in response.json()["error"]["message"]
    assert calls == [] and sent_requests(replay)[before:] == []


def test_a_huge_model_name_is_kept_bounded_in_the_record(
    replay: ReplayServer, gateways: Any
) -> None:
    """The model the agent asks for goes into every call's record: a megabyte of it is cut."""
    gateway, calls = gateways(settings_at(replay.base_url))
    body = {"model": "m" * (1 << 20), "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {TOKEN}"},
        timeout=60,
    )
    assert answer.status_code == 200
    [call] = calls
    assert call.requested_model == "m" * 200
