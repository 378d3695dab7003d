"""Hypothesis strategies for requests to the grading API: through httpx (bodies of every shape and
encoding, odd headers, methods and paths, env calls) and raw bytes over a socket (chunked and odd
framing, Content-Length lies, pipelining, garbage)."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st

from tests.helpers.fuzz_cell import MAX_BODY, TOKEN
from tests.helpers.raw_http import RawRequest, chunked, frame


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, picked in proportion to its weight (``st.one_of`` does not pick
    evenly)."""
    indices = [index for index, (weight, _) in enumerate(choices) for _ in range(weight)]
    return st.sampled_from(indices).flatmap(lambda index: choices[index][1])


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
model_paths = weighted(
    (
        8,
        st.sampled_from(
            [
                "output/copy",
                "output/v1",
                "output/broken",
                "output/v1/",
                "./output/v1",
                "output//copy",
            ]
        ),
    ),
    (
        3,
        st.sampled_from(
            [
                "output/no_config",
                "output/deep_config",
                "output/huge_int_config",
                "output/file",
                "output/link",
                "output/missing",
                "models/tiny",
                "output/../models/tiny",
                "/etc",
                "..",
                "",
                " ",
                "output/v1\x00",
                "output",
                "output/v1/config.json",
            ]
        ),
    ),
    (1, st.text(max_size=40)),
    # Names past NAME_MAX (255 bytes) and paths past PATH_MAX (4096): sampled too, as integers()
    # favours small ones.
    (
        1,
        weighted((1, st.sampled_from([255, 256, 4096, 5000])), (1, st.integers(1, 5000))).map(
            lambda n: "output/" + "a" * n
        ),
    ),
    (1, json_values),
)
episode_ids = weighted(
    (6, st.sampled_from(["train/0", "train/4", "train/5", "train/6", "train/7", "train/9"])),
    (2, st.sampled_from(["eval/0", "eval/3", "train/999", "train/", "", "train/4 "])),
    (1, st.text(max_size=20)),
    (1, json_values),
)
# The sessions the server has open (the httpx phase keeps this up to date), so steps reach live
# episodes.
LIVE_SESSIONS: list[str] = []
session_ids = weighted(
    (
        6,
        st.integers(0, 2**16).map(
            lambda i: LIVE_SESSIONS[i % len(LIVE_SESSIONS)] if LIVE_SESSIONS else "s1"
        ),
    ),
    (1, st.integers(1, 60).map(lambda n: f"s{n}")),
    (1, st.text(max_size=10)),
    (1, json_values),
)
actions = weighted(
    (
        4,
        st.sampled_from(
            [
                "search[shoes]",
                "click[buy now]",
                "click[< prev]",
                "click[next >]",
                "click[back to search]",
                "search[]",
                "click[]",
                "think[hmm]",
                "search",
                "click[" + "x" * 3000 + "]",
            ]
        ),
    ),
    (2, st.text(max_size=60).map(lambda t: f"search[{t}]")),
    (2, st.text(max_size=60).map(lambda t: f"click[{t}]")),
    (1, st.text(max_size=60)),
    (1, json_values),
)


@st.composite
def objects(
    draw: st.DrawFn,
    fields: dict[str, st.SearchStrategy[Any]],
    optional: dict[str, st.SearchStrategy[Any]],
) -> dict[str, Any]:
    """Mostly the fields an endpoint takes; sometimes one missing, one unknown, or with the optional
    ones."""
    shape = draw(st.sampled_from(["complete"] * 6 + ["missing", "unknown", "optional"]))
    chosen = {name: draw(strategy) for name, strategy in fields.items()}
    if shape == "missing" and chosen:
        del chosen[draw(st.sampled_from(sorted(chosen)))]
    elif shape == "unknown":
        chosen[draw(st.text(min_size=1, max_size=8))] = draw(json_values)
    elif shape == "optional":
        chosen |= {name: draw(strategy) for name, strategy in optional.items()}
    return chosen


submit_objects = objects(
    {"model_path": model_paths}, {"wait": weighted((3, st.booleans()), (1, json_values))}
)
env_objects = {
    "/env/reset": objects({"episode_id": episode_ids}, {}),
    "/env/step": objects({"session_id": session_ids, "action": actions}, {}),
    "/env/close": objects({"session_id": session_ids}, {}),
}


def nested(depth: int, kind: str) -> bytes:
    """``depth`` levels of arrays or objects, closed or left open."""
    if kind == "arrays":
        return b"[" * depth + b"]" * depth
    if kind == "objects":
        return b'{"model_path":' * depth + b"1" + b"}" * depth
    return b"[" * depth


special_bodies = st.one_of(
    st.tuples(st.integers(2, 6000), st.sampled_from(["arrays", "objects", "open"])).map(
        lambda t: nested(*t)
    ),
    st.sampled_from(
        [
            b"[" * 5000,
            b'{"session_id": "s1", "action": ' + b"[" * 5000,  # the bodies that got a 500
            b"1e999999",
            b"-1e999",
            b'{"model_path": 1e999}',
            b'{"wait": -Infinity}',
            b"NaN",
            b'{"model_path": NaN}',
            b'{"model_path": "output/v1", "wait": 1' + b"0" * 5000 + b"}",
            b"1" * 4400,
            b'{"session_id": "\\ud800", "action": "x"}',
            b'{"model_path": "\\udfff"}',
            b'{"episode_id": "\\ud83d"}',
            b'{"model_path": "\xff\xfe"}',
            b"\xc3\x28",
            b"\xef\xbb\xbf{}",
            b'{"model_path": "output/v1"',
            b"",
            b" ",
            b"null",
            b"{}",
            b'{"model_path": "output/v1"}' * 2,
        ]
    ),
    st.integers(MAX_BODY - 64, MAX_BODY + 64).map(lambda n: b'{"model_path": "' + b"x" * n + b'"}'),
    st.binary(max_size=300),
)
encodings = st.sampled_from(
    ["utf-8"] * 6 + ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1"]
)


def encoded(objects: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[bytes]:
    """JSON documents in one of the encodings JSON's detection accepts (and latin-1, which it does
    not)."""
    return st.tuples(objects, encodings, st.booleans()).map(
        lambda t: json.dumps(t[0], ensure_ascii=t[2]).encode(t[1], errors="replace")
    )


def bodies_for(path: str) -> st.SearchStrategy[bytes]:
    """Bodies for ``path``: mostly its own JSON objects (encoded), sometimes a special body."""
    objects = (
        submit_objects
        if path == "/submit"
        else env_objects.get(path, st.one_of(submit_objects, *env_objects.values()))
    )
    return weighted((4, encoded(objects)), (1, special_bodies))


# Header values h11 lets a client send: letters, digits, punctuation and symbols of latin-1, as
# bytes.
odd_values = st.text(
    st.characters(codec="latin-1", categories=("L", "N", "P", "S")), min_size=1, max_size=40
).map(lambda t: t.encode("latin-1"))
odd_authorizations = st.one_of(
    st.sampled_from(
        [
            None,
            b"Bearer wrong",
            f"bearer {TOKEN}".encode(),
            f"Bearer   {TOKEN}".encode(),
            f"Basic {TOKEN}".encode(),
            b"Bearer",
            f"Bearer {TOKEN}x".encode(),
            f"Bearer {TOKEN[:-1]}".encode(),
        ]
    ),
    odd_values.map(lambda v: b"Bearer " + v),
    odd_values,
)
authorizations = weighted(
    (9, st.just(f"Bearer {TOKEN}".encode())), (1, odd_authorizations)
)  # most bodies reach a handler
content_types = st.sampled_from(
    [
        None,
        b"application/json",
        b"application/json; charset=utf-16",
        b"text/plain",
        b"multipart/form-data; boundary=x",
        b"application/x-www-form-urlencoded",
        b"\xe9/\xff",
    ]
)


@dataclass(frozen=True)
class HttpxRequest:
    """A request as httpx sends it (well-formed HTTP, whatever the content)."""

    method: str
    path: str
    headers: dict[bytes, bytes]
    body: bytes


def authorized(path: str, body: bytes) -> HttpxRequest:
    """A POST with the token."""
    return HttpxRequest("POST", path, {b"Authorization": f"Bearer {TOKEN}".encode()}, body)


@st.composite
def httpx_requests(draw: st.DrawFn) -> HttpxRequest:
    """One request: mostly well-addressed POSTs with odd bodies, also odd methods, paths and
    headers."""
    kind = draw(st.sampled_from(["submit"] * 7 + ["env"] * 9 + ["anything"] * 4))
    if kind == "submit":
        method, path = "POST", "/submit"
    elif kind == "env":
        method, path = (
            "POST",
            draw(st.sampled_from(["/env/reset"] * 2 + ["/env/step"] * 5 + ["/env/close"])),
        )
    else:
        method = draw(
            st.sampled_from(
                ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "FOO"]
            )
        )
        path = draw(
            st.one_of(
                st.sampled_from(
                    [
                        "/health",
                        "/time",
                        "/submissions",
                        "/submissions/",
                        "/env/episodes",
                        "/submit",
                        "/",
                        "/set_baseline",
                        "/docs",
                        "/openapi.json",
                        "/health?x=1",
                        "//health",
                        "/HEALTH",
                    ]
                ),
                st.one_of(
                    st.integers(-5, 5).map(str),
                    st.just("99999999999999999999"),
                    st.just("9" * 5000),
                    st.just("1.5"),
                    st.just("abc"),
                    st.just("%ff"),
                    st.just("١"),
                    st.text(max_size=20),
                ).map(lambda s: "/submissions/" + quote(s, safe="")),
                st.text(max_size=30).map(lambda s: "/" + quote(s, safe="/")),
            )
        )
    headers: dict[bytes, bytes] = {}
    authorization = draw(authorizations)
    if authorization is not None:
        headers[b"Authorization"] = authorization
    content_type = draw(st.one_of(st.just(b"application/json"), content_types))
    if content_type is not None:
        headers[b"Content-Type"] = content_type
    body = draw(bodies_for(path)) if method not in ("GET", "HEAD") or draw(st.booleans()) else b""
    if draw(st.sampled_from([False] * 19 + [True])):  # compressed: the API takes plain JSON only
        headers[b"Content-Encoding"] = draw(
            st.sampled_from([b"gzip", b"deflate", b"br", b"identity", b"GZIP"])
        )
        body = gzip.compress(body) if headers[b"Content-Encoding"].lower() == b"gzip" else body
    return HttpxRequest(method, path, headers, body)


AUTH = (b"Authorization", f"Bearer {TOKEN}".encode())
CLOSE = (b"Connection", b"close")
CHUNKED = (b"Transfer-Encoding", b"chunked")
GARBAGE = [
    b"GET\r\n\r\n",
    b"GET / HTTP/9.9\r\n\r\n",
    b"\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    b"CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET http://127.0.0.1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
    + TOKEN.encode()
    + b"\r\n\r\n",
    b"GET /h\xc3\xa9alth HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 70_000 + b"\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
    + TOKEN.encode()
    + b"\r\nContent-Length: 3\r\n\r\n{}}",
]


@st.composite
def raw_requests(draw: st.DrawFn) -> RawRequest:
    """Bytes httpx will not send: chunked and odd framing, Content-Length lies, pipelining,
    garbage."""
    path = draw(
        st.sampled_from(
            ["/submit", "/env/reset", "/env/step", "/env/close", "/health", "/submissions/1"]
        )
    )
    method = "GET" if path in ("/health", "/submissions/1") and draw(st.booleans()) else "POST"
    body = draw(bodies_for(path))
    framing = draw(
        st.sampled_from(
            [
                "chunked",
                "chunked",
                "chunked-ext",
                "chunked-bad",
                "chunked-open",
                "length-short",
                "length-long",
                "length-and-chunked",
                "te-odd",
                "length-bad",
                "pipelined",
                "expect",
                "http10",
                "garbage",
                "binary",
            ]
        )
    )
    if framing in ("chunked", "chunked-ext"):
        cuts = draw(st.lists(st.integers(0, len(body)), max_size=6))
        extension, trailer = (
            (b";name=value", b"X-Trailer: 1\r\n") if framing == "chunked-ext" else (b"", b"")
        )
        return RawRequest(
            frame(method, path, [AUTH, CHUNKED], chunked(body, cuts, extension, trailer)), 1
        )
    if framing == "chunked-bad":
        size = draw(
            st.sampled_from(
                [b"zz", b"-1", b"f" * 30, b"", b"1 1", b"0x10", b"%x" % (len(body) + 5)]
            )
        )
        request = frame(method, path, [AUTH, CHUNKED], size + b"\r\n" + body + b"\r\n0\r\n\r\n")
        return RawRequest(
            request, 0, half_close=True
        )  # a size larger than the data leaves the server waiting
    if framing == "chunked-open":  # never sends the last chunk
        return RawRequest(
            frame(method, path, [AUTH, CHUNKED], b"%x\r\n%s\r\n" % (len(body), body)),
            0,
            half_close=True,
        )
    if (
        framing == "length-short"
    ):  # Content-Length smaller than the body: the rest reads as a next request
        declared = draw(st.integers(0, max(0, len(body) - 1)))
        return RawRequest(
            frame(
                method, path, [AUTH, (b"Content-Length", b"%d" % declared), CLOSE], body + b"tail"
            ),
            1,
        )
    if (
        framing == "length-long"
    ):  # Content-Length larger than the body: the server waits for the rest
        extra = draw(st.integers(1, 10_000_000))
        return RawRequest(
            frame(method, path, [AUTH, (b"Content-Length", b"%d" % (len(body) + extra))], body),
            0,
            half_close=True,
        )
    if framing == "length-and-chunked":
        headers = [AUTH, (b"Content-Length", b"%d" % len(body)), CHUNKED]
        return RawRequest(frame(method, path, headers, chunked(body, [])), 1)
    if framing == "te-odd":
        value = draw(
            st.sampled_from(
                [
                    b"gzip",
                    b"chunked, gzip",
                    b"gzip, chunked",
                    b"identity",
                    b"Chunked",
                    b"chunked, chunked",
                ]
            )
        )
        return RawRequest(
            frame(method, path, [AUTH, (b"Transfer-Encoding", value)], chunked(body, [])), 1
        )
    if framing == "length-bad":
        value = draw(
            st.sampled_from(
                [b"abc", b"-1", b"1 2", b"9" * 25, b"1e3", b"", b"+5", b"0x10", b"5, 6"]
            )
        )
        return RawRequest(frame(method, path, [AUTH, (b"Content-Length", value)], body), 1)
    if framing == "pipelined":
        first = frame("POST", "/submit", [AUTH, (b"Content-Length", b"%d" % len(body))], body)
        return RawRequest(first + frame("GET", "/health", [AUTH]), 2)
    if framing == "expect":
        expect = [AUTH, (b"Content-Length", b"%d" % len(body)), (b"Expect", b"100-continue")]
        return RawRequest(frame(method, path, expect, body), 1)
    if framing == "http10":
        return RawRequest(
            frame(
                method,
                path,
                [AUTH, (b"Content-Length", b"%d" % len(body))],
                body,
                version=b"HTTP/1.0",
            ),
            1,
        )
    if framing == "garbage":
        return RawRequest(draw(st.sampled_from(GARBAGE)), 1)
    return RawRequest(draw(st.binary(min_size=1, max_size=200)), 0, half_close=True)
