"""Checkpoints that travel through Ray to another node's store (autorl/workspace/
checkpoint_transfer.py), on a real two-node Ray cluster on this machine.

The test process is the destination (the sweep driver's "home node" in production); the other node
is the cell's. Every snapshot is taken by a task pinned to the cell's node, into that node's stage
store; the nodes share this machine's disk, so the test also corrupts and inspects stores directly.
The last test adds a third node, resumes the cell's checkpoint there, then removes it.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from autorl.actors.checkpoint_transfer import RAY_TRANSPORT, pull_checkpoint, push_checkpoint
from autorl.cell_schema import CheckpointConfig
from autorl.config import compose
from autorl.grid import CellSpec
from autorl.workspace.checkpoint import SnapshotResult, take_snapshot
from autorl.workspace.checkpoint_restore import restore_snapshot
from autorl.workspace.checkpoint_store import CheckpointError, CheckpointStore
from autorl.workspace.checkpointing import checkpoint_source, stage_dir
from tests.helpers.ray_cluster import local_cluster

pytestmark = pytest.mark.integration

BIG = 20 * (1 << 20) + 123  # two 16 MiB chunks and a bit: the window and the chunking are used


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A head (the test's node) and one worker node."""
    with local_cluster(workers=1, head_resources={}) as cluster:
        ray.init(address=cluster.address, include_dashboard=False)
        try:
            yield cluster
        finally:
            ray.shutdown()


def _here() -> str:
    return ray.get_runtime_context().get_node_id()


def _other_node() -> str:
    alive = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != _here()]
    assert len(alive) == 1, alive
    return str(alive[0])


def _on(node_id: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id, soft=False)


def _cfg() -> CheckpointConfig:
    return compose([]).cell.checkpoint


def _snapshot_on(node_id: str, stage: Path, roots: dict[str, Path]) -> SnapshotResult:
    """A checkpoint of ``roots`` taken by a task on ``node_id`` into the store at ``stage``."""
    task = ray.remote(num_cpus=0)(take_snapshot).options(scheduling_strategy=_on(node_id))
    result: SnapshotResult = ray.get(task.remote(CheckpointStore(stage), roots, _cfg()))
    return result


def _roots(base: Path) -> dict[str, Path]:
    roots = {name: base / name for name in ("code", "output", "home")}
    (roots["code"] / "pkg").mkdir(parents=True)
    (roots["code"] / "train.py").write_text("print('train')\n")
    (roots["code"] / "pkg" / "util.py").write_text("X = 1\n")
    os.symlink("../train.py", roots["code"] / "pkg" / "link.py")
    (roots["output"] / "v1").mkdir(parents=True)
    (roots["output"] / "v1" / "model.bin").write_bytes(os.urandom(BIG))
    (roots["output"] / "v1" / "empty").write_bytes(b"")
    (roots["home"] / ".session").mkdir(parents=True)
    (roots["home"] / ".session" / "log.jsonl").write_text('{"turn": 1}\n')
    return roots


def _tree(root: Path) -> dict[str, tuple[str, str]]:
    """Every path under ``root`` -> (kind, content digest or link target)."""
    tree = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            tree[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            tree[rel] = ("dir", "")
        else:
            tree[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return tree


def _restored_same(
    store: CheckpointStore, roots: dict[str, Path], into: Path, checkpoint_id: str | None = None
) -> None:
    """Restore the checkpoint into fresh folders under ``into``; they equal ``roots`` exactly."""
    into.mkdir()
    restore_snapshot(store, {name: into / name for name in roots}, checkpoint_id)
    for name, root in roots.items():
        assert _tree(into / name) == _tree(root), name


def test_checkpoints_travel_to_the_home_node_incrementally_and_a_corrupt_blob_is_refused(
    cluster: Any, tmp_path: Path
) -> None:
    source = _other_node()
    roots = _roots(tmp_path / "cell")
    stage = stage_dir(tmp_path / "sweep", source, "c1")
    home = tmp_path / "sweep" / "checkpoints" / "c1"
    first = _snapshot_on(source, stage, roots)

    started = time.monotonic()
    stats = pull_checkpoint(source, str(stage), home, first.checkpoint_id)
    took = time.monotonic() - started
    print(f"first pull: {stats.files} blobs, {stats.bytes} bytes in {took:.2f} s")
    assert stats.read_on == {source}  # every read ran on the cell's node, none here
    assert stats.checkpoint_id == first.checkpoint_id == "000001"
    assert stats.files == 5 and stats.bytes == first.bytes_total  # every distinct content, once
    _restored_same(CheckpointStore(home), roots, tmp_path / "r1", "000001")

    # One changed file: only its blob travels.
    (roots["code"] / "train.py").write_text("print('train harder')\n")
    second = _snapshot_on(source, stage, roots)
    stats = pull_checkpoint(source, str(stage), home)  # the latest
    assert (stats.checkpoint_id, stats.files) == (second.checkpoint_id, 1)
    assert stats.bytes == len("print('train harder')\n") and stats.read_on == {source}
    _restored_same(CheckpointStore(home), roots, tmp_path / "r2")

    # A blob corrupted on the source (same size, other bytes) is refused, and the checkpoint
    # never appears at home: no manifest, no blob of it.
    (roots["output"] / "v2.bin").write_bytes(b"new weights" * 1000)
    third = _snapshot_on(source, stage, roots)
    new_blob = hashlib.sha256(b"new weights" * 1000).hexdigest()
    blob = CheckpointStore(stage).blob_path(new_blob)
    blob.write_bytes(b"x" * blob.stat().st_size)
    with pytest.raises(CheckpointError, match=f"blob {new_blob[:12]}.*corrupt") as corrupt:
        pull_checkpoint(source, str(stage), home, third.checkpoint_id)
    print(f"corrupt blob: {corrupt.value}")
    assert CheckpointStore(home).manifest_ids() == ["000001", "000002"]
    assert not CheckpointStore(home).blob_path(new_blob).exists()
    assert not list((home / "tmp").iterdir())  # nothing half-written left behind

    # A pull past its time limit (a hung source) fails the same way, leaving no checkpoint.
    blob.write_bytes(b"new weights" * 1000)
    with pytest.raises(CheckpointError, match="time limit"):
        pull_checkpoint(source, str(stage), home, third.checkpoint_id, timeout_s=1e-6)
    assert CheckpointStore(home).manifest_ids() == ["000001", "000002"]

    # The production push: from the cell's node, a task on the home node pulls the checkpoint.
    push = ray.remote(num_cpus=0)(push_checkpoint).options(scheduling_strategy=_on(source))
    pushed = ray.get(push.remote(_here(), stage, home, third.checkpoint_id))
    assert (pushed.checkpoint_id, pushed.files) == ("000003", 1) and pushed.read_on == {source}
    assert CheckpointStore(home).manifest_ids() == ["000001", "000002", "000003"]


def test_a_cell_resumes_from_the_home_node_and_a_removed_node_is_an_error_that_says_so(
    cluster: Any, tmp_path: Path
) -> None:
    sweep, source, here = tmp_path / "sweep", _other_node(), _here()
    roots = _roots(tmp_path / "cell")
    first = _snapshot_on(source, stage_dir(sweep, source, "c2"), roots)
    home = sweep / "checkpoints" / "c2"
    pull_checkpoint(source, str(stage_dir(sweep, source, "c2")), home, first.checkpoint_id)

    node = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        new = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] not in
                   (source, here))  # fmt: skip
        # The node the cell resumes on pulls the checkpoint from home into its own stage store,
        # where the resumed cell's next checkpoint is numbered on from it.
        cell = CellSpec(sweep_id="s1", cell_id="c2", agent="scripted", driver="none",
                        task="gsm8k", model="tiny", seed=0, config=compose([]))  # fmt: skip
        resume = ray.remote(num_cpus=0)(checkpoint_source).options(scheduling_strategy=_on(new))
        store: CheckpointStore = ray.get(
            resume.remote(cell, sweep, here, first.checkpoint_id, RAY_TRANSPORT)
        )
        assert store.root == stage_dir(sweep, new, "c2") and store.manifest_ids() == ["000001"]
        _restored_same(store, roots, tmp_path / "r", "000001")
        after = _snapshot_on(new, store.root, roots)
        assert after.checkpoint_id == "000002" and after.bytes_new == 0
    finally:
        cluster.remove_node(node)
    started = time.monotonic()
    with pytest.raises(
        CheckpointError, match=f"node {new[:12]}.*(dead|not in the cluster)"
    ) as lost:
        pull_checkpoint(new, str(store.root), home, "000002", timeout_s=30)
    print(
        f"a removed source node failed the pull in {time.monotonic() - started:.2f} s: {lost.value}"
    )
    assert CheckpointStore(home).manifest_ids() == ["000001"]
    # A checkpoint pushed to a home node that is gone fails (the cell records it and goes on).
    with pytest.raises(CheckpointError, match=f"home node {new[:12]}.*dead"):
        push_checkpoint(new, stage_dir(sweep, source, "c2"), tmp_path / "gone", "000001", 30.0)
