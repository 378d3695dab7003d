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
store with the same status, final, ids contiguous from 1.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings

from autorl.records.types import SUBMISSION_STATUSES
from tests.helpers.fuzz_cell import CELL, MAX_QUEUED, TOKEN, Cell, live_cell
from tests.helpers.fuzz_requests import (
    LIVE_SESSIONS,
    HttpxRequest,
    authorized,
    httpx_requests,
    raw_requests,
)
from tests.helpers.raw_http import RawRequest, owed_all, send_raw

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


@pytest.fixture(scope="module")
def cell(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, cache_dir: Path
) -> Iterator[Cell]:
    yield from live_cell(tmp_path_factory, tiny_model_dir, cache_dir)


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
