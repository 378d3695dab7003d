"""Judge client against the real local server: protocol, disk cache, concurrency bound, retries,
driver configs."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from autorl.errors import ConfigError, PrerequisiteError
from autorl.judge.cache import JudgeCache, request_key
from autorl.judge.client import JudgeClient, JudgeError, JudgeSpec, load_judge_spec
from autorl.judge.server import LocalJudgeServer

ChatMessages = list[dict[str, str]]


def _chat(text: str) -> ChatMessages:
    return [{"role": "user", "content": text}]


class Counting:
    """A judging model that echoes the prompt and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, messages: ChatMessages) -> str:
        with self.lock:
            self.calls += 1
        return "echo: " + messages[-1]["content"]


def test_server_speaks_openai_chat_completions() -> None:
    with (
        LocalJudgeServer({"echo": Counting()}) as server,
        httpx.Client(base_url=server.base_url) as http,
    ):
        models = http.get("/models").json()
        assert [m["id"] for m in models["data"]] == ["echo"]
        ok = http.post(
            "/chat/completions", json={"model": "echo", "messages": _chat("hi"), "temperature": 0}
        )
        body = ok.json()
        assert ok.status_code == 200 and body["object"] == "chat.completion"
        assert body["choices"][0]["message"] == {"role": "assistant", "content": "echo: hi"}
        assert (
            body["usage"]["total_tokens"]
            == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
        )
        missing = http.post("/chat/completions", json={"model": "gpt-9", "messages": _chat("hi")})
        assert missing.status_code == 404 and "gpt-9" in missing.json()["error"]["message"]
        stream = http.post(
            "/chat/completions", json={"model": "echo", "messages": _chat("hi"), "stream": True}
        )
        assert stream.status_code == 400
        assert http.post("/chat/completions", json={"model": "echo"}).status_code == 422
    with pytest.raises(httpx.TransportError):
        httpx.get(server.base_url + "/models", timeout=2)  # stopped after the with block


def test_answers_are_cached_on_disk_by_judge_and_request(tmp_path: Path) -> None:
    model = Counting()
    with LocalJudgeServer({"echo": model}) as server:
        spec = JudgeSpec(name="local-echo", model="echo", base_url=server.base_url)
        with JudgeClient(
            spec, params={"temperature": 0}, concurrency=2, cache_dir=tmp_path
        ) as client:
            first = client.complete_many([_chat("a"), _chat("b"), _chat("a")])
            assert first == ["echo: a", "echo: b", "echo: a"]
        with JudgeClient(
            spec, params={"temperature": 0}, concurrency=2, cache_dir=tmp_path
        ) as again:
            assert again.complete_many([_chat("b"), _chat("a")]) == ["echo: b", "echo: a"]
            assert again.usage.requests == 0 and again.usage.cache_hits == 2
        calls_so_far = model.calls
        assert 2 <= calls_so_far <= 3  # "a" twice in one batch may race past the cache once
        with JudgeClient(
            spec, params={"temperature": 1}, concurrency=1, cache_dir=tmp_path
        ) as other_params:
            other_params.complete(_chat("a"))
        other_judge = JudgeSpec(name="local-echo-2", model="echo", base_url=server.base_url)
        with JudgeClient(
            other_judge, params={"temperature": 0}, concurrency=1, cache_dir=tmp_path
        ) as other:
            other.complete(_chat("a"))
        assert model.calls == calls_so_far + 2
    files = sorted(p.relative_to(tmp_path).parts[0] for p in tmp_path.rglob("*.json"))
    assert set(files) == {"local-echo_echo", "local-echo-2_echo"}
    request = {"model": "echo", "messages": _chat("b"), "temperature": 0}
    assert JudgeCache(tmp_path, "local-echo/echo").get(request) == "echo: b"
    assert request_key("x", request) != request_key("x", request | {"temperature": 1})


def test_concurrency_is_bounded_and_used() -> None:
    bound = 3
    barrier = threading.Barrier(bound, timeout=20)
    state = {"in_flight": 0, "max": 0}
    lock = threading.Lock()

    def blocking(messages: ChatMessages) -> str:
        with lock:
            state["in_flight"] += 1
            state["max"] = max(state["max"], state["in_flight"])
        try:
            barrier.wait()  # only returns once `bound` requests are in flight together
        finally:
            with lock:
                state["in_flight"] -= 1
        return "M"

    with LocalJudgeServer({"slow": blocking}) as server:
        spec = JudgeSpec(name="local-slow", model="slow", base_url=server.base_url)
        with JudgeClient(spec, params={}, concurrency=bound, cache_dir=None) as client:
            answers = client.complete_many([_chat(str(i)) for i in range(4 * bound)])
    assert answers == ["M"] * (4 * bound)
    assert state["max"] == bound


def test_retries_server_errors_then_gives_up() -> None:
    failures = {"left": 1}

    def flaky(messages: ChatMessages) -> str:
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("transient")
        return "m"

    with LocalJudgeServer({"flaky": flaky, "broken": lambda m: 1 / 0}) as server:  # type: ignore[dict-item]
        spec = JudgeSpec(name="local-flaky", model="flaky", base_url=server.base_url)
        with JudgeClient(spec, params={}, concurrency=1, cache_dir=None, max_retries=2) as client:
            assert client.complete(_chat("x")) == "m"
        broken = JudgeSpec(name="local-broken", model="broken", base_url=server.base_url)
        with (
            JudgeClient(broken, params={}, concurrency=1, cache_dir=None, max_retries=0) as client,
            pytest.raises(JudgeError, match="HTTP 500"),
        ):
            client.complete(_chat("x"))
        unknown = JudgeSpec(name="local-unknown", model="nope", base_url=server.base_url)
        with (
            JudgeClient(unknown, params={}, concurrency=1, cache_dir=None, max_retries=3) as client,
            pytest.raises(JudgeError, match="HTTP 404"),
        ):
            client.complete(_chat("x"))  # not retried: a 404 will not go away


def test_unreachable_judge_is_a_judge_error() -> None:
    spec = JudgeSpec(name="local-down", model="m", base_url="http://127.0.0.1:9/v1")
    with (
        JudgeClient(spec, params={}, concurrency=1, cache_dir=None, max_retries=0) as client,
        pytest.raises(JudgeError, match="unreachable"),
    ):
        client.complete(_chat("x"))


def test_driver_configs() -> None:
    spec = load_judge_spec("gpt-5.2")
    assert (spec.model, spec.base_url, spec.api_key_env) == (
        "gpt-5.2",
        "https://api.openai.com/v1",
        "OPENAI_API_KEY",
    )
    assert spec.identity == "gpt-5.2/gpt-5.2"
    assert load_judge_spec("gemini-2.5-flash").base_url.endswith(
        "/openai"
    )  # its OpenAI-compatible route
    assert (
        spec.price_per_mtok is not None and spec.price_per_mtok.input > 0
    )  # from conf/driver/gpt-5.2.yaml
    # Anthropic's OpenAI-compatible route is protocols.chat, like every other driver's.
    assert load_judge_spec("claude-sonnet-4.5").base_url == "https://api.anthropic.com/v1"
    with pytest.raises(ConfigError, match="cannot judge"):
        load_judge_spec("none")
    with pytest.raises(ConfigError, match="Valid driver names: .*gpt-5.2"):
        load_judge_spec("gpt-5.3-turbo")


def test_missing_api_key_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(PrerequisiteError, match="OPENAI_API_KEY"):
        JudgeClient(load_judge_spec("gpt-5.2"), params={}, concurrency=1, cache_dir=None)
    with pytest.raises(ConfigError, match="at least 1"):
        JudgeClient(
            JudgeSpec("x", "m", "http://127.0.0.1:9"), params={}, concurrency=0, cache_dir=None
        )
