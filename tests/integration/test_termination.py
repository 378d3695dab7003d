"""A last checkpoint at a node's termination notice (issue #43; autorl/workspace/termination.py).

One ``ray.cluster_utils.Cluster`` for the module (a head without work), and per test a worker node
of its own (a drained node takes no new actors). On it a threaded actor stands in for the
Workspace: a real :class:`~autorl.workspace.checkpointing.CellCheckpoints` of a small cell under
``tmp_path`` (``every_s`` an hour, so only the notice takes a checkpoint), its records written to
a file by the sink, and :func:`~autorl.workspace.termination.watch_termination` beside it.

- ``test_a_preemption_drain_takes_a_checkpoint_before_its_deadline``: the node is drained with
  reason preemption and a deadline of :data:`DRAIN_DEADLINE_S`; a checkpoint is recorded, with a
  reason naming the time left, well before the deadline.
- ``test_sigterm_takes_a_complete_checkpoint_before_the_process_dies``: SIGTERM to the actor's
  worker process, then the kubelet's way: :data:`GRACE_S` for the process to end, SIGKILL after.
  Idle, the process ends by itself (the signal went back to Ray's handler); busy in a long method
  (as the Workspace is in ``run()``), Ray lets it run on until the SIGKILL. Either way a complete
  checkpoint (manifest written) restores the cell's files exactly.
- ``test_sigterm_to_a_pods_ray_start_drains_the_node_and_takes_a_checkpoint``: a kubelet eviction,
  SIGTERM to a node's ``ray start --block``, which drains its node (reason preemption) for
  :data:`POD_DRAIN_S` before it kills the node's processes; the drain notice takes a checkpoint
  that restores the cell's files.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray import cloudpickle

from autorl.actors.node_notices import this_node_drain_deadline
from autorl.records.live_types import CheckpointRecord
from autorl.workspace.checkpoint_store import CheckpointStore
from autorl.workspace.checkpointing import CellCheckpoints
from autorl.workspace.termination import watch_termination
from tests.helpers.checkpoint_trees import cell, config, restored, tree
from tests.helpers.procs import free_port, processes_mentioning
from tests.helpers.ray_cluster import local_cluster

pytestmark = pytest.mark.integration

DRAIN_DEADLINE_S = 20
# How long `ray start --block` drains its node on SIGTERM before it kills the node's processes
# (RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S, 30 s by default): the grace period of the pod test.
POD_DRAIN_S = 8
# The grace period the SIGTERM test gives the process before its SIGKILL (kubelet's default is
# 30 s): the checkpoint of the test's 17 MB cell takes well under a second.
GRACE_S = 6.0
_node_numbers = itertools.count()
# Ray's workers cannot import this module (pytest imports it as integration.test_termination): its
# actor and helpers travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class FileSink:
    """Writes each checkpoint's record as a JSON line (the Recorder's stand-in)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def record_checkpoint(self, record: CheckpointRecord) -> None:
        with self.path.open("a") as out:
            out.write(json.dumps({"record": dataclasses.asdict(record)}) + "\n")


class Cell:
    """A running cell's checkpoints and the termination watcher, in one worker process."""

    def __init__(self, roots: dict[str, Path], store: Path, log: Path) -> None:
        self.log = log
        self.checkpoints = CellCheckpoints(
            "c1", store, roots, config(every_s=3600), FileSink(log), agent_time=lambda: 7.0
        )
        self.running = False

    def start(self) -> int:
        """Start the checkpoints and the watcher (from a method thread, as the Workspace does);
        returns the worker's PID."""
        self.checkpoints.start()

        def take(reason: str) -> object:
            with self.log.open("a") as out:
                out.write(json.dumps({"notice": reason, "t": time.time()}) + "\n")
            return self.checkpoints.take()

        watch_termination(take, poll_s=0.5, drain_deadline=this_node_drain_deadline())
        return os.getpid()

    def run(self, seconds: float) -> None:
        """Stay busy in a method, as the Workspace is in ``run()`` for the whole cell."""
        self.running = True
        time.sleep(seconds)

    def is_running(self) -> bool:
        """Whether :meth:`run` has begun."""
        return self.running


def _lines(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _wait_for_record(log: Path, timeout_s: float) -> tuple[list[str], dict[str, Any], float]:
    """The notices and the first checkpoint record in ``log``, and when the record appeared."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = _lines(log)
        records = [line["record"] for line in lines if "record" in line]
        if records:
            return [line["notice"] for line in lines if "notice" in line], records[0], time.time()
        time.sleep(0.05)
    pytest.fail(f"no checkpoint recorded within {timeout_s} s: {_lines(log)}")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A head without CPUs (every actor goes to a node of its own) and Ray's own health checks."""
    with local_cluster(workers=0, head_cpus=0, head_resources={}, fast_health=False) as cluster:
        ray.init(address=cluster.address)
        try:
            yield cluster
        finally:
            ray.shutdown()


@pytest.fixture()
def node(cluster: Any) -> Iterator[tuple[str, str]]:
    """A fresh worker node: its custom resource (to place the actor there) and its id."""
    resource = f"termination_node_{next(_node_numbers)}"
    added = cluster.add_node(num_cpus=1, resources={resource: 1})
    cluster.wait_for_nodes()
    try:
        yield resource, added.node_id
    finally:
        cluster.remove_node(added)


def _start_cell(tmp_path: Path, resource: str) -> tuple[Any, int, dict[str, Path], Path, Path]:
    roots = cell(tmp_path)
    # Enough bytes that the checkpoint takes measurable time (hashing and copying 17 MB).
    (roots["output"] / "v1" / "optimizer.bin").write_bytes(os.urandom(16 << 20))
    store, log = tmp_path / "store", tmp_path / "records.jsonl"
    store.mkdir()
    # Threaded, like the Workspace actor (SweepRunner._start gives it max_concurrency 4).
    options = {"num_cpus": 0, "max_concurrency": 4, "resources": {resource: 1}}
    actor: Any = ray.remote(Cell).options(**options).remote(roots, store, log)
    pid = ray.get(actor.start.remote(), timeout=60)
    return actor, pid, roots, store, log


def test_a_preemption_drain_takes_a_checkpoint_before_its_deadline(
    tmp_path: Path, node: tuple[str, str]
) -> None:
    from ray._raylet import GcsClient  # type: ignore[attr-defined]
    from ray.core.generated.autoscaler_pb2 import DrainNodeReason  # type: ignore[attr-defined]

    resource, node_id = node
    actor, _, _, store, log = _start_cell(tmp_path, resource)
    actor.run.remote(120)
    gcs = GcsClient(address=ray.get_runtime_context().gcs_address)
    drained_at = time.time()
    deadline = drained_at + DRAIN_DEADLINE_S
    accepted, why = gcs.drain_node(
        node_id,
        DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
        "spot instance reclaimed",
        int(deadline * 1000),
    )
    assert accepted, why

    notices, record, seen_at = _wait_for_record(log, timeout_s=DRAIN_DEADLINE_S)
    print(f"drain -> checkpoint recorded in {seen_at - drained_at:.2f} s; {record}")
    assert seen_at < deadline - 5, "the checkpoint came too close to the deadline"
    assert len(notices) == 1, notices
    left = re.fullmatch(r"node preempted \(Ray drain\), ([\d.]+) s to its deadline", notices[0])
    assert left and DRAIN_DEADLINE_S - 5 < float(left[1]) <= DRAIN_DEADLINE_S, notices[0]
    assert record["error"] is None and record["files"] == 7, record
    assert CheckpointStore(store).manifest_ids() == [record["checkpoint_id"]]
    ray.kill(actor)


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
def test_sigterm_takes_a_complete_checkpoint_before_the_process_dies(
    tmp_path: Path, node: tuple[str, str], busy: bool
) -> None:
    resource, _ = node
    actor, pid, roots, store, log = _start_cell(tmp_path, resource)
    if busy:
        actor.run.remote(120)
        deadline = time.monotonic() + 30
        while not ray.get(actor.is_running.remote(), timeout=30):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    expected = tree(roots)

    sent, sent_at = time.monotonic(), time.time()
    os.kill(pid, signal.SIGTERM)
    ended_by_itself = False
    while time.monotonic() - sent < GRACE_S:
        if not _alive(pid):
            ended_by_itself = True
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)  # the end of the grace period, as a kubelet does
    gone_after = time.monotonic() - sent
    deadline = time.monotonic() + 10
    while _alive(pid):
        assert time.monotonic() < deadline, "the worker outlived its SIGKILL"
        time.sleep(0.05)

    notices, record, _ = _wait_for_record(log, timeout_s=2)
    print(f"SIGTERM ({'busy' if busy else 'idle'}): process gone after {gone_after:.2f} s "
          f"(by itself: {ended_by_itself}); checkpoint {record['total_s']} s")  # fmt: skip
    # Idle, Ray's own SIGTERM handler ends the process once the checkpoint is taken; busy in a
    # method, the process runs on until the SIGKILL (Ray handles SIGTERM on the main thread only).
    assert ended_by_itself is not busy
    assert notices == [f"SIGTERM to the actor's process {pid}"]
    assert record["error"] is None and record["files"] == 7, record
    assert record["t"] - sent_at < GRACE_S / 2, "the checkpoint was not taken at once"
    assert CheckpointStore(store).manifest_ids() == [record["checkpoint_id"]]
    assert tree(restored(tmp_path, CheckpointStore(store), roots)) == expected


def _alive(pid: int) -> bool:
    """Whether ``pid`` is still a process that is not a zombie (the raylet reaps its workers)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _ray_start_node(temp_dir: Path, resource: str) -> subprocess.Popen[bytes]:
    """A worker node the way a Kubernetes pod runs one: ``ray start --block`` as its main process
    (the one the kubelet sends SIGTERM), joined to the module's cluster."""
    alive = len([n for n in ray.nodes() if n["Alive"]])
    command = [
        str(Path(sys.executable).parent / "ray"),
        "start",
        "--block",
        f"--address={ray.get_runtime_context().gcs_address}",
        "--num-cpus=1",
        f"--resources={json.dumps({resource: 1})}",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
        f"--dashboard-agent-listen-port={free_port()}",
    ]
    env = dict(os.environ) | {
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": str(POD_DRAIN_S),
    }
    node = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while len([n for n in ray.nodes() if n["Alive"]]) <= alive:
        assert node.poll() is None, node.stdout.read().decode() if node.stdout else ""
        assert time.monotonic() < deadline, "the node did not join within 120 s"
        time.sleep(0.2)
    return node


def test_sigterm_to_a_pods_ray_start_drains_the_node_and_takes_a_checkpoint(
    tmp_path: Path, cluster: Any
) -> None:
    """A kubelet eviction: SIGTERM to the pod's main process, ``ray start --block``, which drains
    its node with reason preemption for :data:`POD_DRAIN_S` before it kills the node's processes
    (the raylet's own SIGTERM ends its workers within ~50 ms, too soon for any checkpoint)."""
    temp_dir = Path(tempfile.mkdtemp(prefix="arp-", dir="/tmp"))
    node = _ray_start_node(temp_dir, "termination_pod")
    try:
        actor, _, roots, store, log = _start_cell(tmp_path, "termination_pod")
        actor.run.remote(120)
        expected = tree(roots)
        sent = time.time()
        os.kill(node.pid, signal.SIGTERM)
        notices, record, seen_at = _wait_for_record(log, timeout_s=POD_DRAIN_S)
        print(f"pod SIGTERM -> checkpoint recorded in {seen_at - sent:.2f} s: {notices}")
        assert len(notices) == 1 and notices[0].startswith("node preempted (Ray drain), "), notices
        assert record["error"] is None and record["files"] == 7, record
        node.wait(POD_DRAIN_S + 30)  # the drain's end: ray start kills the node's processes
        assert tree(restored(tmp_path, CheckpointStore(store), roots)) == expected
    finally:
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGKILL)
            node.wait(10)
        for pid in processes_mentioning(str(temp_dir)):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp_dir, ignore_errors=True)
