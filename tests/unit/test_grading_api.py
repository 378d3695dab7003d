"""The grading API over real HTTP: every input rule of docs/design.md#the-grading-api, scoring with
a real grader in-process."""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from autorl.grading.service import SubmissionService
from autorl.records.store import RecordStore
from tests.helpers.grading_cell import GatedScorer, save_variant, start_grading_cell

TOKEN = "test-token"


@dataclass
class Api:
    client: httpx.Client
    workspace: Path
    service: SubmissionService
    scorer: GatedScorer
    store: RecordStore
    baseline: float


@pytest.fixture()
def api(tmp_path: Path, tiny_model_dir: Path, cache_dir: Path) -> Iterator[Api]:
    cell = start_grading_cell(
        tmp_path,
        tiny_model_dir,
        cache_dir,
        token=TOKEN,
        cell_id="cell-a",
        max_queued=2,
        max_body_bytes=1024,
        submit_timeout_s=120.0,
        budget_s=600,
    )
    client = httpx.Client(
        base_url=cell.server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120
    )
    try:
        yield Api(client, cell.workspace, cell.service, cell.scorer, cell.store, cell.baseline)
    finally:
        client.close()
        cell.close()


def test_token_is_required(api: Api) -> None:
    # A token of non-ASCII bytes was a 500: hmac.compare_digest refuses such str.
    wrong: list[dict[bytes, bytes]] = [
        {},
        {b"Authorization": b"Bearer wrong"},
        {b"Authorization": f"Basic {TOKEN}".encode()},
        {b"Authorization": b"Bearer \xe9\xff"},
        {b"Authorization": b"Bearer"},
    ]
    for headers in wrong:
        response = httpx.post(
            str(api.client.base_url) + "/submit", headers=headers, json={"model_path": "output/v1"}
        )
        assert response.status_code == 401 and "GRADING_TOKEN" in response.json()["error"]
    assert api.client.get("/health").json()["status"] == "ok"
    assert api.store.list_submissions("cell-a") == []


@pytest.mark.parametrize(
    "model_path",
    ["models/tiny", "output/../models/tiny", "/etc", "../", "output/v1\x00", "", 5, None],
)
def test_paths_outside_output_are_rejected(api: Api, model_path: object) -> None:
    response = api.client.post("/submit", json={"model_path": model_path})
    assert response.status_code == 400, response.text
    assert response.json()["error"]
    assert api.store.list_submissions("cell-a") == []


def test_symlink_escape_and_missing_dir_are_400(api: Api) -> None:
    (api.workspace / "output" / "link").symlink_to(api.workspace / "models" / "tiny")
    assert api.client.post("/submit", json={"model_path": "output/link"}).status_code == 400
    missing = api.client.post("/submit", json={"model_path": "output/v9"})
    assert missing.status_code == 400 and "does not exist" in missing.json()["error"]


def test_unloadable_models_are_422_naming_what_is_missing(api: Api, tiny_model_dir: Path) -> None:
    no_config = shutil.copytree(tiny_model_dir, api.workspace / "output" / "no_config")
    (no_config / "config.json").unlink()
    response = api.client.post("/submit", json={"model_path": "output/no_config"})
    assert response.status_code == 422 and "config.json" in response.json()["error"]
    no_tokenizer = shutil.copytree(tiny_model_dir, api.workspace / "output" / "no_tok")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (no_tokenizer / name).unlink()
    response = api.client.post("/submit", json={"model_path": "output/no_tok"})
    assert response.status_code == 422 and "tokenizer" in response.json()["error"]
    assert api.store.list_submissions("cell-a") == []


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (b'{"model_path": "output/v1", "gpu": "0"}', 400, "unknown field"),
        (b'{"wait": false}', 400, "missing"),
        (b'{"model_path": "output/v1", "wait": "no"}', 400, "true or false"),
        (b'{"model_path": "' + b"x" * 2000 + b'"}', 413, "over 1024 bytes"),
    ],
)
def test_malformed_requests(api: Api, body: bytes, status: int, fragment: str) -> None:
    response = api.client.post(
        "/submit", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == status
    assert fragment in response.json()["error"]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (
            b"[" * 1000,
            "too deeply",
        ),  # 5,000 levels (the size of the bodies that got a 500) are over this app's 1 KiB cap
        (b"[" * 17 + b"]" * 17, "too deeply"),
        (b'{"model_path": ' * 20 + b'"output/v1"' + b"}" * 20, "too deeply"),
        (
            b'{"model_path": 1' + b"0" * 600 + b"}",
            "too large",
        ),  # int() would parse up to 4,300 digits
        (b"1" * 1000, "too large"),
        (b'{"model_path": NaN}', "NaN"),
        (b'{"model_path": 1e999999}', "out of range"),
        (
            b'{"model_path": "\\ud800"}',
            "not valid Unicode",
        ),  # a lone surrogate escape: no path can hold it
        (b'{"model_path": "\xff\xfe"}', "not UTF-8"),
        (
            '{"model_path": "output/missing"}'.encode("utf-16"),
            "does not exist",
        ),  # UTF-16 is JSON too
    ],
)
def test_bodies_the_parser_refuses_are_400(api: Api, body: bytes, fragment: str) -> None:
    response = api.client.post("/submit", content=body)
    assert response.status_code == 400, response.text
    assert fragment in response.json()["error"]
    assert api.store.list_submissions("cell-a") == []


def test_body_over_the_cap_is_413_whatever_its_framing(api: Api) -> None:
    def chunks() -> Iterator[
        bytes
    ]:  # a generator body: httpx sends it chunked, without Content-Length
        yield b'{"model_path": "'
        for _ in range(8):
            yield b"x" * 256

    chunked = api.client.post("/submit", content=chunks())
    assert chunked.status_code == 413 and "over 1024 bytes" in chunked.json()["error"]
    declared = api.client.post("/submit", content=b"{" + b" " * 5000 + b"}")
    assert declared.status_code == 413 and "over 1024 bytes" in declared.json()["error"]
    compressed = api.client.post(
        "/submit", content=b"\x1f\x8b", headers={"Content-Encoding": "gzip"}
    )
    assert compressed.status_code == 415 and "uncompressed" in compressed.json()["error"]
    assert api.client.get("/health").status_code == 200
    assert api.store.list_submissions("cell-a") == []


def test_refusal_of_a_stalled_body_is_sent_at_once_and_the_connection_closed(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that announces a body and never sends it gets its 401 at once; the server hangs up
    soon after."""
    monkeypatch.setattr("autorl.grading.api._DRAIN_S", 0.5)
    host, port = api.client.base_url.host, api.client.base_url.port
    assert port is not None
    started = time.monotonic()
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(
            b"POST /submit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"
            b"Content-Length: 100\r\n\r\n{"
        )
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
    assert received.startswith(b"HTTP/1.1 401 ") and b"GRADING_TOKEN" in received
    assert time.monotonic() - started < 5


def test_unknown_paths_methods_and_ids_say_what_exists(api: Api) -> None:
    for submission_id in ("abc", "-1", "0", "1.5", "99999999999999999999", "9" * 5000):
        response = api.client.get(f"/submissions/{submission_id}")
        assert response.status_code == 404 and "GET /submissions lists" in response.json()["error"]
    unknown = api.client.get("/nothing")
    assert unknown.status_code == 404 and "POST /submit" in unknown.json()["error"]
    wrong = api.client.put("/submit", content=b"{}")
    assert (
        wrong.status_code == 405
        and "POST" in wrong.json()["error"]
        and wrong.headers["allow"] == "POST"
    )
    for method in ("HEAD", "OPTIONS", "TRACE", "FOO"):
        response = api.client.request(method, "/health")
        assert response.status_code == 405 and response.headers["allow"] == "GET"


def test_copy_of_base_scores_the_baseline(api: Api, tiny_model_dir: Path) -> None:
    shutil.copytree(tiny_model_dir, api.workspace / "output" / "copy")
    body = api.client.post("/submit", json={"model_path": "output/copy"}).json()
    assert body["status"] == "copy_of_base"
    assert body["score"] == api.baseline and body["improvement"] == 0
    assert api.scorer.calls == 0


def test_scored_submission_then_duplicate(api: Api, tiny_model_dir: Path) -> None:
    save_variant(tiny_model_dir, api.workspace / "output" / "v1", noise_seed=1)
    first = api.client.post("/submit", json={"model_path": "output/v1"}).json()
    assert first["status"] == "scored" and first["submission_id"] == 1
    assert first["baseline_score"] == api.baseline
    assert first["improvement"] == pytest.approx(first["score"] - api.baseline)
    assert first["best"] == {"submission_id": 1, "score": first["score"]}
    assert first["details"]["num_examples"] == 16
    # The grader keeps samples of the private split in its records; the agent never sees them.
    assert "samples" not in first["details"]
    stored_details = api.store.list_submissions("cell-a")[0].details_json
    assert "samples" in stored_details
    shutil.copytree(api.workspace / "output" / "v1", api.workspace / "output" / "v1_again")
    again = api.client.post("/submit", json={"model_path": "output/v1_again"}).json()
    assert again["status"] == "duplicate" and again["score"] == first["score"]
    assert again["total_submissions"] == 2 and api.scorer.calls == 1
    stored = api.store.list_submissions("cell-a")
    assert [s.status for s in stored] == ["scored", "duplicate"]
    assert stored[0].weights_hash == stored[1].weights_hash


def test_no_wait_returns_202_and_the_result_arrives(api: Api, tiny_model_dir: Path) -> None:
    save_variant(tiny_model_dir, api.workspace / "output" / "v2", noise_seed=2)
    response = api.client.post("/submit", json={"model_path": "output/v2", "wait": False})
    assert response.status_code == 202 and response.json() == {
        "submission_id": 1,
        "status": "queued",
    }
    assert api.service.wait(1, 120)
    body = api.client.get("/submissions/1").json()
    assert body["status"] == "scored" and body["score"] is not None
    assert api.client.get("/submissions").json()["submissions"][0]["submission_id"] == 1
    assert api.client.get("/submissions/99").status_code == 404


def test_too_many_queued_submissions_get_429(api: Api, tiny_model_dir: Path) -> None:
    api.scorer.gate.clear()
    for index in range(3):
        save_variant(tiny_model_dir, api.workspace / "output" / f"q{index}", noise_seed=10 + index)
    for index in range(2):
        assert (
            api.client.post(
                "/submit", json={"model_path": f"output/q{index}", "wait": False}
            ).status_code
            == 202
        )
    response = api.client.post("/submit", json={"model_path": "output/q2", "wait": False})
    assert response.status_code == 429 and "already waiting" in response.json()["error"]
    api.scorer.gate.set()
    assert api.service.drain(120)
    assert [s.status for s in api.store.list_submissions("cell-a")] == ["scored", "scored"]


def test_corrupt_weights_are_recorded_invalid(api: Api, tiny_model_dir: Path) -> None:
    broken = save_variant(tiny_model_dir, api.workspace / "output" / "broken", noise_seed=3)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    body = api.client.post("/submit", json={"model_path": "output/broken"}).json()
    assert body["status"] == "invalid" and "model.safetensors" in body["error"]
    assert api.store.list_submissions("cell-a")[0].status == "invalid"


def test_time_and_health_and_no_way_to_set_the_baseline(api: Api) -> None:
    time_body = api.client.get("/time").json()
    assert {
        "start_time",
        "timeout_s",
        "last_submit_time",
        "end_time",
        "now",
        "remaining",
        "working_time",
    } <= set(time_body)
    assert 0 < time_body["remaining"] <= 600
    assert api.client.get("/health").json()["task"] == "gsm8k"
    for path in ("/set_baseline", "/baseline"):
        assert api.client.post(path, json={"score": 100}).status_code in (404, 405)
    assert api.service.ctx.baseline == api.baseline
