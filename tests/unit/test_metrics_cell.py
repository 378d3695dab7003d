"""Per-cell metrics (docs/design.md#records-and-the-report) and sweep analyses on hand-made records,
edge cases included."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from autorl.records.types import CellRecord, SubmissionRecord
from autorl.report.aggregate import (
    CellRow,
    expected_max_of_k,
    heatmap,
    mean_se,
    seed_statistics,
    step_series,
)
from autorl.report.cell_metrics import RunTimes, compute_cell_metrics

T0 = 1_000.0
TIMES = RunTimes(start_time=T0, end_time=T0 + 300, timeout_s=600, last_submit_time=T0 + 250)


def cell(baseline: float | None = 10.0, **kw: object) -> CellRecord:
    fields = (
        dict(
            sweep_id="s",
            cell_id="c",
            agent="a",
            driver="d",
            task="t",
            task_version=1,
            model="m",
            seed=0,
            budget_s=600,
            status="completed",
            baseline=baseline,
            tokens_in=100,
            tokens_out=20,
            cost_usd=0.5,
            exit_class="exited",
            exit_code=0,
        )
        | kw
    )
    return CellRecord(**fields)  # type: ignore[arg-type]


def subs(*items: tuple[str, float | None, float]) -> list[SubmissionRecord]:
    """(status, score, seconds after start) per submission."""
    return [
        SubmissionRecord("c", i + 1, f"output/v{i + 1}", status, score=score, submitted_at=T0 + t)
        for i, (status, score, t) in enumerate(items)
    ]


def test_no_submissions_gives_undefined_metrics_not_zeros() -> None:
    m = compute_cell_metrics(cell(), [], TIMES)
    assert m["submissions"] == 0 and m["valid_submission_rate"] is None
    for key in (
        "first_valid_idx",
        "first_valid_delay",
        "time_to_first_improvement",
        "time_to_best",
        "monotonic_ratio",
        "best_score",
        "improvement",
        "best_submission_id",
    ):
        assert m[key] is None, key
    assert m["copy_model_count"] == 0 and m["score_trajectory"] == []
    assert m["time_used_ratio"] == 0.5
    assert m["last_submit_gap"] == 50.0  # run_meta's last_submit_time is the source of truth
    assert (m["tokens"], m["cost_usd"], m["exit_class"]) == (120, 0.5, "exited")


def test_all_invalid_submissions() -> None:
    m = compute_cell_metrics(cell(), subs(("invalid", None, 10), ("invalid", None, 20)), TIMES)
    assert m["valid_submission_rate"] == 0.0 and m["valid_submissions"] == 0
    assert m["first_valid_idx"] is None and m["time_to_best"] is None and m["improvement"] is None
    assert m["score_trajectory"] == [None, None] and m["best_so_far"] == [None, None]


def test_valid_means_scored_not_score_above_zero() -> None:
    # A real score of 0 is valid (the reference called it invalid); an error is not.
    m = compute_cell_metrics(
        cell(baseline=0.0),
        subs(("scored", 0.0, 5), ("invalid", None, 6), ("duplicate", 0.0, 7)),
        TIMES,
    )
    assert m["valid_submissions"] == 2 and m["valid_submission_rate"] == round(2 / 3, 4)
    assert m["first_valid_idx"] == 1 and m["first_valid_delay"] == 5.0
    assert m["time_to_first_improvement"] is None  # 0 is not above the baseline 0


def test_ties_take_the_earliest_best_and_count_no_increase() -> None:
    m = compute_cell_metrics(
        cell(), subs(("scored", 12.0, 10), ("scored", 15.0, 20), ("scored", 15.0, 30)), TIMES
    )
    assert m["best_submission_id"] == 2 and m["time_to_best"] == 20.0
    assert m["monotonic_ratio"] == 0.5  # 12→15 up, 15→15 not
    assert m["time_to_first_improvement"] == 10.0 and m["improvement"] == 5.0


def test_single_submission() -> None:
    m = compute_cell_metrics(cell(), subs(("scored", 9.0, 42)), TIMES)
    assert m["monotonic_ratio"] is None  # needs two valid scores
    assert (m["first_valid_idx"], m["best_score"], m["improvement"], m["time_to_best"]) == (
        1,
        9.0,
        -1.0,
        42.0,
    )
    assert m["time_to_first_improvement"] is None and m["valid_submission_rate"] == 1.0


def test_copies_are_counted_and_valid() -> None:
    m = compute_cell_metrics(
        cell(),
        subs(("copy_of_base", 10.0, 5), ("scored", 11.0, 9), ("copy_of_base", 10.0, 12)),
        TIMES,
    )
    assert m["copy_model_count"] == 2 and m["valid_submissions"] == 3
    assert m["status_trajectory"] == ["copy_of_base", "scored", "copy_of_base"]
    assert m["best_so_far"] == [10.0, 11.0, 11.0] and m["submit_times"] == [5.0, 9.0, 12.0]


def test_missing_run_meta_and_baseline() -> None:
    m = compute_cell_metrics(
        cell(baseline=None), subs(("scored", 3.0, 10)), RunTimes.from_run_meta(None)
    )
    assert m["improvement"] is None and m["time_to_best"] is None and m["time_used_ratio"] is None
    assert m["last_submit_gap"] is None and m["best_score"] == 3.0


def test_expected_max_of_k_matches_brute_force() -> None:
    values = [3.0, -1.0, 7.5, 0.0, 2.0]
    for k in range(1, len(values) + 1):
        subsets = list(itertools.combinations(values, k))
        assert expected_max_of_k(values, k) == pytest.approx(
            sum(max(s) for s in subsets) / len(subsets), abs=1e-6
        )
    with pytest.raises(ValueError, match="between 1 and"):
        expected_max_of_k(values, 6)


def test_mean_se_matches_statistics() -> None:
    values = [1.0, 4.0, 4.5, 10.0]
    mean, se = mean_se(values)
    assert mean == pytest.approx(statistics.mean(values))
    assert se == pytest.approx(statistics.stdev(values) / math.sqrt(4), abs=1e-6)


def row(
    cell_id: str, seed: int, improvement: float | None, status: str = "completed", **key: str
) -> CellRow:
    k = {"task": "t", "agent": "a", "driver": "d", "model": "m", "mode": "free"} | key
    return CellRow(
        cell_id,
        k,
        seed,
        status,
        improvement,
        {"baseline": 1.0, "best_so_far": [None, 2.0, 4.0], "submit_times": [1.0, 2.0, 3.0]},
    )


def test_seed_statistics_skip_failed_and_count_no_valid_as_zero() -> None:
    rows = [
        row("x0", 0, 2.0),
        row("x1", 1, None),
        row("x2", 2, 4.0),
        row("x3", 3, 99.0, status="failed"),
    ]
    (s,) = seed_statistics(rows)
    assert (s["n"], s["no_valid"], s["seeds"]) == (3, 1, [0, 1, 2])
    assert s["mean"] == 2.0 and s["pass_at_k"][3] == 4.0 and s["pass_at_k"][1] == 2.0


def test_heatmap_and_step_series() -> None:
    rows = [
        row("a", 0, 1.0, agent="x", driver="p"),
        row("b", 0, 3.0, agent="x", driver="q"),
        row("c", 1, 5.0, agent="x", driver="q"),
    ]
    m = heatmap(rows, "agent", "driver")
    assert (m.rows, m.cols, m.values, m.counts) == (["x"], ["p", "q"], [[1.0, 4.0]], [[1, 2]])
    series = step_series(rows, lambda r, i: r.metrics["submit_times"][i])
    assert series["a"] == [(2.0, 1.0), (3.0, 3.0)]  # starts at the first valid submission


def test_driver_tokens_before_each_submission() -> None:
    calls = [(T0 + 1, 100), (T0 + 15, 50), (T0 + 40, 7)]
    m = compute_cell_metrics(
        cell(),
        subs(("scored", 11.0, 10), ("scored", 12.0, 20), ("invalid", None, 50)),
        TIMES,
        calls,
    )
    assert m["tokens_at_submit"] == [100, 150, 157] and m["driver_calls"] == 3
    assert (
        compute_cell_metrics(cell(), subs(("scored", 11.0, 10)), TIMES)["tokens_at_submit"] is None
    )
