"""The report's "Selection bias of test feedback" section (``grading.feedback``,
docs/design.md#commands).

With test feedback an agent (and the cell's selection rule) picks its best submission on the very
split that reports it, so the reported score is biased upwards. A cell run with dev feedback
selects on a dev split and has every submission scored on the test split after it ends, so both
numbers exist: the best test score of any counting submission (what selecting on test would have
reported) and the test score of the submission selected on dev (what the cell reports).
"""

from __future__ import annotations

import statistics
from typing import Any

from autorl.records.results import feedback_split
from autorl.report.html_page import Section, Table


def bias_rows(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per completed dev-feedback cell with both scores: ``best_on_test``,
    ``best_on_dev_test`` (the cell's ``best_score``) and ``bias`` (their difference, >= 0)."""
    rows = []
    for c in cells:
        cell = c["src"].cell
        if feedback_split(cell) != "dev" or cell.best_score is None or cell.best_on_test is None:
            continue
        rows.append(
            {
                "cell_id": cell.cell_id,
                "task": cell.task,
                "baseline": cell.baseline,
                "feedback_baseline": cell.feedback_baseline,
                "best_feedback_score": cell.best_feedback_score,
                "best_on_dev_test": cell.best_score,
                "best_on_test": cell.best_on_test,
                "bias": round(cell.best_on_test - cell.best_score, 6),
            }
        )
    return rows


def selection_bias_section(cells: list[dict[str, Any]]) -> Section:
    """The section: one row per dev-feedback cell with both scores, and the mean bias per task."""
    rows = bias_rows(cells)
    dev = sum(feedback_split(c["src"].cell) == "dev" for c in cells)
    table, means = None, ""
    if rows:
        columns = (
            "cell",
            "baseline (test)",
            "baseline (dev)",
            "best on dev: dev score",
            "test score of best on dev",
            "best on test",
            "bias",
        )
        table = Table(
            columns,
            [
                (
                    r["cell_id"],
                    r["baseline"],
                    r["feedback_baseline"],
                    r["best_feedback_score"],
                    r["best_on_dev_test"],
                    r["best_on_test"],
                    r["bias"],
                )
                for r in rows
            ],
        )
        tasks = sorted({r["task"] for r in rows})
        by_task = [(t, [r["bias"] for r in rows if r["task"] == t]) for t in tasks]
        means = "; ".join(
            f"{t}: {round(statistics.fmean(b), 4)} (n = {len(b)})" for t, b in by_task
        )
    return Section(
        "selection-bias",
        "Selection bias of test feedback",
        "selection_bias",
        {"table": table, "dev_cells": dev, "means": means},
    )
