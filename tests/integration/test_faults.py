"""Faults a sweep survives (issue #13), on one multi-node Ray cluster on this machine.

One ``ray.cluster_utils.Cluster`` for the module: a head whose single CPU and ``grader_slot`` hold
the grader (so only cells run on the workers) and two one-CPU worker nodes for cells. Node death is
detected after ~2 s instead of Ray's ~15 s (health checks every 0.5 s). Each sweep is the real CLI
(``python -m autorl.sweep cluster.address=...``; the test cluster runs without token auth, and a
client that sends a token to it sees its actors die unscheduled) with the cheap ``command`` agent
``tests/helpers/fault_agent.py``: it submits a nudged copy of the base (really scored; not before a
gate file is gone), then stays alive while a hold file exists, so the test can break things while
the cell runs.

- ``test_node_recorder_and_grader_faults``: the node of a running cell is killed -> the cell is
  retried on the other node and its first attempt's records are kept; then the Recorder is killed
  (Ray restarts it) and a grader is killed while it scores attempt 2's submission -> every record
  arrives once and the submission is scored exactly once.
- ``test_sigkilled_sweep_resumes``: the sweep process is killed with SIGKILL mid-cell; the rerun
  resumes, keeps the killed attempt (``interrupted``) and duplicates nothing.
  (``tests/integration/test_sweep.py::test_interrupted_sweep_resumes_without_duplicates`` covers
  Ctrl-C, which cancels cells cleanly; SIGKILL gives the sweep no chance to.)
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from autorl.models.tiny import ensure_tiny_model
from tests.helpers.ray_cluster import local_cluster
from tests.integration.conftest import query_running, sweep_env

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "tests" / "helpers" / "fault_agent.py"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with local_cluster(workers=2) as cluster:
        yield cluster


def _command(
    cluster: Any, out_dir: Path, sweep_id: str, seed: int, hold: Path, gate: Path
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "autorl.sweep",
        f"out_dir={out_dir}",
        f"sweep_id={sweep_id}",
        f"seed={seed}",
        "progress=false",
        f"cluster.address={cluster.address}",
        "cluster.auth_mode=disabled",
        "agent=command",
        f"agent.files=[{AGENT}]",
        f"agent.command=['{{python}}',-I,'{{home}}/fault_agent.py',{hold},{gate}]",
        "sandbox.mode=none",
        "budget.seconds=240",
        "budget.kill_grace_s=2",
        "scheduler.max_retries=1",
        "+grader.resources.grader_slot=1",
        "task.eval.fixture.limit=24",
        "tracking.report.enabled=true",
    ]


def _log(proc: subprocess.Popen[str]) -> str:
    """The sweep's output without Ray's raylet dumps (they flood it when a node is killed)."""
    proc.wait(timeout=60)
    text = Path(proc.log_path).read_text(errors="replace")  # type: ignore[attr-defined]
    return "\n".join(line for line in text.splitlines() if "[state-dump]" not in line)[-6000:]


def _wait(
    what: str, check: Callable[[], Any], proc: subprocess.Popen[str], timeout: float = 240
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except ray.exceptions.RayError as error:
            time.sleep(5)  # let the sweep say what happened
            proc.kill()
            pytest.fail(f"{error} while waiting for {what}; the sweep's output:\n{_log(proc)}")
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"the sweep ended ({proc.returncode}) before {what}:\n{_log(proc)}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"timed out waiting for {what}:\n{_log(proc)}")


def _scored(db: Path, cell: str, attempt: int) -> bool:
    return bool(
        query_running(
            db,
            "SELECT 1 FROM submissions WHERE cell_id = ? AND attempt = ? AND status = 'scored'",
            cell,
            attempt,
        )
    )


def _rows(sweep_dir: Path) -> list[dict[str, str]]:
    with open(sweep_dir / "results.csv") as handle:
        return list(csv.DictReader(handle))


def _start(command: list[str], cache_dir: Path, log_path: Path) -> subprocess.Popen[str]:
    # A file, not a pipe: nobody reads a pipe while the test waits, and a full one would block the
    # sweep.
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            command, env=sweep_env(cache_dir), stdout=log, stderr=subprocess.STDOUT, text=True
        )
    proc.log_path = log_path  # type: ignore[attr-defined]
    return proc


def _finish(proc: subprocess.Popen[str], timeout: float = 300) -> str:
    proc.wait(timeout=timeout)
    output = _log(proc)
    assert proc.returncode == 0, output
    return output


def test_node_recorder_and_grader_faults(cluster: Any, tmp_path: Path, cache_dir: Path) -> None:
    started = time.monotonic()
    ensure_tiny_model(cache_dir / "models")
    sweep_id, cell = "faults-node", "gsm8k.command.none.tiny.s0"
    sweep_dir, hold, gate = tmp_path / "out" / sweep_id, tmp_path / "hold", tmp_path / "gate"
    db = sweep_dir / "records.sqlite"
    hold.touch()
    proc = _start(
        _command(cluster, tmp_path / "out", sweep_id, 0, hold, gate),
        cache_dir,
        tmp_path / "sweep.log",
    )
    ray.init(address=cluster.address, namespace=f"autorl-{sweep_id}", log_to_driver=False)
    try:
        # (a) Attempt 1 has a scored submission and holds: kill its node.
        _wait("attempt 1's scored submission", lambda: _scored(db, cell, 1), proc)
        ((node_id,),) = query_running(
            db, "SELECT node_id FROM cell_attempts WHERE cell_id = ? AND attempt = 1", cell
        )
        (node,) = [n for n in cluster.worker_nodes if n.node_id == node_id]
        gate.touch()  # attempt 2 waits before it submits
        cluster.remove_node(node, allow_graceful=False)
        killed_at = time.monotonic()
        _wait(
            "attempt 2 to run",
            lambda: query_running(
                db,
                "SELECT 1 FROM cell_attempts WHERE cell_id = ? AND attempt = 2 AND status = "
                "'running'",
                cell,
            ),
            proc,
        )
        retried_after = time.monotonic() - killed_at
        # Only now: a process of attempt 1 that outlived its node for a moment must not see it and
        # finish.
        hold.unlink()  # attempt 2 runs to its end

        # (b) Kill the Recorder (Ray restarts it: max_restarts=-1) while attempt 2 records.
        recorder = ray.get_actor("recorder")
        ray.kill(recorder, no_restart=False)

        # (c) Kill the grader while it scores attempt 2's submission (its baseline is cached).
        pool = ray.get_actor("grader_pool")
        gate.unlink()
        _wait(
            "attempt 2's submission to reach a grader",
            lambda: ray.get(pool.queue_depth.remote()) > 0,
            proc,
        )
        (grader,) = ray.get(pool.graders.remote())
        ray.kill(grader, no_restart=False)
        output = _finish(proc)
    finally:
        ray.shutdown()
        if proc.poll() is None:
            proc.kill()

    (row,) = _rows(sweep_dir)
    assert (
        row["status"] == "completed"
        and row["submissions"] == "1"
        and row["valid_submissions"] == "1"
    ), output[-3000:]
    attempts = query_running(
        db,
        "SELECT attempt, status, error, node_id FROM cell_attempts WHERE cell_id = ? ORDER BY "
        "attempt",
        cell,
    )
    assert [(a[0], a[1]) for a in attempts] == [(1, "failed"), (2, "completed")], attempts
    assert attempts[0][2] and attempts[1][3] not in (None, node_id), (
        attempts
    )  # retried on the other node
    # Each attempt keeps its own submission 1, code revisions and trace-free logs; none is
    # duplicated.
    subs = query_running(
        db,
        "SELECT attempt, submission_id, status, weights_hash, score FROM submissions WHERE cell_id "
        "= ? "
        "ORDER BY attempt, submission_id",
        cell,
    )
    assert [(s[0], s[1], s[2]) for s in subs] == [(1, 1, "scored"), (2, 1, "scored")], subs
    assert float(row["best_score"]) == subs[1][4]  # only the final attempt counts
    revisions = query_running(
        db, "SELECT attempt, COUNT(*) FROM code_revisions WHERE cell_id = ? GROUP BY attempt", cell
    )
    assert {a for a, n in revisions if n >= 1} == {1, 2}, revisions
    # Scored exactly once: one cached score per submitted weights (plus nothing else), one record
    # each.
    cached = query_running(db, "SELECT key FROM score_cache")
    assert len(cached) == 2 and all(any(s[3] in key for (key,) in cached) for s in subs), (
        cached,
        subs,
    )
    # The grader pool saw its grader replaced, and its busy fractions reached the store and the
    # report.
    ((stats,),) = query_running(db, "SELECT value_json FROM sweep_stats WHERE name = 'grader_pool'")
    assert '"replaced": 1' in stats, stats
    page = (sweep_dir / "report" / "index.html").read_text()
    assert 'id="attempts"' in page and "2 (final)" in page and 'id="graders"' in page
    scoring = query_running(
        db,
        "SELECT attempt, finished_at - started_at FROM submissions WHERE cell_id = ? ORDER BY "
        "attempt",
        cell,
    )
    print(
        f"node/recorder/grader faults: retry running {retried_after:.1f} s after the node kill; "
        "scoring s per attempt "
        f"(attempt 2 includes the grader kill) {[(a, round(t, 2)) for a, t in scoring]}; "
        f"test {time.monotonic() - started:.1f} s",
        file=sys.stderr,
    )


def test_sigkilled_sweep_resumes(cluster: Any, tmp_path: Path, cache_dir: Path) -> None:
    started = time.monotonic()
    ensure_tiny_model(cache_dir / "models")
    sweep_id, cell = "faults-kill", "gsm8k.command.none.tiny.s1"
    sweep_dir, hold = tmp_path / "out" / sweep_id, tmp_path / "hold"
    db = sweep_dir / "records.sqlite"
    hold.touch()
    command = _command(cluster, tmp_path / "out", sweep_id, 1, hold, tmp_path / "no-gate")
    proc = _start(command, cache_dir, tmp_path / "sweep.log")
    try:
        _wait("attempt 1's scored submission", lambda: _scored(db, cell, 1), proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert query_running(db, "SELECT status FROM cells WHERE cell_id = ?", cell) == [("running",)]
    hold.unlink()
    output = _finish(_start(command, cache_dir, tmp_path / "rerun.log"))

    (row,) = _rows(sweep_dir)
    assert row["status"] == "completed" and row["submissions"] == "1", output[-3000:]
    attempts = query_running(
        db, "SELECT attempt, status FROM cell_attempts WHERE cell_id = ? ORDER BY attempt", cell
    )
    assert attempts == [(1, "interrupted"), (2, "completed")]
    subs = query_running(
        db,
        "SELECT attempt, submission_id, status FROM submissions WHERE cell_id = ? ORDER BY "
        "attempt, "
        "submission_id",
        cell,
    )
    assert subs == [(1, 1, "scored"), (2, 1, "scored")]
    assert query_running(db, "SELECT COUNT(*) FROM cells") == [(1,)]
    print(f"SIGKILL resume: test {time.monotonic() - started:.1f} s", file=sys.stderr)
