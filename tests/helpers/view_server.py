"""A sweep folder written by a test, and the live viewer served over it by a real uvicorn.

Shared by tests/unit/test_view.py and tests/integration/test_view_browser.py: the store is built
with the record store's own API (as the Recorder writes it), so the viewer reads what a sweep
would leave.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn

from autorl.records.live_types import ResourceSample, TraceEvent
from autorl.records.store import RecordStore
from autorl.records.types import (
    CellRecord,
    CodeRevision,
    DriverCall,
    SubmissionRecord,
)
from autorl.view.app import create_app

HOSTILE = '<script>alert(1)</script><img src=x onerror="alert(2)">'


def cell(cell_id: str, **overrides: object) -> CellRecord:
    """A cell record of sweep ``s1`` (gsm8k × scripted × none unless overridden)."""
    fields: dict[str, object] = dict(
        sweep_id="s1",
        cell_id=cell_id,
        agent="scripted",
        driver="none",
        task="gsm8k",
        task_version=1,
        model="tiny",
        seed=0,
        budget_s=600.0,
        status="pending",
    )
    fields.update(overrides)
    return CellRecord(**fields)  # type: ignore[arg-type]


def submission(cell_id: str, n: int, score: float | None = 0.5, **kw: object) -> SubmissionRecord:
    """Submission ``n`` of ``cell_id``, scored ``score``."""
    status = str(kw.pop("status", "scored"))
    model_path = str(kw.pop("model_path", f"/ws/output/m{n}"))
    return SubmissionRecord(
        cell_id=cell_id, submission_id=n, model_path=model_path, status=status, score=score, **kw
    )  # type: ignore[arg-type]


def revision(cell_id: str, rev: str, diff: str, reason: str = "submit") -> CodeRevision:
    """A code revision of ``cell_id`` with ``diff``."""
    return CodeRevision(cell_id, rev, time.time(), reason, diff, 1)


def driver_call(cell_id: str, call_id: str, model: str = "gpt-x") -> DriverCall:
    """A 200 driver call of ``cell_id``."""
    return DriverCall(cell_id, call_id, time.time(), 0.5, "openai", model, model, 200, 0, 1, 10, 5)


def step(cell_id: str, seq: int, kind: str = "tool_call", tool: str | None = "bash",
         text: str = "ls") -> TraceEvent:  # fmt: skip
    """Trace event ``seq`` of ``cell_id`` (a tool call by default), as the live forwarder sends."""
    return TraceEvent(cell_id, seq, time.time(), kind, tool, text)


def sample(cell_id: str, t: float, cpu_fraction: float, memory_mib: int) -> ResourceSample:
    """A resource sample of ``cell_id`` at ``t``."""
    return ResourceSample(cell_id, t, t * cpu_fraction, cpu_fraction, memory_mib * 2**20)


def write_log(sweep_dir: Path, cell_id: str, text: str) -> Path:
    """Write ``cells/<cell_id>/agent.log``."""
    folder = sweep_dir / "cells" / cell_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "agent.log").write_text(text)
    return folder / "agent.log"


def new_sweep(sweep_dir: Path) -> RecordStore:
    """A writable store in ``sweep_dir`` with two gsm8k cells (one running) and a humaneval one."""
    store = RecordStore(sweep_dir / "records.sqlite")
    store.upsert_cell(cell("gsm8k-a", status="running", baseline=0.1, started_at=time.time()))
    store.upsert_cell(cell("gsm8k-b", status="completed", baseline=0.1, best_score=0.4,
                           improvement=0.3, contamination=0.7))  # fmt: skip
    store.upsert_cell(cell("he-a", task="humaneval", agent="codex", driver="gpt-5"))
    return store


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(sweep_dir: Path, token: str | None = None, poll_s: float = 0.2) -> Iterator[str]:
    """The viewer of ``sweep_dir`` on a free loopback port, in a thread; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(
        create_app(sweep_dir, token=token, poll_s=poll_s), host="127.0.0.1", port=port,
        log_level="warning",
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the viewer did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        # An open event stream would hold a graceful shutdown: end the streams' connections.
        server.should_exit = True
        server.force_exit = True
        thread.join(10)
