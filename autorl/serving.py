"""Serve an ASGI app with uvicorn on a background thread, on a socket the caller already bound.

The grading API, each cell's driver gateway and the local judge server all run this way. The
socket is bound before the server starts and handed to uvicorn as it is (``sockets=[sock]``), so
no other process can take the address between choosing and serving it: for TCP, bind port 0 with
:func:`bind_tcp` and the kernel picks a free port; a unix socket (:func:`bind_unix`) works the same.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import quote


def bind_tcp(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: a free port the kernel picks), not yet
    listening.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def bind_unix(path: Path) -> socket.socket:
    """A unix stream socket bound to ``path`` (which must not exist yet), not yet listening."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
    except OSError:
        sock.close()
        raise
    return sock


class Endpoints(Protocol):
    """Where a cell's services listen and the URL its agent reaches each at.

    :class:`autorl.seal.launch.CellSeal` is the implementation: loopback TCP for unsealed cells,
    unix sockets forwarded into a sealed cell's network namespace otherwise.
    """

    def bind(self, name: str) -> socket.socket:
        """A bound socket for the service ``name`` (``grading``, ``gateway``)."""
        ...

    def agent_url(self, name: str, served_url: str) -> str:
        """The URL the agent uses for the service ``name``, which is served at ``served_url``."""
        ...


class ServerThread:
    """Runs an ASGI app with uvicorn on a daemon thread, serving on ``sock``.

    Args:
        app: The ASGI app.
        sock: An already-bound stream socket (:func:`bind_tcp`, :func:`bind_unix`); the server
            listens on it and closes it when it stops.
        name: The thread's name, also used in error messages.
        lifespan: uvicorn's ``lifespan`` setting (``"auto"`` runs the app's startup/shutdown
            handlers; ``"off"`` skips them).

    Example:
        >>> async def app(scope, receive, send):
        ...     await send({"type": "http.response.start", "status": 200, "headers": []})
        ...     await send({"type": "http.response.body", "body": b"ok"})
        >>> import urllib.request
        >>> with ServerThread(app, bind_tcp(), name="demo", lifespan="off") as server:
        ...     urllib.request.urlopen(server.url).read()
        b'ok'
    """

    def __init__(
        self, app: Any, sock: socket.socket, *, name: str = "server", lifespan: str = "auto"
    ) -> None:
        import uvicorn

        self.name = name
        self.sock = sock
        self._address = sock.getsockname()
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan=lifespan)  # type: ignore[arg-type]
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=name, daemon=True
        )

    @property
    def url(self) -> str:
        """Base URL of the server: ``http://host:port``, or ``http+unix://<quoted path>`` on a unix
        socket.
        """
        if self.sock.family == socket.AF_UNIX:
            return f"http+unix://{quote(str(self._address), safe='')}"
        host, port = self._address[0], self._address[1]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self, timeout: float = 15.0) -> None:
        """Start serving and return once the server accepts connections.

        Raises:
            RuntimeError: The server did not start within ``timeout`` seconds (or its thread died).
        """
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                self.stop()
                raise RuntimeError(f"{self.name} did not start on {self.url} within {timeout} s")
            time.sleep(0.02)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving and wait (up to ``timeout`` seconds) for the thread."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=timeout)
        self.sock.close()

    def __enter__(self) -> ServerThread:
        """:meth:`start`, for a ``with`` block."""
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """:meth:`stop`."""
        self.stop()
