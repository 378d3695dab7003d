"""A cell that loses its node resumes on another node from its last checkpoint (issue #43).

On one multi-node Ray cluster on this machine (:func:`tests.helpers.ray_cluster.local_cluster`):
a head that holds the sweep's services and two one-CPU worker nodes for cells. There is no
``storage.root``, so each checkpoint travels through Ray from the cell's node to the driver's
(the head). The sweep is the real CLI; cells are sealed (bubblewrap, cgroup) as in any sweep.

- ``test_a_real_cli_continues_its_own_session_on_the_new_node``: each real CLI (Codex, Claude
  Code, OpenCode, Gemini CLI, against the replay server) is killed with its node mid-session and
  continues the same session on the other node.
- ``test_a_cell_whose_node_is_killed_resumes_elsewhere_with_its_submission_and_budget``: the
  command agent ``tests/helpers/fault_agent.py`` submits (really scored), writes its answer into
  ``output/`` and holds; once a checkpoint holds that answer the test kills the cell's node. The
  cell goes on on the other node in the same attempt: its workspace restored (the agent finds its
  answer), its first submission kept as the cell's best, its budget clock charged up to the
  checkpoint, the time after it recorded as lost.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from autorl.models.tiny import ensure_tiny_model
from tests.helpers.cli_agent_cell import require_cli
from tests.helpers.ray_cluster import local_cluster
from tests.helpers.replay_llm_server import ReplayLLM, ReplayServer
from tests.integration.conftest import query_running, sweep_env

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "tests" / "helpers" / "fault_agent.py"
BUDGET_S = 100
EVERY_S = 3


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with local_cluster(workers=2) as cluster:
        yield cluster


def _two_workers(cluster: Any) -> None:
    """Two worker nodes for cells: one to lose, one to resume on (an earlier test removed one)."""
    while len(cluster.worker_nodes) < 2:
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()


def _output(log: Path) -> str:
    text = log.read_text(errors="replace")
    return "\n".join(line for line in text.splitlines() if "[state-dump]" not in line)[-6000:]


def _wait(
    what: str, check: Callable[[], Any], proc: subprocess.Popen[str], log: Path, timeout: float
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"the sweep ended ({proc.returncode}) before {what}:\n{_output(log)}")
        time.sleep(0.1)
    proc.kill()
    proc.wait(timeout=30)
    pytest.fail(f"timed out waiting for {what}:\n{_output(log)}")


def _start(command: list[str], cache_dir: Path, log: Path) -> subprocess.Popen[str]:
    """The sweep, its output into ``log`` (a file: nobody reads a pipe while the test waits)."""
    with log.open("w") as handle:
        return subprocess.Popen(
            command, env=sweep_env(cache_dir), stdout=handle, stderr=subprocess.STDOUT, text=True
        )


def _kill_after_checkpoint(
    cluster: Any, db: Path, cell: str, after: float, proc: subprocess.Popen[str], log: Path
) -> str:
    """Wait for a checkpoint of ``cell`` taken after ``after`` (Unix time), then kill the node that
    runs the cell; returns its id."""
    _wait(
        "a checkpoint taken after the state the test needs",
        lambda: query_running(
            db,
            "SELECT 1 FROM checkpoints WHERE cell_id = ? AND error IS NULL AND t > ?",
            cell,
            after,
        ),
        proc,
        log,
        60,
    )
    ((node_id,),) = query_running(db, "SELECT node_id FROM cell_attempts WHERE cell_id = ?", cell)
    (node,) = [n for n in cluster.worker_nodes if n.node_id == node_id]
    cluster.remove_node(node, allow_graceful=False)
    return str(node_id)


def test_a_cell_whose_node_is_killed_resumes_elsewhere_with_its_submission_and_budget(
    cluster: Any, tmp_path: Path, cache_dir: Path
) -> None:
    started = time.monotonic()
    _two_workers(cluster)
    ensure_tiny_model(cache_dir / "models")
    sweep_id, cell = "node-loss", "gsm8k.command.none.tiny.s0"
    out_dir = tmp_path / "out"
    sweep_dir = out_dir / sweep_id
    db = sweep_dir / "records.sqlite"
    command = [
        sys.executable, "-m", "autorl.sweep", f"out_dir={out_dir}", f"sweep_id={sweep_id}",
        "progress=false", f"cluster.address={cluster.address}", "cluster.auth_mode=disabled",
        "agent=command", f"agent.files=[{AGENT}]",
        # Sealed, the agent sees none of the test's files: it holds on "/" (until its node dies or
        # its budget ends) and never waits on a gate.
        "agent.command=['{python}',-I,'{home}/fault_agent.py',/,/no-gate]",
        f"budget.seconds={BUDGET_S}", "budget.kill_grace_s=2", "scheduler.max_retries=1",
        f"cell.checkpoint.every_s={EVERY_S}", "+grader.resources.grader_slot=1",
        "task.eval.fixture.limit=24", "tracking.report.enabled=true",
    ]  # fmt: skip
    log = tmp_path / "sweep.log"
    proc = _start(command, cache_dir, log)
    try:
        answer = sweep_dir / "cells" / cell / "workspace" / "output" / "fault_agent.json"
        _wait("the first run's scored answer", answer.exists, proc, log, 300)
        written = time.time()
        # A checkpoint taken after the answer was written holds it (it reached the head's store).
        node_id = _kill_after_checkpoint(cluster, db, cell, written + 0.5, proc, log)
        killed_at = time.time()
        proc.wait(timeout=BUDGET_S + 240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    output = _output(log)
    assert proc.returncode == 0, output

    # One attempt, completed on the other node, with one resume event from the killed node.
    attempts = query_running(
        db, "SELECT attempt, status, node_id FROM cell_attempts WHERE cell_id = ?", cell
    )
    assert [(a, s) for a, s, _ in attempts] == [(1, "completed")], (attempts, output)
    assert attempts[0][2] not in (None, node_id), attempts
    ((seq, checkpoint_id, checkpoint_t, time_used, lost, from_node, to_node),) = query_running(
        db,
        "SELECT seq, checkpoint_id, checkpoint_t, time_used_s, lost_s, from_node, to_node FROM "
        "cell_resumes WHERE cell_id = ?",
        cell,
    )
    assert (seq, from_node, to_node) == (1, node_id, attempts[0][2])
    assert checkpoint_t > written and 0 < time_used < BUDGET_S
    # Lost: from the checkpoint to the loss being seen (Ray's health checks take ~2 s).
    assert killed_at - checkpoint_t - 1 < lost < killed_at - checkpoint_t + EVERY_S + 15, (
        lost,
        killed_at - checkpoint_t,
    )

    # The workspace came back: the resumed agent found its first run's answer and model.
    found = json.loads((answer.parent / "resumed.json").read_text())
    assert found["answer"]["status"] == "scored" and "model.safetensors" in found["nudged_files"]
    # Sealed on the new node too, with new tokens.
    assert found["token_sha"] != found["answer"]["token_sha"]

    # The first submission kept and counted, nothing interrupted or duplicated.
    subs = query_running(
        db, "SELECT attempt, submission_id, status, score FROM submissions WHERE cell_id = ?", cell
    )
    assert [(a, i, s) for a, i, s, _ in subs] == [(1, 1, "scored")], subs
    assert found["answer"]["score"] == subs[0][3]
    with open(sweep_dir / "results.csv") as handle:
        (row,) = list(csv.DictReader(handle))
    assert row["status"] == "completed" and float(row["best_score"]) == subs[0][3], row
    assert (row["node_resumes"], row["exit_class"], row["sandbox"]) == ("1", "timeout", "bwrap")
    assert float(row["lost_s"]) == pytest.approx(lost, abs=1e-3)
    # The budget clock: charged up to the checkpoint, then the rest of the budget on the new node
    # (the lost time is not charged), so the agent worked its whole budget, give or take one
    # checkpoint interval.
    working = float(row["working_time_s"])
    assert abs(working - BUDGET_S) <= EVERY_S, (working, time_used)
    (resume_line,) = [line for line in output.splitlines() if "resumes on node" in line]
    assert checkpoint_id in resume_line
    print(
        f"node loss: checkpoint {checkpoint_id} at {time_used:.1f} s of agent time, "
        f"{lost:.1f} s lost, working time {working:.1f} s of {BUDGET_S}; "
        f"test {time.monotonic() - started:.1f} s",
        file=sys.stderr,
    )


RESUMED = "was lost and has been replaced"  # the resume message (autorl.workspace.resume)


class HeldAfterStepOne(ReplayLLM):
    """The replay model: step one, then the request for step two is held (the CLI waits on its
    model, its session recorded) until the test releases it after killing the node; the resumed
    CLI's requests are answered at once."""

    def __init__(self, log: Path) -> None:
        super().__init__(["echo first-run | tr a-z A-Z", "echo step-two"], "Both steps ran.", log)
        self.held = threading.Event()
        self.release = threading.Event()

    def decide(self, protocol: str, body: dict[str, Any]) -> tuple[str, Any]:
        kind, value = super().decide(protocol, body)
        if kind == "tool" and "step-two" in json.dumps(value) and RESUMED not in json.dumps(body):
            self.held.set()
            self.release.wait(180)  # on the server's own loop: nothing else is answered meanwhile
        return kind, value


def _driver(agent: str, base_url: str) -> list[str]:
    """The driver overrides that point ``agent`` at the replay server (Gemini CLI speaks its own
    protocol, served under /v1beta)."""
    if agent == "gemini-cli":
        server = base_url.removesuffix("/v1")
        return ["driver=gemini-2.5-flash", f"driver.base_url={base_url}",
                f"driver.protocols={{gemini: {server}/v1beta}}"]  # fmt: skip
    return ["driver=local", f"driver.base_url={base_url}"]


# Each CLI keeps its session files under HOME in a layout of its own; a checkpoint takes HOME whole.
@pytest.mark.parametrize("agent", ["codex", "claude-code", "opencode", "gemini-cli"])
def test_a_real_cli_continues_its_own_session_on_the_new_node(
    agent: str, cluster: Any, tmp_path: Path, cache_dir: Path
) -> None:
    """A real CLI, mid-session when its node dies, is resumed on the other node with its session
    files restored and its continue flag: its first request there carries the first run's tool
    call and output, then the resume message."""
    require_cli(agent)
    started = time.monotonic()
    _two_workers(cluster)
    ensure_tiny_model(cache_dir / "models")
    requests_log = tmp_path / "requests.jsonl"
    replay = HeldAfterStepOne(requests_log)
    server = ReplayServer(replay).start()
    sweep_id, out_dir = f"node-loss-{agent}", tmp_path / "out"
    sweep_dir = out_dir / sweep_id
    db = sweep_dir / "records.sqlite"
    command = [
        sys.executable, "-m", "autorl.sweep", f"out_dir={out_dir}", f"sweep_id={sweep_id}",
        "progress=false", f"cluster.address={cluster.address}", "cluster.auth_mode=disabled",
        f"agent={agent}", *_driver(agent, server.base_url), "driver.api_key_env=null",
        "budget.seconds=300", "budget.kill_grace_s=2",
        "scheduler.max_retries=1", f"cell.checkpoint.every_s={EVERY_S}",
        "+grader.resources.grader_slot=1", "task.eval.fixture.limit=24",
    ]  # fmt: skip
    log = tmp_path / "sweep.log"
    proc = _start(command, cache_dir, log)
    try:
        _wait("the CLI's request for step two", replay.held.is_set, proc, log, 300)
        held_at = time.time()
        ((cell,),) = query_running(db, "SELECT cell_id FROM cells")
        node_id = _kill_after_checkpoint(cluster, db, cell, held_at + 0.5, proc, log)
        time.sleep(1)  # the lost node's CLI is gone before its held request is answered
        replay.release.set()
        proc.wait(timeout=420)
    finally:
        replay.release.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        server.stop()
    output = _output(log)
    assert proc.returncode == 0, output
    attempts = query_running(
        db, "SELECT attempt, status, node_id FROM cell_attempts WHERE cell_id = ?", cell
    )
    assert [(a, s) for a, s, _ in attempts] == [(1, "completed")] and attempts[0][2] != node_id
    ((exit_class, node_resumes),) = query_running(
        db, "SELECT exit_class, node_resumes FROM cells WHERE cell_id = ?", cell
    )
    assert (exit_class, node_resumes) == ("exited", 1), output
    bodies = [
        json.dumps(json.loads(line)["body"]) for line in requests_log.read_text().splitlines()
    ]
    resumed = [b for b in bodies if RESUMED in b]
    assert resumed, "the resumed CLI never sent the resume message"
    # The same session: the first run's tool call and its output are in the resumed run's context.
    assert "echo first-run" in resumed[0] and "FIRST-RUN" in resumed[0], resumed[0][:3000]
    cell_dir = sweep_dir / "cells" / cell
    assert RESUMED in (cell_dir / "prompt.resume1.md").read_text()  # the continue launch's prompt
    # The trace goes on after the lost node's steps, numbered on.
    seqs = [s for (s,) in query_running(db, "SELECT seq FROM trace_events WHERE cell_id = ?", cell)]
    texts = " ".join(
        t for (t,) in query_running(db, "SELECT text FROM trace_events WHERE cell_id = ?", cell)
    )
    assert len(seqs) == len(set(seqs)) and "FIRST-RUN" in texts and "step-two" in texts
    print(
        f"real CLI resume ({agent}): {len(bodies)} model requests, "
        f"test {time.monotonic() - started:.1f} s",
        file=sys.stderr,
    )
