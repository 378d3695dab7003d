"""A cell that lost its node goes on elsewhere from its last checkpoint (docs/design.md#node-loss).

The scheduler sees a cell's Workspace actor die with its node. With ``cell.on_node_loss=resume``
(the default) and a checkpoint that reached durable storage, it picks that checkpoint
(:func:`plan_resume`) and places the cell again, in the same attempt, handing the new Workspace
actor a :class:`ResumeFrom`. That actor builds a fresh workspace, sandbox and tokens as for any
cell, restores ``code/``, ``output/`` and the agent's HOME from the checkpoint
(:func:`restore_workspace`), gives the agent the budget left at the checkpoint, and launches it
with the continue flag of its CLI and :func:`resume_prompt` (the scripted agent goes on from its
last saved stage). The work after the checkpoint is lost and recorded as such (``lost_s``), not
charged to the budget; the driver tokens it spent stay charged.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from autorl.grid import CellSpec
from autorl.records.live_types import CheckpointRecord
from autorl.records.resumes import ResumeEvent
from autorl.records.types import DriverUsage
from autorl.schema import DriverConfig
from autorl.workspace.checkpoint_restore import RestoreResult, restore_snapshot
from autorl.workspace.checkpointing import CheckpointTransport, checkpoint_source
from autorl.workspace.layout import WorkspacePaths


@dataclass(frozen=True)
class ResumeFrom:
    """What the scheduler hands the Workspace actor of a cell that resumes after a node loss.

    Attributes:
        seq: The resume's number in the cell's attempt (from 1).
        checkpoint_id: The checkpoint to restore.
        checkpoint_t: Unix time it was taken.
        time_used_s: The agent's time used up to it (charged to the budget).
        lost_s: Wall time from it to the loss being seen (lost, not charged).
        home_node: The sweep driver's node, which holds the checkpoints when there is no
            ``storage.root``.
        from_node: The node that was lost, if known.
        reason: What the scheduler saw.
    """

    seq: int
    checkpoint_id: str
    checkpoint_t: float
    time_used_s: float
    lost_s: float
    home_node: str | None
    from_node: str | None = None
    reason: str = ""

    def event(self, cell_id: str, attempt: int, to_node: str | None) -> ResumeEvent:
        """The record of this resume, placed on ``to_node``."""
        return ResumeEvent(
            cell_id=cell_id,
            seq=self.seq,
            t=time.time(),
            checkpoint_id=self.checkpoint_id,
            checkpoint_t=self.checkpoint_t,
            time_used_s=self.time_used_s,
            lost_s=self.lost_s,
            from_node=self.from_node,
            to_node=to_node,
            reason=self.reason,
            attempt=attempt,
        )


def checkpoint_roots(paths: WorkspacePaths, home: Path) -> dict[str, Path]:
    """What a checkpoint holds and a resume restores, by root name: the agent's code, its models
    and its HOME (where each CLI keeps its session files)."""
    return {"code": paths.code, "output": paths.output, "home": home}


def plan_resume(
    checkpoints: Sequence[CheckpointRecord],
    *,
    seen_at: float,
    seq: int,
    home_node: str | None,
    from_node: str | None,
    reason: str,
) -> ResumeFrom | None:
    """The resume from the attempt's last usable checkpoint; None when it has none (a checkpoint
    that failed, or was taken before the agent started, cannot be resumed from).

    >>> ok = CheckpointRecord("c", 100.0, checkpoint_id="0002", agent_time_s=40.0)
    >>> bad = CheckpointRecord("c", 130.0, agent_time_s=70.0, error="store full")
    >>> r = plan_resume([ok, bad], seen_at=150.0, seq=1, home_node="h", from_node="n", reason="x")
    >>> r.checkpoint_id, r.time_used_s, r.lost_s
    ('0002', 40.0, 50.0)
    >>> plan_resume([bad], seen_at=150.0, seq=1, home_node="h", from_node="n", reason="x") is None
    True
    """
    usable = [
        c for c in checkpoints if c.error is None and c.checkpoint_id and c.agent_time_s is not None
    ]
    if not usable:
        return None
    last = max(usable, key=lambda c: c.t)
    assert last.agent_time_s is not None  # filtered above; for the type checker
    return ResumeFrom(
        seq=seq,
        checkpoint_id=last.checkpoint_id,
        checkpoint_t=last.t,
        time_used_s=last.agent_time_s,
        lost_s=round(max(0.0, seen_at - last.t), 3),
        home_node=home_node,
        from_node=from_node,
        reason=reason,
    )


def restore_workspace(
    resume: ResumeFrom,
    cell: CellSpec,
    sweep_dir: Path,
    roots: Mapping[str, Path],
    transport: CheckpointTransport | None,
) -> RestoreResult:
    """Restore the checkpoint's roots into this node's fresh workspace.

    ``code/`` and ``output/`` come empty from the workspace's layout; the HOME folder (left by an
    earlier placement of the cell when nodes share a disk) is removed first: a restore writes only
    into empty folders, so nothing of what was there mixes with what the checkpoint holds.

    Raises:
        CheckpointError: The checkpoint cannot be brought to this node or restored.
    """
    store = checkpoint_source(cell, sweep_dir, resume.home_node, resume.checkpoint_id, transport)
    for folder in roots.values():
        if folder.exists() and any(folder.iterdir()):
            shutil.rmtree(folder)
    return restore_snapshot(store, dict(roots), resume.checkpoint_id)


def driver_budget_left(driver: DriverConfig, spent: DriverUsage | None) -> DriverConfig:
    """``driver`` with its cell budgets less what the lost node's gateway already spent (the new
    gateway counts from zero), at least 0 each.

    >>> from autorl.config import compose
    >>> cfg = compose(["driver=gpt-5", "driver.budget.max_tokens=1000"]).driver
    >>> driver_budget_left(cfg, DriverUsage(300, 200, 0.5)).budget.max_tokens
    500
    """
    if spent is None:
        return driver
    budget = driver.budget
    tokens = budget.max_tokens
    cost = budget.max_cost_usd
    return dataclasses.replace(
        driver,
        budget=dataclasses.replace(
            budget,
            max_tokens=None
            if tokens is None
            else max(0, tokens - spent.tokens_in - spent.tokens_out),
            max_cost_usd=None if cost is None else max(0.0, cost - spent.cost_usd),
        ),
    )


def _clock(seconds: float) -> str:
    hours, minutes = divmod(int(seconds) // 60, 60)
    return f"{hours}h {minutes:02d}m"


def resume_prompt(resume: ResumeFrom, restored: RestoreResult, remaining_s: float) -> str:
    """What the agent is told when it goes on after its machine was replaced.

    >>> r = ResumeFrom(1, "0003", 0.0, 3600.0, 240.0, None)
    >>> text = resume_prompt(r, RestoreResult("0003", 12, 3, 0, 2048), 5400.0)
    >>> "replaced" in text and "1h 30m" in text and "12 files" in text
    True
    """
    return (
        "The machine you were working on was lost and has been replaced. Your workspace was "
        f"restored from a checkpoint taken {resume.lost_s:.0f} seconds before the loss "
        f"({restored.files} files, {restored.bytes} bytes: code/, output/ and your HOME); anything "
        "you did after it is gone, and processes you had running were stopped. Your earlier "
        "submissions still count and the best valid one is your score.\n"
        f"{_clock(remaining_s)} ({remaining_s:.0f} seconds) of your budget remain; the time lost "
        "was not charged to it. instructions.md describes this machine. Check your files, then "
        "keep working: improve the model and submit better versions through the grading API "
        '(`curl -s -X POST "$GRADING_SERVER_URL/submit" -H "Authorization: Bearer $GRADING_TOKEN" '
        "-H 'Content-Type: application/json' -d '{\"model_path\": \"output/vN\"}'`).\n"
    )
