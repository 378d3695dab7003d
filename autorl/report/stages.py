"""Scores per submission over seeds: the baseline and each submitted model path (the scripted
agent's ``output/v1`` after SFT, ``output/v2`` after RL), mean ± standard error per configuration.

The sweep prints this table when a configuration ran more than one seed, and the report shows it.
Scores are test-split scores (``test_score``; with test feedback the same as ``score``). Only
completed cells count; a stage a cell never submitted is left out of that stage's mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from autorl.records.results import visible_controls
from autorl.records.types import VALID_SUBMISSION_STATUSES, CellRecord, SubmissionRecord
from autorl.report.aggregate import mean_se

STAGE_KEYS = ("task", "agent", "driver", "model")


@dataclass(frozen=True)
class Estimate:
    """A mean ± standard error over ``n`` seeds (``se`` None for one seed, both None for none)."""

    mean: float | None
    se: float | None
    n: int

    @classmethod
    def of(cls, values: list[float]) -> Estimate:
        """The estimate of ``values``."""
        mean, se = mean_se(values)
        return cls(mean, se, len(values))

    def text(self, seeds: int | None = None) -> str:
        """``mean ± se`` (``-`` for no value), with ``(n=…)`` when fewer than ``seeds`` values went
        in.

        >>> Estimate.of([1.0, 2.0, 3.0]).text(), Estimate.of([4.0]).text(3), Estimate.of([]).text()
        ('2.00 ± 0.58', '4.00 (n=1)', '-')
        """
        if self.mean is None:
            return "-"
        out = f"{self.mean:.2f}" + (f" ± {self.se:.2f}" if self.se is not None else "")
        return out + (f" (n={self.n})" if seeds is not None and self.n < seeds else "")


@dataclass(frozen=True)
class StageRow:
    """One configuration's scores over its seeds.

    Attributes:
        key: Its task, agent, driver and model.
        seeds: The seeds of its completed cells.
        baseline: The base model's test score.
        stages: Each submitted model path's test score, in the order the cells first submitted them.
        improvement: Best valid test score minus baseline (0 for a cell without a valid submission).
    """

    key: dict[str, str]
    seeds: list[int]
    baseline: Estimate
    stages: dict[str, Estimate]
    improvement: Estimate

    @property
    def label(self) -> str:
        """``task/agent/driver/model``."""
        return "/".join(self.key[k] for k in STAGE_KEYS)

    @property
    def clears_two_se(self) -> bool | None:
        """Whether the mean improvement exceeds two standard errors (None for fewer than two
        seeds)."""
        mean, se = self.improvement.mean, self.improvement.se
        return None if mean is None or se is None else mean > 2 * se


def stage_columns(rows: list[StageRow]) -> list[str]:
    """The table's columns: configuration, seeds, baseline, each model path submitted,
    improvement, verdict."""
    paths = dict.fromkeys(path for row in rows for path in row.stages)
    return ["configuration", "seeds", "baseline", *paths, "improvement", "> 2 s.e."]


def stage_cells(row: StageRow, columns: list[str]) -> list[str]:
    """One row's texts for :func:`stage_columns` (``-`` where it has no value)."""
    verdict = {True: "yes", False: "no", None: "-"}[row.clears_two_se]
    paths = columns[3:-2]
    return [
        row.label,
        ",".join(map(str, row.seeds)),
        row.baseline.text(),
        *(row.stages[p].text(len(row.seeds)) if p in row.stages else "-" for p in paths),
        row.improvement.text(),
        verdict,
    ]


def submission_test_score(cell: CellRecord, submission: SubmissionRecord) -> float | None:
    """A submission's test-split score, None when it has none (not valid, or dev feedback not yet
    tested)."""
    if submission.status not in VALID_SUBMISSION_STATUSES:
        return None
    if submission.test_score is not None:
        return submission.test_score
    return submission.score if cell.feedback in (None, "test") else None


def stage_statistics(
    cells: list[CellRecord], submissions: dict[str, list[SubmissionRecord]]
) -> list[StageRow]:
    """The stage rows of the completed ``cells`` (``submissions``: each cell's, by cell id), by
    configuration."""
    groups: dict[tuple[str, ...], list[CellRecord]] = {}
    for cell in cells:
        if cell.status == "completed":
            groups.setdefault(tuple(str(getattr(cell, k)) for k in STAGE_KEYS), []).append(cell)
    rows = []
    for key, members in sorted(groups.items()):
        per_stage: dict[str, list[float]] = {}
        for cell in members:
            seen: dict[str, float] = {}
            for submission in submissions.get(cell.cell_id, []):
                score = submission_test_score(cell, submission)
                if score is not None:
                    seen[submission.model_path] = (
                        score  # a path submitted twice counts with its last score
                    )
            for path, score in seen.items():
                per_stage.setdefault(path, []).append(score)
        rows.append(
            StageRow(
                dict(zip(STAGE_KEYS, key, strict=True)),
                sorted(c.seed for c in members),
                Estimate.of([c.baseline for c in members if c.baseline is not None]),
                {path: Estimate.of(values) for path, values in per_stage.items()},
                Estimate.of([c.improvement if c.improvement is not None else 0.0 for c in members]),
            )
        )
    return rows


def _console_text(text: str) -> str:
    """Text for the sweep's terminal: the stage columns are the agent's model paths, so rich
    markup (``[link=...]``) is escaped and control characters (ANSI sequences) are written out."""
    return escape(visible_controls(text))


def stages_table(title: str, rows: list[StageRow]) -> Table:
    """The rows as a rich table: baseline, each stage, improvement (mean ± s.e.) and the 2-s.e.
    verdict."""
    columns = stage_columns(rows)
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(_console_text(column), no_wrap=column != "configuration", overflow="fold")
    for row in rows:
        table.add_row(*(_console_text(cell) for cell in stage_cells(row, columns)))
    return table


def load_stage_rows(sweep_dir: Path) -> list[StageRow]:
    """The stage rows of a sweep folder's record store."""
    from autorl.report.sources import open_store

    store = open_store(sweep_dir)
    try:
        cells = store.list_cells()
        return stage_statistics(
            cells, {c.cell_id: store.list_submissions(c.cell_id) for c in cells}
        )
    finally:
        store.close()
