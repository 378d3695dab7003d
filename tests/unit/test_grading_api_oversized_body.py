"""The grading API refuses an oversized body without reading it: 64 MiB streamed at the live cell
(chunked, with an honest Content-Length, with a lying one) is refused long before the client is
done, the server's memory unchanged and the server still answering."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers.fuzz_cell import MAX_BODY, TOKEN, Cell, live_cell
from tests.helpers.raw_http import answers_in, frame


@pytest.fixture(scope="module")
def cell(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, cache_dir: Path
) -> Iterator[Cell]:
    yield from live_cell(tmp_path_factory, tiny_model_dir, cache_dir)


@pytest.mark.parametrize("framing", ["chunked", "declared", "length-lie"])
def test_oversized_body_is_refused_without_being_read(cell: Cell, framing: str) -> None:
    """64 MiB streamed at the server: refused (413) after about ``max_body_bytes``, the rest never
    read."""
    total, piece = 64 * 2**20, b"x" * 2**16
    auth = (b"Authorization", f"Bearer {TOKEN}".encode())
    if framing == "chunked":  # no Content-Length: only counting what arrives can stop it
        head = frame("POST", "/submit", [auth, (b"Transfer-Encoding", b"chunked")])
        unit = b"%x\r\n%s\r\n" % (len(piece), piece)
    elif framing == "declared":
        head = frame("POST", "/submit", [auth, (b"Content-Length", b"%d" % total)])
        unit = piece
    else:
        # Content-Length says 100: the server takes 100 bytes as the body and the rest as a (bad)
        # next request
        head = frame("POST", "/submit", [auth, (b"Content-Length", b"100")])
        unit = piece
    rss_before = resident_bytes()
    sent, answered_at, received = 0, -1, bytearray()
    with socket.create_connection(cell.address, timeout=30) as sock:

        def read() -> None:
            nonlocal answered_at
            try:
                while chunk := sock.recv(65536):
                    if answered_at < 0:
                        answered_at = sent
                    received.extend(chunk)
            except OSError:
                pass

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            sock.sendall(head)
            while sent < total:
                sock.sendall(unit)
                sent += len(piece)
        except OSError:  # the server closed the connection: it stopped reading
            pass
        reader.join(30)
    statuses = [a.status for a in answers_in(bytes(received))]
    grown = resident_bytes() - rss_before
    print(
        f"{framing}: answered {statuses} after {answered_at} bytes, sending stopped after {sent}; "
        f"RSS grew {grown} bytes"
    )
    assert statuses and all(400 <= status < 500 for status in statuses), bytes(received[:300])
    if framing != "length-lie":
        assert statuses == [413] and f"over {MAX_BODY} bytes".encode() in received
    assert sent < total // 4, f"the client sent {sent} bytes before the server stopped reading"
    assert 0 <= answered_at < 16 * 2**20, f"the answer came after {answered_at} bytes"
    assert grown < 32 * 2**20
    health = httpx.get(cell.server.url + "/health", headers={"Authorization": f"Bearer {TOKEN}"})
    assert health.status_code == 200


def resident_bytes() -> int:
    """This process's resident memory (the server runs in it, on a thread)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")
