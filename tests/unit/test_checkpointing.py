"""A running cell's checkpoints (autorl/workspace/checkpointing.py): taken on a thread every
``cell.checkpoint.every_s``, each recorded; a failing store is recorded and never stops the cell.

Real folders and a real store; the Recorder is stood in for by a list (the sweep path is in
tests/integration/test_view_browser.py).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from autorl.cell_schema import CheckpointConfig
from autorl.config import compose
from autorl.grid import CellSpec
from autorl.records.live_types import CheckpointRecord
from autorl.records.store import RecordStore
from autorl.workspace.checkpoint_store import CheckpointError
from autorl.workspace.checkpointing import CellCheckpoints, start_checkpoints, store_dir
from tests.helpers.view_server import cell


class Sink:
    """Keeps the records it is sent."""

    def __init__(self) -> None:
        self.records: list[CheckpointRecord] = []

    def record_checkpoint(self, record: CheckpointRecord) -> None:
        self.records.append(record)


def _cfg(**changes: object) -> CheckpointConfig:
    return dataclasses.replace(compose([]).cell.checkpoint, **changes)  # type: ignore[arg-type]


def _roots(tmp_path: Path) -> dict[str, Path]:
    roots = {name: tmp_path / "cell" / name for name in ("code", "output", "home")}
    for folder in roots.values():
        folder.mkdir(parents=True)
    (roots["code"] / "train.py").write_text("print('train')\n")
    (roots["output"] / "weights.bin").write_bytes(b"w" * 100_000)
    return roots


def _wait_for(sink: Sink, count: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(sink.records) < count:
        assert time.monotonic() < deadline, sink.records
        time.sleep(0.05)


def test_checkpoints_are_taken_every_interval_and_only_new_bytes_are_copied(
    tmp_path: Path,
) -> None:
    roots, sink = _roots(tmp_path), Sink()
    folder = store_dir(None, tmp_path / "sweep", "s1", "c1")
    assert folder == tmp_path / "sweep" / "checkpoints" / "c1"
    checkpoints = CellCheckpoints("c1", folder, roots, _cfg(every_s=0.2), sink,
                                  agent_time=lambda: 42.0)  # fmt: skip
    checkpoints.start()
    _wait_for(sink, 2)
    (roots["code"] / "train.py").write_text("print('train harder')\n")
    _wait_for(sink, 4)
    checkpoints.stop()
    first, second = sink.records[:2]
    assert first.error is None and first.files == 2 and first.bytes_new == first.bytes_total
    assert first.bytes_total == 100_000 + len("print('train')\n") and first.agent_time_s == 42.0
    assert second.bytes_new == 0 and second.checkpoint_id > first.checkpoint_id
    # The changed file is stored again, the model's bytes never.
    assert 0 < sum(r.bytes_new for r in sink.records[2:]) <= len("print('train harder')\n")
    assert not first.frozen  # no cgroup given: listed while running, and the record says so
    assert sink.records == checkpoints.taken


def test_a_failing_store_is_recorded_and_the_next_round_tries_again(tmp_path: Path) -> None:
    roots, sink = _roots(tmp_path), Sink()
    (roots["output"] / "big.bin").write_bytes(b"x" * 300_000)
    folder = store_dir(None, tmp_path / "sweep", "s1", "c1")
    checkpoints = CellCheckpoints("c1", folder, roots, _cfg(every_s=0.1, max_file_bytes=200_000),
                                  sink)  # fmt: skip
    checkpoints.start()
    _wait_for(sink, 1)
    (roots["output"] / "big.bin").unlink()  # back under the cap: the next round succeeds
    deadline = time.monotonic() + 20
    while not any(r.error is None for r in sink.records):
        assert time.monotonic() < deadline, sink.records
        time.sleep(0.05)
    checkpoints.stop()
    failed = sink.records[0]
    assert failed.checkpoint_id == "" and failed.error is not None
    assert "cell.checkpoint.max_file_bytes" in failed.error


def test_a_missing_storage_root_is_an_error_never_a_local_folder(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="storage.root .* is missing"):
        store_dir(str(tmp_path / "not-mounted"), tmp_path / "sweep", "s1", "c1")
    assert not (tmp_path / "not-mounted").exists()
    mounted = tmp_path / "shared"
    mounted.mkdir()
    assert store_dir(str(mounted), tmp_path / "sweep", "s1", "c1") == (
        mounted / "checkpoints" / "s1" / "c1"
    )


def test_start_records_why_a_cell_has_no_checkpoints(tmp_path: Path) -> None:
    from autorl.workspace.run_meta import RunMeta

    config = compose([f"storage.root={tmp_path / 'not-mounted'}"])
    spec = CellSpec(sweep_id="s1", cell_id="c1", agent="scripted", driver="none", task="gsm8k",
                    model="tiny", seed=0, config=config)  # fmt: skip
    sink = Sink()
    meta = RunMeta(tmp_path / "run_meta.json", 60.0, tmp_path)
    assert start_checkpoints(spec, tmp_path, _roots(tmp_path), sink, None, meta) is None
    assert len(sink.records) == 1 and "is missing" in str(sink.records[0].error)
    off = dataclasses.replace(spec, config=compose(["cell.checkpoint.enabled=false"]))
    assert start_checkpoints(off, tmp_path, _roots(tmp_path / "b"), sink, None, meta) is None
    assert len(sink.records) == 1  # off: nothing taken, nothing recorded


def test_checkpoint_records_are_stored_per_attempt(tmp_path: Path) -> None:
    store = RecordStore(tmp_path / "records.sqlite")
    store.upsert_cell(cell("c1", status="running"))
    store.add_checkpoint(CheckpointRecord("c1", 1.0, "000001", 10.0, 3, 300, 300, True, 0.01, 0.2))
    store.add_checkpoint(CheckpointRecord("c1", 2.0, error="store full"))
    store.add_checkpoint(CheckpointRecord("c1", 2.0, error="a replay"))
    got = store.list_checkpoints("c1")
    assert [(r.checkpoint_id, r.frozen, r.error) for r in got] == [
        ("000001", True, None),
        ("", False, "store full"),
    ]
    assert all(r.attempt == 1 for r in got)
    store.close()


def _spec(*overrides: str) -> CellSpec:
    return CellSpec(sweep_id="s1", cell_id="c1", agent="scripted", driver="none", task="gsm8k",
                    model="tiny", seed=0, config=compose(list(overrides)))  # fmt: skip


def test_a_push_that_fails_is_a_failed_checkpoint_and_the_next_one_counts(tmp_path: Path) -> None:
    roots, sink, pushed = _roots(tmp_path), Sink(), []
    outcomes: list[Exception | None] = [
        CheckpointError("node 1a2b3c is dead (removed from the cluster)"),
        RuntimeError("a bug in the push"),
        None,
    ]

    def push(checkpoint_id: str) -> None:
        pushed.append(checkpoint_id)
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    folder = tmp_path / "stage"
    folder.mkdir()
    checkpoints = CellCheckpoints("c1", folder, roots, _cfg(), sink, agent_time=lambda: 7.0,
                                  push=push)  # fmt: skip
    lost, buggy, arrived = checkpoints.take(), checkpoints.take(), checkpoints.take()
    assert pushed == ["000001", "000002", "000003"]  # each one taken on this node, then sent
    assert lost.checkpoint_id == "" and lost.agent_time_s == 7.0
    assert lost.error is not None and "checkpoint 000001" in lost.error
    assert "did not reach the home node" in lost.error and "is dead" in lost.error
    assert buggy.checkpoint_id == "" and "a bug in the push" in str(buggy.error)
    assert arrived.error is None and arrived.checkpoint_id == "000003" and arrived.files == 2
    assert sink.records == [lost, buggy, arrived]


def test_a_cell_off_its_home_node_stages_its_checkpoints_and_pushes_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autorl.workspace import checkpointing
    from autorl.workspace.run_meta import RunMeta

    here, home = "b" * 56, "a" * 56
    pushes: list[tuple[str, Path, Path, str]] = []

    def push(home_node: str, stage: Path, home_folder: Path, checkpoint_id: str) -> object:
        pushes.append((home_node, stage, home_folder, checkpoint_id))
        return None

    transport = checkpointing.CheckpointTransport(lambda: here, push, lambda *_: None)
    sweep, sink = tmp_path / "sweep", Sink()
    meta = RunMeta(tmp_path / "run_meta.json", 60.0, tmp_path)
    spec = _spec("cell.checkpoint.every_s=3600")
    away = start_checkpoints(spec, sweep, _roots(tmp_path), sink, None, meta, home_node=home,
                             time_used_before_s=100.0, transport=transport)  # fmt: skip
    assert away is not None
    try:
        stage = sweep / "checkpoint_stage" / here[:12] / "c1"
        assert away.folder == stage
        before_start = away.take()  # the agent has not started again: its earlier time counts
        meta.update(start_time=time.time() - 5.0)
        after_start = away.take()
    finally:
        away.stop()
    assert pushes == [(home, stage, sweep / "checkpoints" / "c1", "000001"),
                      (home, stage, sweep / "checkpoints" / "c1", "000002")]  # fmt: skip
    assert before_start.agent_time_s == 100.0
    assert after_start.agent_time_s is not None and 105.0 <= after_start.agent_time_s < 110.0
    # On its home node, or with a shared root, a cell writes its checkpoints where they belong.
    at_home = start_checkpoints(spec, sweep, _roots(tmp_path / "h"), sink, None, meta,
                                home_node=here, transport=transport)  # fmt: skip
    shared = tmp_path / "shared"
    shared.mkdir()
    on_root = start_checkpoints(_spec(f"storage.root={shared}"), sweep, _roots(tmp_path / "r"),
                                sink, None, meta, home_node=home,
                                transport=transport)  # fmt: skip
    assert at_home is not None and on_root is not None
    at_home.stop()
    on_root.stop()
    assert at_home.folder == sweep / "checkpoints" / "c1" and at_home.push is None
    assert on_root.folder == shared / "checkpoints" / "s1" / "c1" and on_root.push is None
    assert len(pushes) == 2


def test_the_restore_side_reads_the_home_folder_or_the_shared_root_in_place(
    tmp_path: Path,
) -> None:
    from autorl.workspace.checkpointing import CheckpointTransport, checkpoint_source

    def never(*_: object) -> None:
        raise AssertionError("nothing travels to a node that has the checkpoint")

    transport = CheckpointTransport(lambda: "h" * 56, never, never)
    sweep = tmp_path / "sweep"
    store = checkpoint_source(_spec(), sweep, "h" * 56, "000001", transport)
    assert store.root == sweep / "checkpoints" / "c1"
    shared = tmp_path / "shared"
    shared.mkdir()
    store = checkpoint_source(_spec(f"storage.root={shared}"), sweep, "other" * 8, "000001",
                              transport)  # fmt: skip
    assert store.root == shared / "checkpoints" / "s1" / "c1"
