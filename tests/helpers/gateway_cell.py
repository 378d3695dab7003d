"""What the gateway tests share: a recording listener, driver settings, the gateways they start
and an upstream that holds its answers (fixtures ``trap``, ``replay``, ``gateways``, ``gate``).

``tests/unit/conftest.py`` imports the fixtures, so every unit test module has them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autorl.config import compose
from autorl.gateway.app import Gateway
from autorl.gateway.settings import DriverSettings
from autorl.records.types import DriverCall
from tests.helpers.replay_llm_server import ReplayLLM, ReplayServer

TOKEN = "cell-token"
KEY = "real-key"


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
                (answer or chat_answer)(self, body)

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


def chat_answer(handler: http.server.BaseHTTPRequestHandler, _: bytes, tokens: int = 10) -> None:
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


def settings_at(base_url: str, **overrides: Any) -> DriverSettings:
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


def native_settings(replay: ReplayServer) -> DriverSettings:
    """A driver that speaks all four protocols natively, each at the replay server."""
    root = replay.base_url.removesuffix("/v1")
    protocols = {
        "chat": replay.base_url,
        "responses": replay.base_url,
        "messages": replay.base_url,
        "gemini": f"{root}/v1beta",
    }
    return settings_at(replay.base_url, protocols=protocols)


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


def sent_requests(replay: ReplayServer) -> list[dict[str, Any]]:
    log = Path(str(replay.llm.log_path))
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


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
            chat_answer(handler, body, self.usage_tokens)
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
