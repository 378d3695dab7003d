"""The serve-in-a-thread helper: it serves on the socket it is given, TCP or unix, and releases
it."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
from fastapi import FastAPI

from autorl.serving import ServerThread, bind_tcp, bind_unix


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/ping")
    def ping() -> dict[str, str]:
        return {"pong": "yes"}

    return app


def test_serves_on_the_bound_tcp_port_and_frees_it() -> None:
    sock = bind_tcp()
    port = sock.getsockname()[1]
    with ServerThread(_app(), sock, name="t") as server:
        assert server.url == f"http://127.0.0.1:{port}"
        assert httpx.get(f"{server.url}/ping").json() == {"pong": "yes"}
    probe = socket.socket()
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    probe.bind(("127.0.0.1", port))  # stopped: the port is free again
    probe.close()


def test_serves_on_a_unix_socket(tmp_path: Path) -> None:
    path = tmp_path / "api.sock"
    with ServerThread(_app(), bind_unix(path), name="u") as server:
        assert server.url.startswith("http+unix://") and str(path).replace("/", "%2F") in server.url
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(path))) as client:
            assert client.get("http://localhost/ping").json() == {"pong": "yes"}
