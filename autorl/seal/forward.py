"""Run a command with TCP ports on loopback forwarded to unix sockets (inside a sealed cell).

A sealed agent has a network namespace of its own with nothing but ``lo``. Its cell's grading
API and driver gateway listen on unix sockets in the cell folder, bound into the sandbox; this
program, started first inside the sandbox, listens on ``127.0.0.1:<port>`` for each socket, starts
the agent's command, copies bytes both ways for every connection, and exits with the command's
exit status once the command ends. So the agent reaches its services at plain ``http://`` URLs
and nothing else is reachable.

Standard library only: it runs with the agent's own interpreter, where autorl is not installed.

Usage::

    python -I -S forward.py --forward 8100=/run/grading.sock [--forward ...] -- command args...
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys

_CHUNK = 1 << 16


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` to ``writer`` until end of file, then half-close the writer."""
    try:
        while chunk := await reader.read(_CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


def _handler(socket_path: str):  # type: ignore[no-untyped-def]  # asyncio's callback type
    # asyncio holds a connection's handler task only while the client is connected (Python 3.11's
    # StreamReaderProtocol drops it in connection_lost): a client that hangs up while its request is
    # still being served left the task unreferenced, garbage-collected mid-flight ("Task was
    # destroyed but it is pending!") with its upstream connection never closed. Held here until it
    # ends.
    running: set[asyncio.Task[None]] = set()

    async def handle(
        client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            running.add(task)
            task.add_done_callback(running.discard)
        try:
            upstream_reader, upstream_writer = await asyncio.open_unix_connection(socket_path)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            _pipe(client_reader, upstream_writer), _pipe(upstream_reader, client_writer)
        )
        for writer in (client_writer, upstream_writer):
            with contextlib.suppress(OSError):
                writer.close()

    return handle


async def _serve(forwards: list[tuple[int, str]], command: list[str]) -> int:
    servers = [
        await asyncio.start_server(_handler(path), "127.0.0.1", port) for port, path in forwards
    ]
    # The listeners are up before the command starts, so its first request finds them.
    proc = subprocess.Popen(command)  # noqa: S603 - the agent's own command, inside its sandbox
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, proc.send_signal, sig)
    code = await loop.run_in_executor(None, proc.wait)
    for server in servers:
        server.close()
    return code


def _parse(argv: list[str]) -> tuple[list[tuple[int, str]], list[str]]:
    if "--" not in argv:
        raise SystemExit("forward.py: the command follows `--`")
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="forward.py")
    parser.add_argument("--forward", action="append", default=[], metavar="PORT=SOCKET")
    args = parser.parse_args(argv[:split])
    forwards = []
    for item in args.forward:
        port, _, path = item.partition("=")
        forwards.append((int(port), path))
    command = argv[split + 1 :]
    if not command:
        raise SystemExit("forward.py: no command after `--`")
    return forwards, command


def main(argv: list[str]) -> int:
    """Forward, run the command, return its exit status (128 + signal when a signal ended it)."""
    forwards, command = _parse(argv)
    code = asyncio.run(_serve(forwards, command))
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main(sys.argv[1:]))
