"""The grading API under generated requests (issue 12): never a 5xx, never a crash, records
consistent.

One live cell server for the module: the real :class:`GradingServer` (uvicorn on a real socket) over
the real :class:`SubmissionService`, a real :class:`RecordStore` as its sink, the in-process grader,
and the env endpoints of the webshop fixture. Hypothesis generates the requests, derandomized so CI
runs the same ones every time:

- through httpx: bodies (random bytes, JSON of random shape, deep nesting, huge strings and numbers,
  wrong types, UTF-16/32, invalid UTF-8, gzip), headers (token missing, wrong or odd, content
  types),
  methods and paths, and env calls (reset, step, close with random episode ids, sessions and
  actions);
- over a raw socket, what httpx will not send: chunked bodies without Content-Length (well formed
and
  not), Content-Length lies, Transfer-Encoding oddities, pipelined requests, garbage;
- submissions from many threads at once while the grader is held, beyond the queue's limit.

Afterwards the server thread still answers ``/health`` and every submission the API lists is in the
store with the same status, final, ids contiguous from 1. A second test streams 64 MiB at the server
(chunked, with an honest Content-Length, with a lying one) and checks that it refuses them and stops
reading long before the client is done, its memory unchanged.
"""

from __future__ import annotations

import gzip
import json
import shutil
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from autorl.envs.base import EnvSource
from autorl.envs.host import LocalEnvClient, cache_resolver
from autorl.envs.training import TrainingEnvs
from autorl.grading.api import GradingServer
from autorl.grading.service import SubmissionService
from autorl.records.store import RecordStore
from autorl.records.types import SUBMISSION_STATUSES
from autorl.tasks import build_task_data, eval_options, get_task
from tests.helpers.grading_cell import GatedScorer, save_variant, start_grading_cell
from tests.helpers.raw_http import RawRequest, answers_in, chunked, frame, owed_all, send_raw

TOKEN = "fuzz-token"
CELL = "cell-fuzz"
MAX_BODY = (
    65536  # conf/config.yaml's grading_api.max_body_bytes: the 5,000 nested [ fit under it
)
MAX_QUEUED = 3
ENV_BUILD = {"catalogue_size": 24, "train_size": 6, "eval_size": 4}
FINAL = set(SUBMISSION_STATUSES) - {"queued", "scoring"}
# Every phase runs these settings: the same examples on every run (derandomize), no example database
# written into the checkout, no per-example deadline (a submission that gets scored takes seconds).
PHASE = settings(
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
HTTPX_EXAMPLES = 760
RAW_EXAMPLES = 240
THREADS = 12


@dataclass
class Cell:
    """The live server and what the test checks behind it."""

    server: GradingServer
    service: SubmissionService
    store: RecordStore
    scorer: GatedScorer
    sent: Counter[str] = field(default_factory=Counter)  # requests sent, per phase
    statuses: Counter[int] = field(default_factory=Counter)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.sock.getsockname()[:2]
        return host, port


@pytest.fixture(scope="module")
def cell(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, cache_dir: Path
) -> Iterator[Cell]:
    root = tmp_path_factory.mktemp("fuzz-cell")
    spec = get_task("webshop")
    data = build_task_data(spec, "fixture", cache_dir / "tasks", seed=0, options=ENV_BUILD)
    source = EnvSource("webshop", "fixture", 0, ENV_BUILD, eval_options(spec, "fixture"))
    envs = TrainingEnvs(
        "webshop",
        source,
        data.public_dir,
        lambda: LocalEnvClient("webshop", cache_resolver(cache_dir)),
        max_sessions=4,
    )
    live = start_grading_cell(
        root,
        tiny_model_dir,
        cache_dir,
        token=TOKEN,
        cell_id=CELL,
        max_queued=MAX_QUEUED,
        max_body_bytes=MAX_BODY,
        submit_timeout_s=60.0,
        budget_s=3600,
        envs=envs,
    )
    workspace, output = live.workspace, live.workspace / "output"
    try:
        # What the generated submissions name: a copy of the base, a variant to score, corrupt
        # weights (recorded invalid), folders without or with a hostile config.json (422), a file
        # and a link out of output/ (400).
        shutil.copytree(tiny_model_dir, output / "copy")
        save_variant(tiny_model_dir, output / "v1", noise_seed=7)
        shutil.copytree(output / "v1", output / "broken")
        weights = output / "broken" / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
        shutil.copytree(tiny_model_dir, output / "no_config")
        (output / "no_config" / "config.json").unlink()
        (output / "file").write_text("not a model")
        # config.json as an agent could write it to crash the checks: nested past the parser's
        # recursion limit, and an integer past int()'s 4,300 digits (422, not a 500).
        for name, config in (
            ("deep_config", "[" * 100_000),
            ("huge_int_config", '{"vocab_size": ' + "9" * 5000 + "}"),
        ):
            shutil.copytree(tiny_model_dir, output / name)
            (output / name / "config.json").write_text(config)
        (output / "link").symlink_to(workspace / "models" / "tiny")
        yield Cell(live.server, live.service, live.store, live.scorer)
    finally:
        live.close()


# ---- what the requests are made of ------------------------------------------------------------


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


def check_answer(request: HttpxRequest, response: httpx.Response) -> None:
    """No server error, and every error answer says what is wrong (a JSON object with a non-empty
    "error")."""
    assert response.status_code < 500, f"{request} -> {response.status_code} {response.text[:500]}"
    if response.status_code >= 400 and request.method != "HEAD":
        error = response.json().get("error")
        assert isinstance(error, str) and len(error) > 10, (
            f"{request} -> {response.status_code} {response.text[:500]}"
        )


def test_generated_requests_never_get_a_server_error(cell: Cell) -> None:
    host, port = cell.address
    client = httpx.Client(base_url=f"http://{host}:{port}", timeout=60)

    @settings(PHASE, max_examples=HTTPX_EXAMPLES)
    @given(httpx_requests())
    # What got a 500 before, whatever the generator draws: the 5,000 nested [ on /submit and
    # /env/step, a token of non-ASCII bytes, a name past NAME_MAX, an integer past int()'s 4,300
    # digits in the body and in the submitted config.json, a config.json nested past the recursion
    # limit.
    @example(authorized("/submit", b"[" * 5000))
    @example(authorized("/env/step", b'{"session_id": "s1", "action": ' + b"[" * 5000 + b"}"))
    @example(HttpxRequest("GET", "/health", {b"Authorization": b"Bearer \xe9"}, b""))
    @example(authorized("/submit", json.dumps({"model_path": "output/" + "a" * 256}).encode()))
    @example(authorized("/env/reset", b'{"episode_id": ' + b"1" * 4400 + b"}"))
    @example(authorized("/submit", b'{"model_path": "output/deep_config"}'))
    @example(authorized("/submit", b'{"model_path": "output/huge_int_config"}'))
    def through_httpx(request: HttpxRequest) -> None:
        response = client.request(
            request.method, request.path, headers=request.headers, content=request.body
        )
        cell.sent["httpx"] += 1
        cell.statuses[response.status_code] += 1
        check_answer(request, response)
        if response.status_code == 200 and request.path == "/env/reset":
            LIVE_SESSIONS.append(response.json()["session_id"])
        if (
            response.status_code == 200
            and request.path == "/env/close"
            and response.json()["closed"] in LIVE_SESSIONS
        ):
            LIVE_SESSIONS.remove(response.json()["closed"])

    @settings(PHASE, max_examples=RAW_EXAMPLES)
    @given(raw_requests())
    def over_raw_sockets(request: RawRequest) -> None:
        answers = send_raw(cell.address, request)
        cell.sent["raw"] += max(request.answers, 1)
        cell.statuses.update(a.status for a in answers)
        assert all(a.status < 500 for a in answers), f"{request.data[:300]!r} -> {answers}"
        assert request.answers == 0 or owed_all(answers, request.answers), (
            f"{request.data[:300]!r} -> {answers}"
        )

    with client:
        through_httpx()
        over_raw_sockets()
        concurrent_submissions(cell)
        alive = client.get("/health", headers={"Authorization": f"Bearer {TOKEN}"})
        assert alive.status_code == 200 and alive.json()["status"] == "ok"
        assert cell.server._thread.is_alive()

        assert cell.service.drain(120), "submissions still waiting two minutes after the fuzz"
        listed = client.get("/submissions", headers={"Authorization": f"Bearer {TOKEN}"}).json()[
            "submissions"
        ]
    stored = cell.store.list_submissions(CELL)
    api_ids = [s["submission_id"] for s in listed]
    assert api_ids == [r.submission_id for r in stored] == list(range(1, len(stored) + 1))
    assert {s["submission_id"]: s["status"] for s in listed} == {
        r.submission_id: r.status for r in stored
    }
    assert all(r.status in FINAL for r in stored), Counter(r.status for r in stored)
    statuses = Counter(r.status for r in stored)
    total = sum(cell.sent.values())
    print(
        f"fuzz: {total} requests sent {dict(cell.sent)}; answers "
        f"{dict(sorted(cell.statuses.items()))}; "
        f"submissions {dict(statuses)}"
    )
    assert total >= 1000
    # The generated requests reached every outcome a submission can have.
    assert {"scored", "duplicate", "copy_of_base", "invalid"} <= set(statuses), statuses


def concurrent_submissions(cell: Cell) -> None:
    """Threads submit at once: while the grader is held, ``max_queued`` get in and the others 429;
    none 5xx."""
    assert cell.service.drain(120)
    # A model the grader has not scored yet, so the first submission waits at the gate and the queue
    # fills.
    fresh = cell.service.ctx.workspace / "output" / "fresh"
    shutil.copytree(cell.service.ctx.workspace / "output" / "v1", fresh)
    from safetensors.torch import load_file, save_file

    tensors = load_file(fresh / "model.safetensors")
    first = sorted(tensors)[0]
    tensors[first] = tensors[first] + 0.5
    save_file(tensors, fresh / "model.safetensors", metadata={"format": "pt"})

    def submit(body: dict[str, Any]) -> int:
        with httpx.Client(
            base_url=cell.server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120
        ) as client:
            return client.post("/submit", json=body).status_code

    def burst(body: dict[str, Any]) -> Counter[int]:
        with ThreadPoolExecutor(THREADS) as pool:
            codes = Counter(pool.map(submit, [body] * THREADS))
        cell.sent["threads"] += THREADS
        cell.statuses.update(codes)
        return codes

    cell.scorer.gate.clear()
    try:
        held = burst({"model_path": "output/fresh", "wait": False})
    finally:
        cell.scorer.gate.set()
    assert held == {202: MAX_QUEUED, 429: THREADS - MAX_QUEUED}, held
    assert cell.service.drain(120)
    # Waiting for the score: duplicates of the scored model, each answered once it is through the
    # queue.
    waited = burst({"model_path": "output/fresh"})
    assert set(waited) <= {200, 429} and waited[200] >= 1, waited


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
