"""Sweep-level analyses: seed statistics, pass@k, heatmaps and scaling series
(docs/design.md#records-and-the-report).

Only cells that reached ``completed`` are results; ``failed`` (infrastructure) and ``cancelled``
cells are shown in the results table but left out of every statistic. A completed cell without a
valid submission kept the base model, so its improvement counts as 0 in the statistics (and is
counted separately as ``no_valid``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

GROUP_KEYS = ("task", "agent", "driver", "model", "mode")


@dataclass(frozen=True)
class CellRow:
    """One cell as the sweep analyses see it.

    Attributes:
        cell_id: The cell.
        key: Its values of :data:`GROUP_KEYS` (task, agent, driver, model, mode).
        seed: Its seed.
        status: The cell status.
        improvement: Best valid score minus baseline, or None without a valid submission.
        metrics: The cell's ``metrics.json`` content.
    """

    cell_id: str
    key: dict[str, str]
    seed: int
    status: str
    improvement: float | None
    metrics: dict[str, Any]

    @property
    def result(self) -> float:
        """The improvement as a result: 0 when no valid submission (the base model is kept)."""
        return self.improvement if self.improvement is not None else 0.0


def completed(rows: Iterable[CellRow]) -> list[CellRow]:
    """The rows that are results (status ``completed``)."""
    return [r for r in rows if r.status == "completed"]


def mean_se(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and standard error of the mean (sample standard deviation / √n).

    >>> mean_se([1.0, 2.0, 3.0])
    (2.0, 0.57735)
    >>> mean_se([4.0])
    (4.0, None)
    >>> mean_se([])
    (None, None)
    """
    if not values:
        return None, None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return round(mean, 6), None
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return round(mean, 6), round(math.sqrt(var / len(values)), 6)


def expected_max_of_k(values: list[float], k: int) -> float:
    """Expected maximum of ``k`` values drawn without replacement from ``values`` (exact).

    With the values sorted ascending as x₁ ≤ … ≤ xₙ, the i-th smallest is the maximum of a
    k-subset in C(i-1, k-1) of the C(n, k) subsets, so E[max] = Σᵢ C(i-1, k-1) / C(n, k) · xᵢ.

    Raises:
        ValueError: unless 1 ≤ k ≤ len(values).

    >>> expected_max_of_k([0.0, 1.0, 2.0], 1)
    1.0
    >>> expected_max_of_k([0.0, 1.0, 2.0], 2)  # subsets {0,1},{0,2},{1,2}: (1 + 2 + 2) / 3
    1.666667
    >>> expected_max_of_k([0.0, 1.0, 2.0], 3)
    2.0
    """
    n = len(values)
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and the number of runs ({n}), got {k}")
    ordered = sorted(values)
    total = math.comb(n, k)
    return round(
        sum(math.comb(i - 1, k - 1) * x for i, x in enumerate(ordered, start=1)) / total, 6
    )


def group_rows(
    rows: Iterable[CellRow], keys: tuple[str, ...] = GROUP_KEYS
) -> dict[tuple[str, ...], list[CellRow]]:
    """Rows grouped by their values of ``keys`` (sorted by key)."""
    groups: dict[tuple[str, ...], list[CellRow]] = defaultdict(list)
    for row in rows:
        groups[tuple(row.key[k] for k in keys)].append(row)
    return dict(sorted(groups.items()))


def seed_statistics(rows: list[CellRow]) -> list[dict[str, Any]]:
    """Mean ± standard error of the improvement over seeds, per (task, agent, driver, model, mode).

    Returns:
        One dict per group: the group keys, ``n``, ``no_valid``, ``mean``, ``se``, ``min``, ``max``,
        ``seeds`` and ``pass_at_k`` (``{k: expected best improvement}`` for k = 1..n).
    """
    out = []
    for key, members in group_rows(completed(rows)).items():
        values = [r.result for r in members]
        mean, se = mean_se(values)
        out.append(
            dict(zip(GROUP_KEYS, key, strict=True))
            | {
                "n": len(values),
                "no_valid": sum(1 for r in members if r.improvement is None),
                "mean": mean,
                "se": se,
                "min": min(values),
                "max": max(values),
                "seeds": sorted(r.seed for r in members),
                "pass_at_k": {k: expected_max_of_k(values, k) for k in range(1, len(values) + 1)},
            }
        )
    return out


@dataclass(frozen=True)
class Matrix:
    """A heatmap: mean improvement per (row, column), None where no completed cell exists."""

    row_name: str
    col_name: str
    rows: list[str]
    cols: list[str]
    values: list[list[float | None]]
    counts: list[list[int]]


def heatmap(rows: list[CellRow], row_key: str, col_key: str) -> Matrix:
    """Mean improvement of the completed cells for each ``row_key`` × ``col_key`` pair.

    >>> r = [CellRow("a", {"agent": "x", "driver": "d"}, 0, "completed", 1.0, {}),
    ...      CellRow("b", {"agent": "x", "driver": "d"}, 1, "completed", None, {})]
    >>> heatmap(r, "agent", "driver").values
    [[0.5]]
    """
    done = completed(rows)
    row_names = sorted({r.key[row_key] for r in done})
    col_names = sorted({r.key[col_key] for r in done})
    values: list[list[float | None]] = []
    counts: list[list[int]] = []
    for rn in row_names:
        values.append([])
        counts.append([])
        for cn in col_names:
            members = [r.result for r in done if r.key[row_key] == rn and r.key[col_key] == cn]
            values[-1].append(mean_se(members)[0])
            counts[-1].append(len(members))
    return Matrix(row_key, col_key, row_names, col_names, values, counts)


def step_series(
    rows: list[CellRow], x_of: Callable[[CellRow, int], float | None]
) -> dict[str, list[tuple[float, float]]]:
    """Best-so-far improvement of each completed cell against an x axis chosen by ``x_of``.

    Args:
        rows: The cells.
        x_of: ``(row, submission position) -> x`` (None skips the point).

    Returns:
        ``{cell_id: [(x, best-so-far improvement), ...]}``, starting at the cell's first valid
        submission; cells without a baseline are left out.
    """
    out: dict[str, list[tuple[float, float]]] = {}
    for row in completed(rows):
        baseline = row.metrics.get("baseline")
        if baseline is None:
            continue
        points = []
        for i, best in enumerate(row.metrics.get("best_so_far") or []):
            x = x_of(row, i)
            if best is not None and x is not None:
                points.append((float(x), round(float(best) - float(baseline), 6)))
        out[row.cell_id] = points
    return out
