"""A raw HTTP/1.x client for tests that send what httpx will not: odd framing, lies, pipelining,
garbage.

:func:`frame` and :func:`chunked` build request bytes; :func:`send_raw` sends them on a fresh
connection and reads back the answers (:func:`answers_in` parses responses off the byte stream).
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class RawRequest:
    """Bytes sent as they are on a fresh connection."""

    data: bytes
    answers: (
        int  # how many final answers the server owes: 0 when the request is incomplete or not HTTP
    )
    half_close: bool = False  # end the sending side, so that the server stops waiting for the rest


def frame(
    method: str,
    target: str,
    headers: list[tuple[bytes, bytes]],
    body: bytes = b"",
    version: bytes = b"HTTP/1.1",
) -> bytes:
    """An HTTP/1.x request: request line, Host, ``headers``, then ``body`` as it is (no framing
    added)."""
    lines = [method.encode() + b" " + target.encode() + b" " + version, b"Host: 127.0.0.1"]
    lines += [name + b": " + value for name, value in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def chunked(body: bytes, cuts: list[int], extension: bytes = b"", trailer: bytes = b"") -> bytes:
    """``body`` in chunked transfer coding, cut at ``cuts``, each chunk size followed by
    ``extension``."""
    pieces, start = [], 0
    for cut in sorted({min(c, len(body)) for c in cuts} | {len(body)}):
        if cut > start:
            pieces.append(b"%x%s\r\n%s\r\n" % (cut - start, extension, body[start:cut]))
            start = cut
    return b"".join(pieces) + b"0\r\n" + trailer + b"\r\n"


@dataclass(frozen=True)
class Answer:
    """One HTTP response read off a raw connection."""

    status: int
    closes: bool  # the server ends the connection after it (Connection: close)


def answers_in(data: bytes) -> list[Answer]:
    """The complete HTTP responses at the start of ``data``, in order."""
    statuses: list[Answer] = []
    while data:
        head, separator, rest = data.partition(b"\r\n\r\n")
        if not separator:
            break
        status_line, *header_lines = head.split(b"\r\n")
        match = re.match(rb"HTTP/1\.[01] (\d{3}) ", status_line)
        assert match, f"not an HTTP response: {data[:200]!r}"
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(b":") for line in header_lines)
        }
        status = int(match.group(1))
        if status < 200:
            data = rest
        elif b"content-length" in headers:
            length = int(headers[b"content-length"])
            if len(rest) < length:
                break
            data = rest[length:]
        elif headers.get(b"transfer-encoding") == b"chunked":
            while True:
                size_line, found, rest = rest.partition(b"\r\n")
                if not found:
                    return statuses
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    _, found, rest = rest.partition(b"\r\n")  # the end of the (empty) trailer
                    if not found:
                        return statuses
                    break
                rest = rest[size + 2 :]
            data = rest
        else:  # the body runs to the end of the connection
            data = b""
        statuses.append(Answer(status, headers.get(b"connection", b"").lower() == b"close"))
    return statuses


def send_raw(address: tuple[str, int], request: RawRequest, timeout: float = 10.0) -> list[Answer]:
    """Send ``request`` on a fresh connection; the statuses of the answers, read until all came or
    the server closed."""
    received = b""
    with socket.create_connection(address, timeout=timeout) as sock:
        try:
            sock.sendall(request.data)
            if request.half_close:
                sock.shutdown(socket.SHUT_WR)
        except (
            BrokenPipeError,
            ConnectionResetError,
        ):  # the server answered and closed before all was sent
            pass
        try:
            while not owed_all(answers_in(received), max(request.answers, 1)):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
        except (
            ConnectionResetError
        ):  # closed with our unread bytes pending: what came before is still read
            pass
        except TimeoutError as error:
            raise AssertionError(
                f"no answer in {timeout} s to {request.data[:300]!r}; got {received[:300]!r}"
            ) from error
    return answers_in(received)


def owed_all(answers: list[Answer], owed: int) -> bool:
    """Whether ``answers`` hold the ``owed`` final answers, or end with one that closes the
    connection."""
    finals = [a for a in answers if a.status >= 200]
    return len(finals) >= owed or (bool(finals) and finals[-1].closes)
