"""Cells grouped by task × agent × driver: the view of a big sweep.

A 540-cell sweep is unreadable as 540 lines; its questions are per group ("how far is gsm8k ×
codex × gpt-5, and how good is it so far?"). The terminal's live table and the web viewer both
group with :func:`group_cells`, so they agree on what a group is and what it shows.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from autorl.records.types import CellRecord

GroupKey = tuple[str, str, str]
"""``(task, agent, driver)``: models and seeds of a group are its repetitions."""

# States a cell will not leave again in this sweep run; the rest are still to come or under way.
FINAL_STATES = frozenset({"completed", "failed", "cancelled"})


@dataclass
class CellGroup:
    """The cells of one task × agent × driver and what they add up to.

    Attributes:
        key: ``(task, agent, driver)``.
        counts: Cells per status.
        best: The best score of any cell of the group, once one has a valid submission.
        improvements: Each finished-or-running cell's improvement over its baseline, when known.
        running: Ids of the cells under way, in the order given.
    """

    key: GroupKey
    counts: Counter[str] = field(default_factory=Counter)
    best: float | None = None
    improvements: list[float] = field(default_factory=list)
    running: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        """How many cells the group has."""
        return sum(self.counts.values())

    @property
    def done(self) -> int:
        """How many of them reached a final state."""
        return sum(n for status, n in self.counts.items() if status in FINAL_STATES)

    @property
    def mean_improvement(self) -> float | None:
        """The mean improvement over the cells that have one (None when none has)."""
        return statistics.fmean(self.improvements) if self.improvements else None


def group_cells(cells: Iterable[CellRecord]) -> list[CellGroup]:
    """Group cells by ``(task, agent, driver)``, groups sorted by key."""
    groups: dict[GroupKey, CellGroup] = {}
    for cell in cells:
        key = (cell.task, cell.agent, cell.driver)
        group = groups.setdefault(key, CellGroup(key))
        group.counts[cell.status] += 1
        if cell.best_score is not None and (group.best is None or cell.best_score > group.best):
            group.best = cell.best_score
        if cell.improvement is not None:
            group.improvements.append(cell.improvement)
        if cell.status == "running":
            group.running.append(cell.cell_id)
    return [groups[key] for key in sorted(groups)]
