"""The live viewer (autorl/view): its pages, its refusals, its event stream.

Pages are requested through FastAPI's TestClient over a store the test writes with the record
store's API; the event stream through a real uvicorn (tests/helpers/view_server.py), since it
never ends by itself.
"""

from __future__ import annotations

import html
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from markupsafe import escape

from autorl.records.live_types import CheckpointRecord
from autorl.records.resumes import ResumeEvent
from autorl.records.store import RecordStore
from autorl.view import view_command
from autorl.view.__main__ import main
from autorl.view.app import create_app, routes
from autorl.view.pages import cell_href
from tests.helpers.view_server import (
    HOSTILE,
    cell,
    driver_call,
    free_port,
    new_sweep,
    revision,
    sample,
    serve,
    step,
    submission,
    write_log,
)


@pytest.fixture
def sweep(tmp_path: Path) -> Iterator[tuple[Path, RecordStore]]:
    store = new_sweep(tmp_path)
    store.upsert_submission(submission("gsm8k-b", 1, 0.3))
    store.upsert_submission(submission("gsm8k-b", 2, 0.4, flags="model_mismatch"))
    store.upsert_driver_call(driver_call("gsm8k-b", "call-1"))
    store.add_code_revision(revision("gsm8k-b", "abc123", "--- a/train.py\n+++ b/train.py\n+lr=1"))
    store.add_trace_events([step("gsm8k-b", 1, "message", None, "I will train"),
                            step("gsm8k-b", 2, text="python train.py --lr 1e-5")])  # fmt: skip
    store.add_resource_samples([sample("gsm8k-b", 100.0, 0.5, 300),
                                sample("gsm8k-b", 105.0, 1.5, 900)])  # fmt: skip
    write_log(tmp_path, "gsm8k-b", "step 1\nstep 2\nsubmitted m2\n")
    (tmp_path / "cells" / "gsm8k-b" / "run_report.md").write_text("# Run gsm8k-b <b>")
    store.add_checkpoint(CheckpointRecord("gsm8k-b", 10.0, "000002", 5.0, 3, 2**20, 0, True))
    store.add_checkpoint(CheckpointRecord("gsm8k-b", 20.0, error="store full"))
    store.add_resume(ResumeEvent("gsm8k-b", 1, 30.0, "000002", 10.0, 5.0, 21.5, "node-aaaa",
                                 "node-bbbb", "ActorDiedError: <node> died"))  # fmt: skip
    yield tmp_path, store
    store.close()


def client(sweep_dir: Path, token: str | None = None) -> TestClient:
    """A client of the viewer that calls it by a loopback host, as a browser on this machine."""
    return TestClient(create_app(sweep_dir, token=token), base_url="http://127.0.0.1:8765")


def test_sweep_page_groups_cells_by_task_agent_driver(sweep: tuple[Path, RecordStore]) -> None:
    page = client(sweep[0]).get("/")
    assert page.status_code == 200
    text = page.text
    assert "<h2>Groups</h2>" in text
    # gsm8k × scripted × none: one running, one completed, best 0.4, mean improvement 0.3.
    assert "<td>gsm8k</td><td>scripted</td><td>none</td>" in text
    assert "<td>humaneval</td><td>codex</td><td>gpt-5</td>" in text
    assert '<td class="num">0.4</td><td class="num">0.3</td><td>gsm8k-a</td>' in text
    assert '<a href="/cell/gsm8k-b">gsm8k-b</a>' in text
    assert 'data-events="/events"' in text
    filtered = client(sweep[0]).get("/?task=humaneval").text
    assert "showing 1 of 3 cells" in filtered and "gsm8k-b</a>" not in filtered
    assert 'data-events="/events?task=humaneval"' in filtered
    running = client(sweep[0]).get("/?state=running").text
    assert "gsm8k-a</a>" in running and "he-a</a>" not in running


def test_cell_page_shows_submissions_calls_revisions_and_log(
    sweep: tuple[Path, RecordStore],
) -> None:
    page = client(sweep[0]).get("/cell/gsm8k-b")
    assert page.status_code == 200
    text = page.text
    assert 'data-status="completed"' in text
    assert "<td>model_mismatch</td>" in text  # a submission's flags
    assert "<polyline" in text  # the score curve
    assert "<td>call-1</td>" in text
    assert '<a href="/cell/gsm8k-b/revision/1">1</a>' in text
    assert "submitted m2" in text
    # The agent's steps, newest last, and its resource use (latest sample, CPU and memory curves).
    assert "<td>tool_call</td><td>bash</td><td>python train.py --lr 1e-5</td>" in text
    assert text.index("I will train") < text.index("python train.py")
    assert "1.5 CPUs busy · 900 MiB memory · over 5 s" in text
    assert 'aria-label="memory in use over time"' in text and "memory in use, 300–900 MiB" in text
    assert "no resource samples yet" in client(sweep[0]).get("/cell/gsm8k-a").text
    # Its integrity findings, and the run report of a cell that is done (text, never markup).
    assert "<h2>Integrity</h2>" in text and '<td class="num">0.7</td>' in text
    assert '<pre id="run-report"># Run gsm8k-b &lt;b&gt;</pre>' in text
    assert "Run report" not in client(sweep[0]).get("/cell/gsm8k-a").text  # still running
    assert "<td>000002</td>" in text and "<td>store full</td>" in text  # its checkpoints
    # Its node loss: resumed from checkpoint 000002 on another node, 21.5 s of work lost.
    assert "<h2>Node losses</h2>" in text and "<td>node-aaaa</td><td>node-bbbb</td>" in text
    assert '<td class="num">21.5</td>' in text and "&lt;node&gt; died" in text
    assert "Node losses" not in client(sweep[0]).get("/cell/gsm8k-a").text
    assert 'data-events="/cell/gsm8k-b/events"' in text
    assert '<script src="/static/live.js"></script>' in text


def test_revision_page_shows_the_diff(sweep: tuple[Path, RecordStore]) -> None:
    page = client(sweep[0]).get("/cell/gsm8k-b/revision/1")
    assert page.status_code == 200 and "+lr=1" in page.text
    assert client(sweep[0]).get("/cell/gsm8k-b/revision/2").status_code == 404
    assert client(sweep[0]).get("/cell/gsm8k-b/revision/0").status_code == 404


def test_log_is_paged_by_offset(sweep: tuple[Path, RecordStore]) -> None:
    sweep_dir, _ = sweep
    write_log(sweep_dir, "gsm8k-a", "x" * 70_000 + "THE END")
    c = client(sweep_dir)
    last = c.get("/cell/gsm8k-a/log").text
    assert "THE END" in last and "previous</a>" in last
    first = c.get("/cell/gsm8k-a/log?offset=0").text
    assert "THE END" not in first and "?offset=65536" in first
    assert "THE END" in c.get("/cell/gsm8k-a/log?offset=65536").text
    assert "no agent.log to show" in c.get("/cell/he-a/log").text


@pytest.mark.parametrize(
    "path",
    [
        "/cell/../../etc/passwd",
        "/cell/%2e%2e/%2e%2e/etc/passwd",
        "/cell/..%2f..%2fetc%2fpasswd",
        "/cell/%2e%2e",
        "/cell/nope",
        "/cell/nope/log",
        "/cell/nope/events",
        "/cell/gsm8k-b/revision/abc",
        "/cell/gsm8k-b/revision/1.5",
        "/cell/gsm8k-b/revision/..%2f..%2fetc%2fpasswd",
        "/cell/gsm8k-b/revision/-1",
        "/cell/gsm8k-b/log?offset=x",
        "/cell/gsm8k-b/log?offset=-5",
        "/static/../records.sqlite",
        "/static/%2e%2e/records.sqlite",
        "/records.sqlite",
        "/cells/gsm8k-b/agent.log",
    ],
)
def test_paths_and_ids_that_name_no_cell_are_refused(
    sweep: tuple[Path, RecordStore], path: str
) -> None:
    answer = client(sweep[0]).get(path)
    assert 400 <= answer.status_code < 500, (path, answer.status_code)
    assert "root:" not in answer.text and "SQLite" not in answer.text


def test_a_symlinked_agent_log_is_not_followed(sweep: tuple[Path, RecordStore]) -> None:
    sweep_dir, store = sweep
    secret = sweep_dir.parent / "outside-secret.txt"
    secret.write_text("TOP SECRET OUTSIDE")
    folder = sweep_dir / "cells" / "gsm8k-a"
    folder.mkdir(parents=True)
    os.symlink(secret, folder / "agent.log")
    # A cell folder that is itself a link out of the sweep, with a real agent.log behind it.
    outside = sweep_dir.parent / "elsewhere"
    write_log(outside.parent, outside.name, "TOP SECRET OUTSIDE")
    store.upsert_cell(cell("linked"))
    os.symlink(outside.parent / "cells" / outside.name, sweep_dir / "cells" / "linked")
    c = client(sweep_dir)
    for cell_id in ("gsm8k-a", "linked"):
        for path in (f"/cell/{cell_id}", f"/cell/{cell_id}/log?offset=0"):
            page = c.get(path)
            assert page.status_code == 200
            assert "TOP SECRET" not in page.text and "no agent.log to show" in page.text


def test_a_symlinked_run_report_is_not_followed(sweep: tuple[Path, RecordStore]) -> None:
    sweep_dir, _ = sweep
    secret = sweep_dir.parent / "outside-report.txt"
    secret.write_text("TOP SECRET OUTSIDE")
    report = sweep_dir / "cells" / "gsm8k-b" / "run_report.md"
    report.unlink()
    os.symlink(secret, report)
    page = client(sweep_dir).get("/cell/gsm8k-b")
    assert page.status_code == 200 and "TOP SECRET" not in page.text
    assert "no run_report.md to show (a link or no regular file)" in page.text


def test_markup_from_the_agent_renders_as_text(tmp_path: Path) -> None:
    store = RecordStore(tmp_path / "records.sqlite")
    # A cell id holds no "/" (it names a folder); everything else an agent could get into one.
    bad_id = 'c<img src=x onerror="alert(2)">'
    store.upsert_cell(cell(bad_id, task="t" + HOSTILE, model=HOSTILE, error=HOSTILE,
                           status="running"))  # fmt: skip
    store.upsert_submission(submission(bad_id, 1, 0.2, model_path="/ws/" + HOSTILE,
                                       flags=HOSTILE, error=HOSTILE))  # fmt: skip
    store.add_code_revision(revision(bad_id, HOSTILE, "+" + HOSTILE, reason=HOSTILE))
    store.upsert_driver_call(driver_call(bad_id, HOSTILE, model=HOSTILE))
    store.add_trace_events([step(bad_id, 1, tool=HOSTILE, text=HOSTILE)])
    c = client(tmp_path)
    cell_url = cell_href(bad_id)
    pages = [c.get("/"), c.get("/?task=t" + HOSTILE), c.get(cell_url)]
    pages.append(c.get(cell_url + "/revision/1"))
    store.close()
    escaped = html.escape("<script>alert(1)</script>", quote=False)
    for page in pages:
        assert page.status_code == 200, page.url
        assert "<script>alert" not in page.text and "<img src=x" not in page.text
        assert escaped in page.text
        assert str(escape('<img src=x onerror="alert(2)">')) in page.text
    # The only script of any page is the viewer's own.
    assert all(p.text.count("<script") == 1 for p in pages)


def test_no_route_writes(sweep: tuple[Path, RecordStore]) -> None:
    app = create_app(sweep[0])
    assert {r.split()[0] for r in routes(app)} == {"GET"}
    c = TestClient(app, base_url="http://127.0.0.1")
    for path in ("/", "/events", "/cell/gsm8k-b", "/cell/gsm8k-b/revision/1", "/cell/gsm8k-b/log"):
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            assert c.request(method, path).status_code == 405, (method, path)
    # The store itself refuses writes (SQLite's mode=ro).
    assert app.state.store.read_only


def test_pages_carry_a_policy_that_runs_only_the_viewers_script(
    sweep: tuple[Path, RecordStore],
) -> None:
    c = client(sweep[0])
    page = c.get("/cell/gsm8k-b")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy
    assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
    assert page.headers["x-content-type-options"] == "nosniff"
    script = c.get("/static/live.js")
    assert script.status_code == 200 and "EventSource" in script.text
    assert script.headers["content-type"].startswith("text/javascript")


def test_foreign_host_and_missing_token_are_refused(sweep: tuple[Path, RecordStore]) -> None:
    sweep_dir = sweep[0]
    # DNS rebinding: a page of evil.example resolved to 127.0.0.1 sends its own Host.
    rebound = TestClient(create_app(sweep_dir), base_url="http://evil.example:8765")
    assert rebound.get("/").status_code == 421
    locked = client(sweep_dir, token="s3cret")
    assert locked.get("/").status_code == 401
    assert locked.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert locked.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    first = locked.get("/?token=s3cret")
    assert first.status_code == 200 and "autorl_view_token" in first.headers["set-cookie"]
    assert locked.get("/cell/gsm8k-b").status_code == 200  # the cookie carries it on


def test_cli_refuses_another_host_without_a_token(
    sweep: tuple[Path, RecordStore], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main([str(sweep[0]), "--host", "0.0.0.0"]) == 2
    assert "--token" in capsys.readouterr().err
    assert main([str(tmp_path / "no-such-sweep")]) == 2
    assert "no record store" in capsys.readouterr().err
    assert view_command(Path("outputs/s1")) == "python -m autorl.view outputs/s1"


def _events(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    for line in lines:
        if line.startswith("data: "):
            yield json.loads(line[len("data: ") :])


def test_the_event_stream_sends_the_change_of_the_store(sweep: tuple[Path, RecordStore]) -> None:
    sweep_dir, store = sweep
    with (
        serve(sweep_dir) as url,
        httpx.stream("GET", f"{url}/cell/gsm8k-a/events", timeout=10) as stream,
    ):
        assert stream.headers["content-type"].startswith("text/event-stream")
        events = _events(stream.iter_lines())
        first = next(events)
        assert 'data-status="running"' in first["html"]
        started = time.monotonic()
        store.upsert_submission(submission("gsm8k-a", 1, 0.77, flags="fresh_flag"))
        store.set_cell_status("gsm8k-a", "completed", best_score=0.77)
        # The two writes may land in one poll or two: read until the last shows both.
        event = next(events)
        while 'data-status="completed"' not in event["html"]:
            event = next(events)
        assert "fresh_flag" in event["html"] and event["version"] != first["version"]
        assert time.monotonic() - started < 5


def test_the_command_serves_loopback_and_stops_on_ctrl_c(sweep: tuple[Path, RecordStore]) -> None:
    port = free_port()
    command = [sys.executable, "-m", "autorl.view", str(sweep[0]), "--port", str(port)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert f"at http://127.0.0.1:{port}/" in line, line
        deadline = time.monotonic() + 20
        while True:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "the viewer did not listen"
                time.sleep(0.1)
        assert page.status_code == 200 and "gsm8k-b" in page.text
        # An open event stream must not keep the server from stopping.
        with httpx.stream("GET", f"http://127.0.0.1:{port}/events", timeout=10) as stream:
            next(_events(stream.iter_lines()))
            proc.send_signal(signal.SIGINT)
            assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
