"""The driver gateway over real HTTP against the replay LLM server (a stand-in for a paid API)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from autorl.config import compose
from autorl.errors import ConfigError
from autorl.gateway.settings import DriverSettings
from autorl.gateway.usage import SSEUsageParser
from autorl.records.types import DriverCall
from autorl.schema import PricePerMtok
from tests.helpers.replay_llm_server import ReplayLLM, ReplayServer

TOKEN = "cell-token"
SHELL_TOOL_CHAT = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]


def _settings(base_url: str, **overrides: Any) -> DriverSettings:
    """The ``local`` driver at ``base_url``; ``field=value`` or ``section__field=value`` replace its
    values."""
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


@pytest.fixture()
def replay(tmp_path: Path) -> Iterator[ReplayServer]:
    server = ReplayServer(ReplayLLM(["echo hi"], "done", tmp_path / "requests.jsonl")).start()
    yield server
    server.stop()


def _post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(
        url, json=body, headers={"authorization": f"Bearer {TOKEN}"} | (headers or {}), timeout=120
    )


def test_streamed_chat_is_relayed_and_counted(replay: ReplayServer, gateways: Any) -> None:
    gateway, calls = gateways(
        _settings(replay.base_url, price_per_mtok=PricePerMtok(input=1.0, output=2.0))
    )
    body = {
        "model": "whatever",
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
        "tools": SHELL_TOOL_CHAT,
    }
    response = _post(f"{gateway.url}/v1/chat/completions", body)
    assert response.status_code == 200 and response.headers["content-type"].startswith(
        "text/event-stream"
    )
    assert '"name": "bash"' in response.text and "data: [DONE]" in response.text
    # The gateway switched usage reporting on, swapped the model and sent the real key, not the
    # token.
    sent = json.loads((Path(replay.llm.log_path)).read_text().splitlines()[-1])
    assert sent["body"]["stream_options"] == {"include_usage": True}
    assert (
        sent["body"]["model"] == "local-model"
        and sent["headers"]["authorization"] == "Bearer real-key"
    )
    [call] = calls
    assert call.protocol == "chat" and call.stream == 1 and call.requested_model == "whatever"
    assert call.tokens_in and call.tokens_out and call.status_code == 200
    assert call.cost_usd == pytest.approx((call.tokens_in * 1.0 + call.tokens_out * 2.0) / 1e6)
    assert gateway.totals()["tokens_in"] == call.tokens_in


def test_responses_json_and_stream(replay: ReplayServer, gateways: Any) -> None:
    gateway, calls = gateways(_settings(replay.base_url))
    body = {"model": "m", "input": [{"type": "message", "role": "user", "content": "go"}]}
    plain = _post(f"{gateway.url}/v1/responses", body)
    assert plain.status_code == 200 and plain.json()["status"] == "completed"
    streamed = _post(f"{gateway.url}/v1/responses", body | {"stream": True})
    assert "event: response.completed" in streamed.text
    assert [c.stream for c in calls] == [0, 1]
    assert all(c.tokens_in and c.tokens_out for c in calls) and all(
        c.cost_usd is None for c in calls
    )


def test_wrong_token_is_refused_and_the_key_never_reaches_the_agent(
    replay: ReplayServer, gateways: Any
) -> None:
    gateway, calls = gateways(_settings(replay.base_url))
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"messages": []},
        headers={"authorization": "Bearer nope"},
    )
    assert response.status_code == 401 and "gateway token" in response.json()["error"]["message"]
    anthropic_style = httpx.get(f"{gateway.url}/v1/models", headers={"x-api-key": TOKEN})
    assert (
        anthropic_style.status_code == 200
        and anthropic_style.json()["data"][0]["id"] == "local-model"
    )
    assert calls == []


def test_token_budget_gives_429_with_a_clear_message(replay: ReplayServer, gateways: Any) -> None:
    # A call reserves its estimated input plus its largest output before it is forwarded.
    gateway, calls = gateways(_settings(replay.base_url, budget__max_tokens=100))
    body = {"max_tokens": 5, "messages": [{"role": "user", "content": "go"}]}
    assert _post(f"{gateway.url}/v1/chat/completions", body).status_code == 200
    refused = _post(f"{gateway.url}/v1/chat/completions", body | {"max_tokens": 90})
    assert refused.status_code == 429
    assert "driver.budget.max_tokens=100" in refused.json()["error"]["message"]
    anthropic = _post(f"{gateway.url}/v1/messages", {"max_tokens": 100, "messages": []})
    assert anthropic.status_code == 429 and anthropic.json()["type"] == "error"
    assert [c.status_code for c in calls] == [200, 429, 429] and calls[1].error


def test_provider_5xx_is_retried_with_backoff(tmp_path: Path, gateways: Any) -> None:
    server = ReplayServer(ReplayLLM([], "ok", tmp_path / "r.jsonl", fail_first=2)).start()
    try:
        gateway, calls = gateways(_settings(server.base_url, gateway__initial_backoff_s=0.01))
        response = _post(
            f"{gateway.url}/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}
        )
        assert (
            response.status_code == 200
            and response.json()["choices"][0]["message"]["content"] == "autorl replay"
        )
        assert calls[0].attempts == 3 and server.llm.requests == 3
    finally:
        server.stop()


def test_retries_run_out_and_the_provider_error_is_returned(tmp_path: Path, gateways: Any) -> None:
    server = ReplayServer(ReplayLLM([], "ok", tmp_path / "r.jsonl", fail_first=10)).start()
    try:
        gateway, calls = gateways(
            _settings(server.base_url, gateway__initial_backoff_s=0.01, gateway__max_attempts=2)
        )
        response = _post(f"{gateway.url}/v1/chat/completions", {"messages": []})
        assert (
            response.status_code == 503
            and calls[0].attempts == 2
            and "503" in (calls[0].error or "")
        )
    finally:
        server.stop()


def test_anthropic_messages_are_translated_to_chat_by_litellm(
    replay: ReplayServer, gateways: Any
) -> None:
    # A provider that only speaks chat completions (e.g. GPT via OpenAI) serving Claude Code's
    # protocol.
    gateway, calls = gateways(_settings(replay.base_url, protocols={"chat": replay.base_url}))
    tools = [
        {
            "name": "Bash",
            "input_schema": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        }
    ]
    body = {
        "model": "claude-x",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "go"}],
        "tools": tools,
    }
    plain = _post(f"{gateway.url}/v1/messages", body, {"anthropic-version": "2023-06-01"})
    assert plain.status_code == 200, plain.text
    assert plain.json()["content"][0]["type"] == "tool_use" and plain.json()["content"][0][
        "input"
    ] == {"command": "echo hi"}
    streamed = _post(f"{gateway.url}/v1/messages", body | {"stream": True})
    assert (
        streamed.status_code == 200
        and "message_stop" in streamed.text
        and "input_json_delta" in streamed.text
    )
    sent = [json.loads(line) for line in Path(replay.llm.log_path).read_text().splitlines()]
    assert {s["protocol"] for s in sent} == {"chat"}
    assert all(c.translated == 1 and c.tokens_in and c.tokens_out for c in calls)


def test_sse_parser_handles_events_split_across_chunks() -> None:
    parser = SSEUsageParser("responses")
    stream = (
        b'event: response.completed\ndata: {"type": "response.completed", '
        b'"response": {"usage": {"input_tokens": 7, "output_tokens": 2}}}\n\n'
    )
    for index in range(0, len(stream), 5):
        parser.feed(stream[index : index + 5])
    usage = parser.close()
    assert (usage.tokens_in, usage.tokens_out) == (7, 2)


def test_settings_reject_bad_driver_configs() -> None:
    cfg = compose(["driver=gpt-5"]).driver
    with pytest.raises(
        ConfigError,
        match=r"driver\.protocols\.smoke: .*valid: \[chat, responses, messages, gemini\]",
    ):
        compose(
            ["driver=gpt-5", "driver.protocols.smoke=x"]
        )  # the schema refuses it when composing
    with pytest.raises(ConfigError, match="protocols must map"):
        DriverSettings.from_config(dataclasses.replace(cfg, protocols={}))
    with pytest.raises(ConfigError, match="max_attempts must be at least 1"):
        DriverSettings.from_config(
            dataclasses.replace(cfg, gateway=dataclasses.replace(cfg.gateway, max_attempts=0))
        )
    with pytest.raises(ConfigError, match="no provider"):
        DriverSettings.from_config(compose(["driver=none"]).driver)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        DriverSettings.from_config(cfg).api_key({})
    settings = DriverSettings.from_config(cfg)  # the shared fields come from conf/driver/_base.yaml
    assert (settings.provider, settings.protocols, settings.max_attempts) == (
        "openai",
        {"chat": cfg.base_url, "responses": cfg.base_url},
        5,
    )


def test_responses_are_translated_to_chat_by_litellm(replay: ReplayServer, gateways: Any) -> None:
    # Codex's protocol served by a chat-only provider (e.g. Claude through its OpenAI-compatible
    # endpoint).
    gateway, calls = gateways(_settings(replay.base_url, protocols={"chat": replay.base_url}))
    tools = [
        {
            "type": "function",
            "name": "exec_command",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        }
    ]
    body = {
        "model": "gpt-x",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
        ],
        "tools": tools,
    }
    plain = _post(f"{gateway.url}/v1/responses", body)
    assert plain.status_code == 200, plain.text
    [item] = [i for i in plain.json()["output"] if i["type"] == "function_call"]
    assert item["name"] == "exec_command" and json.loads(item["arguments"])["cmd"] == "echo hi"
    streamed = _post(f"{gateway.url}/v1/responses", body | {"stream": True})
    assert (
        streamed.status_code == 200
        and "response.completed" in streamed.text
        and "exec_command" in streamed.text
    )
    sent = [json.loads(line) for line in Path(replay.llm.log_path).read_text().splitlines()]
    assert {s["protocol"] for s in sent} == {"chat"}
    assert all(c.translated == 1 and c.tokens_in and c.tokens_out for c in calls)


def test_recorder_sums_driver_calls_into_the_cell(tmp_path: Path) -> None:
    from autorl.actors.recorder import Recorder
    from autorl.records.types import CellRecord, TraceSummary

    recorder = Recorder(str(tmp_path / "records.sqlite"))
    cell = CellRecord(
        sweep_id="s",
        cell_id="c1",
        agent="codex",
        driver="gpt-5",
        task="gsm8k",
        task_version=1,
        model="tiny",
        seed=0,
        budget_s=60,
        status="running",
        attempts=1,
    )
    recorder.start_attempt(cell)
    call = DriverCall(
        cell_id="c1",
        call_id="a",
        started_at=1.0,
        latency_s=0.1,
        protocol="responses",
        requested_model="x",
        model="gpt-5",
        status_code=200,
        stream=1,
        attempts=1,
        tokens_in=100,
        tokens_out=10,
        cost_usd=0.5,
    )
    recorder.record_driver_calls([call, call])  # a replay of the same call is stored once
    recorder.record_driver_calls(
        [call.__class__(**{**call.__dict__, "call_id": "b", "cost_usd": None})]
    )
    stored = recorder.get_cell("c1")
    assert stored is not None and (
        stored.tokens_in,
        stored.tokens_out,
        stored.cost_usd,
        stored.status,
    ) == (200, 20, 0.5, "running")
    recorder.record_trace(TraceSummary("c1", "codex", 9, 1, 2, 150, 12, 0, "/x/trace.jsonl"))
    assert recorder.store.get_trace("c1").tool_calls == 2  # type: ignore[union-attr]
    recorder.start_attempt(
        dataclasses.replace(cell, attempts=2)
    )  # a new attempt starts from nothing ...
    assert recorder.store.list_driver_calls("c1") == [] and recorder.store.get_trace("c1") is None
    assert (
        len(recorder.store.list_driver_calls("c1", 1)) == 2
    )  # ... and the earlier one's calls are kept


def test_gemini_api_is_passed_through_with_the_google_key_header(
    replay: ReplayServer, gateways: Any
) -> None:
    root = replay.base_url.removesuffix("/v1")
    gateway, calls = gateways(_settings(replay.base_url, protocols={"gemini": f"{root}/v1beta"}))
    body = {
        "contents": [{"role": "user", "parts": [{"text": "go"}]}],
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "run_shell_command",
                        "parametersJsonSchema": {
                            "type": "object",
                            "properties": {"command": {"type": "string"}},
                            "required": ["command"],
                        },
                    }
                ]
            }
        ],
    }
    response = httpx.post(
        f"{gateway.url}/v1beta/models/gemini-x:streamGenerateContent?alt=sse",
        json=body,
        headers={"x-goog-api-key": TOKEN},
        timeout=60,
    )
    assert response.status_code == 200 and '"functionCall"' in response.text
    sent = json.loads(Path(replay.llm.log_path).read_text().splitlines()[-1])
    assert (
        sent["path"] == "/v1beta/models/local-model:streamGenerateContent"
        and sent["headers"]["x-goog-api-key"] == "real-key"
    )
    [call] = calls
    assert (
        call.protocol == "gemini"
        and call.requested_model == "gemini-x"
        and call.tokens_in
        and call.stream == 1
    )


def test_a_driver_session_records_through_a_plain_sink(
    replay: ReplayServer, tmp_path: Path
) -> None:
    """The session and the cell's gateway need no Ray: calls, the flush and the trace go to a
    sink."""
    from autorl.agents.base import load_adapter
    from autorl.agents.session import DriverSession
    from autorl.gateway.settings import GATEWAY_TOKEN_ENV, GATEWAY_URL_ENV
    from autorl.records.types import TraceSummary

    class Sink:
        def __init__(self) -> None:
            self.calls: list[DriverCall] = []
            self.flushes: list[int] = []
            self.traces: list[TraceSummary] = []

        def record_driver_call(self, call: DriverCall) -> None:
            self.calls.append(call)

        def flush(self) -> None:
            self.flushes.append(len(self.calls))

        def record_trace(self, summary: TraceSummary) -> None:
            self.traces.append(summary)

    agent_cfg = compose(["agent=codex"]).agent
    driver_cfg = compose(["driver=local", f"driver.base_url={replay.base_url}"]).driver
    sink = Sink()
    session = DriverSession("c1", tmp_path, agent_cfg, driver_cfg, sink, "127.0.0.1")
    env = session.agent_env({"OPENAI_API_KEY": "provider-secret", "HOME": "/h"})
    assert "OPENAI_API_KEY" not in env and env["HOME"] == "/h"
    session.follow(load_adapter(agent_cfg))
    body = {"model": "m", "messages": [{"role": "user", "content": "go"}]}
    response = httpx.post(
        f"{env[GATEWAY_URL_ENV]}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {env[GATEWAY_TOKEN_ENV]}"},
        timeout=60,
    )
    assert response.status_code == 200
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "agent_streams" / "codex.jsonl"
    (tmp_path / "agent.log").write_text(fixture.read_text())
    usage = session.close()
    [call] = sink.calls
    assert sink.flushes == [1] and (usage["tokens_in"], usage["tokens_out"]) == (
        call.tokens_in,
        call.tokens_out,
    )
    [trace] = sink.traces
    assert (
        trace.cell_id == "c1"
        and trace.tool_calls == 2
        and trace.path == str(tmp_path / "trace.jsonl")
    )


def test_token_counts_are_answered_by_the_gateway_and_cost_nothing(
    replay: ReplayServer, gateways: Any
) -> None:
    """Claude Code's `count_tokens` and the Gemini CLI's `:countTokens`: counted with LiteLLM's
    token
    counter, never sent to the provider, never recorded as a driver call."""
    root = replay.base_url.removesuffix("/v1")
    protocols = {"messages": replay.base_url, "gemini": f"{root}/v1beta"}
    gateway, calls = gateways(_settings(replay.base_url, protocols=protocols))
    url = f"{gateway.url}/v1/messages/count_tokens?beta=true"

    def anthropic(text: str) -> httpx.Response:
        body = {
            "model": "claude-x",
            "system": [{"type": "text", "text": "You are terse."}],
            "tools": [
                {
                    "name": "Bash",
                    "input_schema": {
                        "type": "object",
                        "properties": {"command": {"type": "string"}},
                    },
                }
            ],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": text}]},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "code data"}
                    ],
                },
            ],
        }
        return httpx.post(
            url,
            json=body,
            headers={"x-api-key": TOKEN, "anthropic-version": "2023-06-01"},
            timeout=120,
        )

    short, long = (
        anthropic("hello world").json()["input_tokens"],
        anthropic("hello world" * 101).json()["input_tokens"],
    )
    assert short > 10 and 150 <= long - short <= 250  # ~2 tokens per "hello world"

    gemini_url = f"{gateway.url}/v1beta/models/gemini-x:countTokens"
    contents = [
        {"role": "user", "parts": [{"text": "hello world" * 101}]},
        {"role": "model", "parts": [{"text": "ok"}]},
    ]
    counted = httpx.post(
        gemini_url, json={"contents": contents}, headers={"x-goog-api-key": TOKEN}, timeout=60
    )
    assert counted.status_code == 200 and counted.json()["totalTokens"] > 200
    wrapped = httpx.post(
        gemini_url,
        json={"generateContentRequest": {"model": "models/gemini-x", "contents": contents}},
        headers={"x-goog-api-key": TOKEN},
        timeout=60,
    )
    assert wrapped.json() == counted.json()

    refused = httpx.post(url, json={"messages": []}, headers={"x-api-key": "wrong"}, timeout=60)
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
    bad = httpx.post(
        gemini_url, json={"prompt": "hi"}, headers={"x-goog-api-key": TOKEN}, timeout=60
    )
    assert bad.status_code == 400 and "contents" in bad.json()["error"]["message"]
    # Nothing reached the provider, nothing was recorded or counted against the budget.
    assert calls == [] and gateway.totals()["calls"] == 0 and not Path(replay.llm.log_path).exists()
