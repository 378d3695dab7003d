"""The driver gateway against a hostile agent, over real HTTP (docs/threat-model.md).

Two real listeners: the configured upstream (the replay LLM server, or a gated stand-in where a
test must hold calls open) and a trap that must never be called. Every byte of each request comes
from the agent: fields that would choose the upstream, its key, headers, retries or a mocked
answer are dropped on every route, native and translated; budgets hold under concurrency; a
stream the agent cuts short is still charged; an oversized body is refused while it arrives.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from autorl.config import compose
from autorl.gateway import requests
from autorl.gateway.app import Gateway
from autorl.gateway.settings import DriverSettings
from autorl.gateway.upstream import request_headers
from autorl.records.types import DriverCall
from autorl.schema import PricePerMtok
from tests.helpers.replay_llm_server import ReplayLLM, ReplayServer

TOKEN = "cell-token"
KEY = "real-key"
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


class Listener:
    """A plain HTTP server on loopback that records every request it gets.

    Args:
        answer: ``(handler, body) -> None``, writes the response; the default answers 200 with a
            chat completion, so a call that leaks here would look like it worked.
    """

    def __init__(self, answer: Any = None) -> None:
        self.hits: list[dict[str, Any]] = []
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                listener.hits.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                (answer or _chat_answer)(self, body)

            do_GET = do_POST  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        """The listener's root URL."""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()


def _chat_answer(handler: http.server.BaseHTTPRequestHandler, _: bytes, tokens: int = 10) -> None:
    data = json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "from the listener"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": tokens,
                "completion_tokens": tokens,
                "total_tokens": 2 * tokens,
            },
        }
    ).encode()
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _settings(base_url: str, **overrides: Any) -> DriverSettings:
    """The ``local`` driver at ``base_url``; ``field=value`` or ``section__field=value`` set
    its values."""
    cfg = compose(["driver=local", f"driver.base_url={base_url}"]).driver
    for key, value in overrides.items():
        section, _, name = key.partition("__")
        if name:
            cfg = dataclasses.replace(
                cfg, **{section: dataclasses.replace(getattr(cfg, section), **{name: value})}
            )
        else:
            cfg = dataclasses.replace(cfg, **{section: value})
    return DriverSettings.from_config(cfg)


def _native_settings(replay: ReplayServer) -> DriverSettings:
    """A driver that speaks all four protocols natively, each at the replay server."""
    root = replay.base_url.removesuffix("/v1")
    protocols = {
        "chat": replay.base_url,
        "responses": replay.base_url,
        "messages": replay.base_url,
        "gemini": f"{root}/v1beta",
    }
    return _settings(replay.base_url, protocols=protocols)


@pytest.fixture(scope="module")
def trap() -> Iterator[Listener]:
    listener = Listener()
    yield listener
    listener.close()


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplayServer]:
    server = ReplayServer(
        ReplayLLM(["echo hi"], "done", tmp_path_factory.mktemp("replay") / "requests.jsonl")
    ).start()
    yield server
    server.stop()


@pytest.fixture()
def gateways() -> Iterator[Any]:
    started: list[Gateway] = []

    def make(settings: DriverSettings, **kwargs: Any) -> tuple[Gateway, list[DriverCall]]:
        calls: list[DriverCall] = []
        gateway = Gateway(
            settings, token=TOKEN, api_key=KEY, cell_id="c1", sink=calls.append, **kwargs
        )
        gateway.start()
        started.append(gateway)
        return gateway, calls

    yield make
    for gateway in started:
        gateway.stop()


def _sent(replay: ReplayServer) -> list[dict[str, Any]]:
    log = Path(str(replay.llm.log_path))
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


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
    gateway, calls = gateways(_native_settings(replay))
    suffix, protocol, _ = ROUTES[route]
    before = len(_sent(replay))
    response = httpx.post(
        f"{gateway.url}{suffix}",
        json=_body(route, trap.url),
        headers={"authorization": f"Bearer {TOKEN}"} | HOSTILE_HEADERS,
        timeout=60,
    )
    assert response.status_code == 200, response.text[:500]
    assert "MOCKED" not in response.text and "from the listener" not in response.text
    assert trap.hits == []
    [sent] = _sent(replay)[before:]
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
    gateway, calls = gateways(_settings(replay.base_url, protocols={"chat": replay.base_url}))
    suffix, protocol, _ = ROUTES[route]
    before = len(_sent(replay))
    response = httpx.post(
        f"{gateway.url}{suffix}",
        json=_body(route, trap.url),
        headers={"x-api-key": TOKEN} | HOSTILE_HEADERS,
        timeout=60,
    )
    assert response.status_code == 200, response.text[:500]
    assert "MOCKED" not in response.text and trap.hits == []
    [sent] = _sent(replay)[before:]
    assert sent["protocol"] == "chat" and sent["path"] == "/v1/chat/completions"
    _check_forwarded(sent, "chat", trap.url)
    [call] = calls
    assert call.translated == 1 and call.status_code == 200 and call.tokens_in and call.tokens_out
    assert "dropped request fields" in (call.error or "") and "mock_response" in (call.error or "")


def test_gemini_on_a_driver_without_it_and_the_count_routes_reach_nobody(
    replay: ReplayServer, trap: Listener, gateways: Any
) -> None:
    gateway, calls = gateways(_settings(replay.base_url, protocols={"chat": replay.base_url}))
    before = len(_sent(replay))
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
    assert trap.hits == [] and _sent(replay)[before:] == []
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
    gateway, calls = gateways(_native_settings(replay))
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
    gateway, calls = gateways(_settings(replay.base_url, protocols={"chat": replay.base_url}))
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


class Gate:
    """A chat-completions upstream that holds every answer until :meth:`open` (or a timeout).

    JSON calls wait before answering; streamed ones send the first content chunk at once and the
    rest, with the usage (``usage_tokens`` each way), after the gate opens.
    """

    def __init__(self, usage_tokens: int = 10) -> None:
        self.event = threading.Event()
        self.usage_tokens = usage_tokens
        self.listener = Listener(self._answer)

    def open(self) -> None:
        """Let every held answer go."""
        self.event.set()

    def _answer(self, handler: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
        request = json.loads(body)
        if not request.get("stream"):
            self.event.wait(10)
            _chat_answer(handler, body, self.usage_tokens)
            return
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.end_headers()  # HTTP/1.0: the body ends when the connection closes
        base = {"id": "x", "object": "chat.completion.chunk", "model": "m"}
        with contextlib.suppress(OSError):
            first = base | {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": "Hello there, a long"},
                        "finish_reason": None,
                    }
                ]
            }
            handler.wfile.write(f"data: {json.dumps(first)}\n\n".encode())
            handler.wfile.flush()
            self.event.wait(10)
            usage = {"prompt_tokens": self.usage_tokens, "completion_tokens": self.usage_tokens}
            rest = [
                base
                | {
                    "choices": [
                        {"index": 0, "delta": {"content": " answer"}, "finish_reason": "stop"}
                    ]
                },
                base | {"choices": [], "usage": usage},
            ]
            handler.wfile.write(
                b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in rest) + b"data: [DONE]\n\n"
            )


@pytest.fixture()
def gate() -> Iterator[Gate]:
    upstream = Gate()
    yield upstream
    upstream.open()
    upstream.listener.close()


def _concurrent(gateway: Gateway, gate: Gate, body: dict[str, Any], count: int = 8) -> list[int]:
    """Send ``count`` calls at once; open the gate once the refused ones are answered."""

    def post(_: int) -> int:
        return httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {TOKEN}"},
            timeout=30,
        ).status_code

    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(post, i) for i in range(count)]
        deadline = time.monotonic() + 10
        while (
            sum(f.done() for f in futures) + len(gate.listener.hits) < count
            and time.monotonic() < deadline
        ):
            time.sleep(0.02)
        gate.open()
        return sorted(f.result() for f in futures)


SMALL = {"max_tokens": 1000, "messages": [{"role": "user", "content": "hi"}]}


def test_concurrent_calls_cannot_overrun_the_token_budget(gate: Gate, gateways: Any) -> None:
    # Each call reserves ~23 input tokens (bytes / 4) + 1000 output: four fit in 5000, five do not.
    gateway, calls = gateways(_settings(f"{gate.listener.url}/v1", budget__max_tokens=5000))
    statuses = _concurrent(gateway, gate, SMALL)
    assert statuses == [200] * 4 + [429] * 4 and len(gate.listener.hits) == 4
    assert all(
        "driver.budget.max_tokens=5000" in (c.error or "") for c in calls if c.status_code == 429
    )
    assert gateway.totals()["tokens_in"] == 40 and gateway.ledger.reserved() == (0, 0.0)


def test_concurrent_calls_cannot_overrun_the_cost_budget(gate: Gate, gateways: Any) -> None:
    # At $1/$2 per Mtok one call may cost up to ~$0.00202: four fit in $0.0085, five do not.
    settings = _settings(
        f"{gate.listener.url}/v1",
        price_per_mtok=PricePerMtok(input=1.0, output=2.0),
        budget__max_cost_usd=0.0085,
    )
    gateway, calls = gateways(settings)
    statuses = _concurrent(gateway, gate, SMALL)
    assert statuses == [200] * 4 + [429] * 4 and len(gate.listener.hits) == 4
    assert all(
        "driver.budget.max_cost_usd=0.0085" in (c.error or "")
        for c in calls
        if c.status_code == 429
    )
    assert gateway.totals()["cost_usd"] == pytest.approx(4 * 30 / 1e6)


def test_a_call_without_a_maximum_reserves_the_drivers_default(gate: Gate, gateways: Any) -> None:
    settings = _settings(
        f"{gate.listener.url}/v1", budget__max_tokens=5000, budget__default_max_output_tokens=2000
    )
    gateway, _ = gateways(settings)
    body = {"messages": [{"role": "user", "content": "hi"}]}
    assert _concurrent(gateway, gate, body, count=4) == [200, 200, 429, 429]


def _read_first_chunk_and_close(url: str, body: dict[str, Any], headers: dict[str, str]) -> str:
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", url, json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        for chunk in response.iter_text():
            if "Hello" in chunk or "text_delta" in chunk or "output_text.delta" in chunk:
                return chunk
    raise AssertionError("no content chunk")


def _wait_for(calls: list[DriverCall], count: int) -> None:
    deadline = time.monotonic() + 10
    while len(calls) < count and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.mark.parametrize("route", ["chat", "messages"])
def test_a_stream_closed_early_is_charged(route: str, gate: Gate, gateways: Any) -> None:
    """Native chat and Messages translated through LiteLLM: closed after the first content, the
    call is charged its input estimate and the relayed output, and marked estimated."""
    gate.usage_tokens = 200_000  # what the provider would have reported at the end
    gateway, calls = gateways(
        _settings(f"{gate.listener.url}/v1", protocols={"chat": f"{gate.listener.url}/v1"})
    )
    body = {
        "model": "m",
        "stream": True,
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi " * 200}],
    }
    suffix = "/v1/chat/completions" if route == "chat" else "/v1/messages"
    for _ in range(3):
        _read_first_chunk_and_close(f"{gateway.url}{suffix}", body, {"x-api-key": TOKEN})
    _wait_for(calls, 3)
    assert len(calls) == 3
    for call in calls:
        assert (
            call.tokens_in is not None and call.tokens_in >= 150
        )  # the ~600-byte prompt's estimate
        assert call.tokens_out is not None and call.tokens_out >= 1
        assert "stream closed by the client before usage; tokens estimated" in (call.error or "")
        assert call.translated == int(route == "messages")
    totals = gateway.totals()
    assert (
        totals["tokens_in"] == sum(c.tokens_in or 0 for c in calls) > 0
        and gateway.ledger.reserved()[0] == 0
    )


def test_a_huge_body_is_refused_while_it_arrives(replay: ReplayServer, gateways: Any) -> None:
    gateway, calls = gateways(_settings(replay.base_url), max_body_bytes=1 << 20)
    port = int(gateway.url.rsplit(":", 1)[1])
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\n"
        "content-type: application/json\r\n"
    )

    # A declared length over the limit: refused before a byte of the body is sent.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"{head}content-length: {64 << 20}\r\n\r\n".encode())
        assert sock.recv(200).startswith(b"HTTP/1.1 413")

    # Chunked, no length: refused once the limit is passed, long before the 64 MiB are sent.
    sent, answer = 0, b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"{head}transfer-encoding: chunked\r\n\r\n".encode())
        piece = b"x" * (64 << 10)
        pending = b""
        deadline = time.monotonic() + 20
        while not answer and time.monotonic() < deadline:
            readable, writable, _ = select.select([sock], [sock] if sent < 64 << 20 else [], [], 1)
            if readable:
                answer = sock.recv(200)
                break
            if writable:
                pending = pending or b"%x\r\n%s\r\n" % (len(piece), piece)
                try:
                    done = sock.send(pending)
                except OSError:  # the gateway closed the connection: its answer is waiting
                    answer = sock.recv(200)
                    break
                pending, sent = pending[done:], sent + done
    assert answer.startswith(b"HTTP/1.1 413") and sent < 16 << 20, (answer[:40], sent)
    assert calls == []


def test_models_and_health_tell_only_the_model_and_the_cells_totals(
    replay: ReplayServer, gateways: Any
) -> None:
    gateway, calls = gateways(_settings(replay.base_url))
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
        settings = _settings(f"{upstream.url}/v1", protocols={"gemini": f"{upstream.url}/v1beta"})
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
    gateway, calls = gateways(_native_settings(replay))
    path, body = _media_bodies(trap.url)[protocol]
    before = len(_sent(replay))
    response = httpx.post(
        f"{gateway.url}{path}", json=body, headers={"x-api-key": TOKEN}, timeout=30
    )
    assert response.status_code == 200, response.text[:300]
    [sent] = _sent(replay)[before:]
    text = json.dumps(sent["body"])
    assert trap.url not in text and "file_id" not in text and "fileUri" not in text, text
    assert requests.REMOTE_MEDIA_NOTE in text and trap.hits == []
    assert protocol != "messages" or "iVBO" in text  # inline media stays
    assert "remote media" in (calls[0].error or "")


def test_a_deeply_nested_body_is_a_400_not_a_crash(replay: ReplayServer, gateways: Any) -> None:
    gateway, calls = gateways(_settings(replay.base_url))
    url, headers = f"{gateway.url}/v1/chat/completions", {"authorization": f"Bearer {TOKEN}"}
    before = len(_sent(replay))
    for depth in (150, 5000, 200_000):
        nested = "[" * depth + "]" * depth
        content = '{"messages": [{"role": "user", "content": "x", "extra": ' + nested + "}]}"
        response = httpx.post(url, content=content, headers=headers, timeout=30)
        assert response.status_code == 400 and "nested" in response.json()["error"]["message"]
    assert calls == [] and _sent(replay)[before:] == []


def test_a_huge_model_name_is_kept_bounded_in_the_record(
    replay: ReplayServer, gateways: Any
) -> None:
    """The model the agent asks for goes into every call's record: a megabyte of it is cut."""
    gateway, calls = gateways(_settings(replay.base_url))
    body = {"model": "m" * (1 << 20), "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(f"{gateway.url}/v1/chat/completions", json=body,
                        headers={"authorization": f"Bearer {TOKEN}"}, timeout=60)
    assert answer.status_code == 200
    [call] = calls
    assert call.requested_model == "m" * 200
