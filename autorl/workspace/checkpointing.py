"""A running cell's checkpoints: one every ``cell.checkpoint.every_s``, each recorded.

The Workspace actor starts a :class:`CellCheckpoints` beside the agent. Each round takes a snapshot
of the cell's ``code/``, ``output/`` and the agent's HOME (:func:`autorl.workspace.checkpoint.
take_snapshot`, with the cell's cgroup frozen for the listing) into the cell's checkpoint store and
sends its figures, with the agent's time used, to the Recorder. A checkpoint that fails (a cap, a
store that is missing, read-only or full) is recorded with its error and logged; it never fails or
stops the cell, and the next round tries again.

Where the store is: under ``storage.root`` when one is set (:func:`store_dir`; every node mounts
it, so a checkpoint outlives its node). Without one, the checkpoints belong on the sweep driver's
node (the "home node"), in ``<sweep_dir>/checkpoints/<cell>``:

- a cell on the home node (or one told no home node) writes them there itself;
- a cell on another node writes each one into a stage store on its own node,
  ``<sweep_dir>/checkpoint_stage/<node id[:12]>/<cell>`` (the node id keeps the nodes of a
  one-machine cluster apart), and a task on the home node pulls it from there
  (the :class:`CheckpointTransport` the actor passes in:
  :data:`autorl.actors.checkpoint_transfer.RAY_TRANSPORT`). The checkpoint counts (its
  record has no error) only once the home node has it; a push that fails or hangs past its time
  limit is recorded as a failed checkpoint, and the next one brings whatever blobs this one left.

On the node where a cell resumes, :func:`checkpoint_source` gives the store that holds the
checkpoint on that node (pulling it from the home node into the node's stage store when needed, so
the resumed cell's next checkpoints are numbered on from it).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from autorl.cell_schema import CheckpointConfig
from autorl.grid import CellSpec
from autorl.records.live_types import CheckpointRecord
from autorl.workspace.checkpoint import Freezer, take_snapshot
from autorl.workspace.checkpoint_store import CheckpointError, CheckpointStore
from autorl.workspace.run_meta import RunMeta

logger = logging.getLogger(__name__)


class CheckpointSink(Protocol):
    """Where the checkpoints' records go (the Recorder's client)."""

    def record_checkpoint(self, record: CheckpointRecord) -> None:
        """Store one checkpoint's record."""
        ...


def store_dir(storage_root: str | None, sweep_dir: Path, sweep_id: str, cell_id: str) -> Path:
    """The folder of a cell's checkpoint store, made if missing (but never the storage root
    itself: a root that is not there is a mount that is missing, and stays an error).

    Raises:
        CheckpointError: ``storage_root`` is set and is not a folder.
    """
    if storage_root:
        root = Path(storage_root)
        if not root.is_dir():
            raise CheckpointError(
                f"storage.root {root} is missing or not a folder (is it mounted on this node?)"
            )
        folder = root / "checkpoints" / sweep_id / cell_id
    else:
        folder = sweep_dir / "checkpoints" / cell_id
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CheckpointError(f"cannot make the checkpoint folder {folder}: {error}") from error
    return folder


def stage_dir(sweep_dir: Path, node_id: str, cell_id: str) -> Path:
    """The folder of a cell's stage store on node ``node_id`` (its checkpoints before the home node
    has them), made if missing.

    Raises:
        CheckpointError: It cannot be made.
    """
    folder = sweep_dir / "checkpoint_stage" / node_id[:12] / cell_id
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CheckpointError(f"cannot make the checkpoint folder {folder}: {error}") from error
    return folder


@dataclass(frozen=True)
class CheckpointTransport:
    """How checkpoints travel between nodes: Ray tasks, which this package does not import (the
    Workspace actor passes :data:`autorl.actors.checkpoint_transfer.RAY_TRANSPORT`).

    Attributes:
        this_node: This node's id (None outside a cluster: nothing travels then).
        push: ``push(home_node, stage folder, home folder, checkpoint_id)`` has the home node pull
            one checkpoint of this node's stage store; raises ``CheckpointError``.
        pull: ``pull(source_node, source folder, dest folder, checkpoint_id)`` brings one
            checkpoint here; raises ``CheckpointError``.
    """

    this_node: Callable[[], str | None]
    push: Callable[[str, Path, Path, str], object]
    pull: Callable[[str, str, Path, str], object]


def checkpoint_source(
    cell: CellSpec,
    sweep_dir: Path,
    home_node: str | None,
    checkpoint_id: str,
    transport: CheckpointTransport | None = None,
) -> CheckpointStore:
    """A store on this node that holds checkpoint ``checkpoint_id`` of ``cell`` (for a restore).

    The shared folder with ``storage.root``; the home folder when this node is the home node (or
    none is named); else this node's stage store, into which the checkpoint is pulled from the
    home node first.

    Raises:
        CheckpointError: The store is missing, or the pull failed (naming why).
    """
    cfg = cell.config
    here = _away_from(home_node, cfg.storage.root, transport)
    if here is None or home_node is None or transport is None:
        return CheckpointStore(store_dir(cfg.storage.root, sweep_dir, cell.sweep_id, cell.cell_id))
    stage = stage_dir(sweep_dir, here, cell.cell_id)
    stats = transport.pull(home_node, str(sweep_dir / "checkpoints" / cell.cell_id), stage,
                           checkpoint_id)  # fmt: skip
    logger.info("cell %s: checkpoint %s pulled from the home node: %s", cell.cell_id,
                checkpoint_id, stats)  # fmt: skip
    return CheckpointStore(stage)


def _away_from(
    home_node: str | None, storage_root: str | None, transport: CheckpointTransport | None
) -> str | None:
    """This node's id when its checkpoints must travel to ``home_node`` (no shared storage, and
    another node); None when they stay where they are written."""
    if storage_root or home_node is None or transport is None:
        return None
    here = transport.this_node()
    return here if here is not None and here != home_node else None


class CellCheckpoints:
    """Takes a running cell's checkpoints on a thread and records each one.

    Args:
        cell_id: The cell.
        folder: Its checkpoint store's folder (:func:`store_dir`).
        roots: Name -> folder of what each checkpoint holds (``code``, ``output``, ``home``).
        cfg: ``cell.checkpoint``.
        sink: Receives each checkpoint's record.
        freezer: The cell's cgroup, frozen while a checkpoint lists the files; None: unfrozen.
        agent_time: The agent's time used so far (None before it started).
        push: Sends a checkpoint (by id) from ``folder`` to the home node, raising
            :class:`CheckpointError` if it does not arrive; None: ``folder`` is where the
            checkpoints belong.
    """

    def __init__(
        self,
        cell_id: str,
        folder: Path,
        roots: Mapping[str, Path],
        cfg: CheckpointConfig,
        sink: CheckpointSink,
        freezer: Freezer | None = None,
        agent_time: Callable[[], float | None] = lambda: None,
        push: Callable[[str], object] | None = None,
    ) -> None:
        self.cell_id = cell_id
        self.folder = folder
        self.roots = dict(roots)
        self.cfg = cfg
        self.sink = sink
        self.freezer = freezer
        self.agent_time = agent_time
        self.push = push
        self.taken: list[CheckpointRecord] = []
        self._stop = threading.Event()
        # A termination notice's checkpoint may come while a periodic one runs: one at a time,
        # or both would take the same id and freeze and thaw the cell over each other.
        self._taking = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="checkpoints", daemon=True)

    def start(self) -> None:
        """Take a checkpoint every ``cfg.every_s`` from now on."""
        self._thread.start()

    def stop(self) -> None:
        """Stop taking checkpoints (a checkpoint under way is finished first)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.cfg.every_s):
            self.take()

    def take(self) -> CheckpointRecord:
        """Take one checkpoint now and record it; a failure is recorded with its error."""
        with self._taking:
            return self._take()

    def _take(self) -> CheckpointRecord:
        agent_time = self.agent_time()
        # Stamped with the snapshot's start: the state it holds (a push to the home node may take
        # long after it), which is what a resume's lost time counts from.
        taken_at = time.time()
        try:
            result = take_snapshot(CheckpointStore(self.folder), self.roots, self.cfg,
                                   freezer=self.freezer)  # fmt: skip
            if self.push is not None:
                try:
                    sent = self.push(result.checkpoint_id)
                except CheckpointError as error:
                    raise CheckpointError(
                        f"checkpoint {result.checkpoint_id} was taken on this node but did not "
                        f"reach the home node: {error}"
                    ) from error
                logger.info("cell %s: checkpoint %s reached the home node: %s", self.cell_id,
                            result.checkpoint_id, sent)  # fmt: skip
            record = CheckpointRecord(
                cell_id=self.cell_id,
                t=taken_at,
                checkpoint_id=result.checkpoint_id,
                agent_time_s=agent_time,
                files=result.files,
                bytes_total=result.bytes_total,
                bytes_new=result.bytes_new,
                frozen=result.frozen,
                frozen_s=result.frozen_s,
                total_s=result.total_s,
            )
        except Exception as error:  # noqa: BLE001 - CheckpointError, or a bug: never the cell's end
            reason = str(error) if isinstance(error, CheckpointError) else repr(error)
            logger.warning("cell %s: checkpoint failed, the cell goes on: %s", self.cell_id, reason)
            record = CheckpointRecord(self.cell_id, time.time(), agent_time_s=agent_time,
                                      error=reason)  # fmt: skip
        self.taken.append(record)
        try:
            self.sink.record_checkpoint(record)
        except Exception as error:  # noqa: BLE001 - a record lost is logged, never the cell's end
            logger.warning("cell %s: checkpoint record not stored: %s", self.cell_id, error)
        return record


def start_checkpoints(
    cell: CellSpec,
    sweep_dir: Path,
    roots: Mapping[str, Path],
    sink: CheckpointSink,
    freezer: Freezer | None,
    run_meta: RunMeta,
    home_node: str | None = None,
    time_used_before_s: float = 0.0,
    transport: CheckpointTransport | None = None,
) -> CellCheckpoints | None:
    """The cell's checkpoints, started; None with ``cell.checkpoint.enabled`` off, or when the
    store's folder cannot be made (recorded and logged: the cell runs on without checkpoints).

    Args:
        cell: The cell.
        sweep_dir: The sweep folder on the cell's node.
        roots: What each checkpoint holds (``code``, ``output``, ``home``).
        sink: The Recorder's client.
        freezer: The cell's cgroup.
        run_meta: The cell's budget file, whose ``start_time`` gives the agent's time used.
        home_node: The sweep driver's node, where the checkpoints go without ``storage.root``;
            None: this node's sweep folder.
        time_used_before_s: The agent's time used before this run (a resumed cell's earlier
            runs), added to each checkpoint's.
        transport: How checkpoints reach ``home_node`` from another node; None: they stay in
            this node's sweep folder.
    """
    cfg = cell.config
    if not cfg.cell.checkpoint.enabled:
        return None

    def agent_time() -> float | None:
        start = run_meta.snapshot().get("start_time")
        if start is None:  # not launched yet: what the checkpoint holds is the earlier runs' work
            return round(time_used_before_s, 3) if time_used_before_s else None
        return round(time_used_before_s + time.time() - float(start), 3)

    here = _away_from(home_node, cfg.storage.root, transport)
    push: Callable[[str], object] | None = None
    try:
        if here is not None and home_node is not None and transport is not None:
            folder = stage_dir(sweep_dir, here, cell.cell_id)
            home = sweep_dir / "checkpoints" / cell.cell_id
            push = functools.partial(transport.push, home_node, folder, home)
        else:
            folder = store_dir(cfg.storage.root, sweep_dir, cell.sweep_id, cell.cell_id)
    except CheckpointError as error:
        logger.warning("cell %s: no checkpoints: %s", cell.cell_id, error)
        sink.record_checkpoint(CheckpointRecord(cell.cell_id, time.time(), error=str(error)))
        return None
    checkpoints = CellCheckpoints(cell.cell_id, folder, roots, cfg.cell.checkpoint, sink,
                                  freezer, agent_time, push)  # fmt: skip
    checkpoints.start()
    return checkpoints
