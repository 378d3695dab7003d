"""Per-cell process metrics (docs/design.md#records-and-the-report), computed from the record
store and ``run_meta.json``.

Definitions follow the reference implementation's ``core/metrics.py``, with its known weaknesses
fixed:

- A submission is **valid** when it was scored: its status is one of
  :data:`~autorl.records.types.VALID_SUBMISSION_STATUSES` (``scored``, ``duplicate``,
  ``copy_of_base``) and it has a score. The reference counted ``score > 0`` as valid, which calls a
  real score of 0 a failure and an error's placeholder 0.0 a success.
- ``copy_model_count`` counts submissions the grader flagged ``copy_of_base`` (weights equal to
  the base model's); the reference compared paths and so never fired.
- The **best** follows docs/design.md#commands: a valid submission flagged by the integrity checks
  (``model_mismatch``) counts only when the cell ran with ``integrity.allow_substitution``.
- Times are epoch seconds (no naive local timestamps) measured from ``run_meta.start_time``, the
  moment the agent process started (after the baseline).

Standard library only, so the report CLI stays light.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autorl.records.results import allows_substitution, feedback_split, split_test_score
from autorl.records.types import VALID_SUBMISSION_STATUSES, CellRecord, SubmissionRecord

METRICS_VERSION = 1
# The metrics a run report and the sweep report's table show for each cell, in their order.
REPORTED_METRICS = (
    "valid_submission_rate",
    "first_valid_idx",
    "time_to_first_improvement",
    "time_to_best",
    "monotonic_ratio",
    "copy_model_count",
    "time_used_ratio",
    "last_submit_gap",
    "tokens",
    "cost_usd",
)


def is_valid(sub: SubmissionRecord) -> bool:
    """Whether a submission produced a score (see the module docstring)."""
    return sub.status in VALID_SUBMISSION_STATUSES and sub.score is not None


@dataclass(frozen=True)
class RunTimes:
    """The cell's budget facts from ``run_meta.json`` (all optional: a cell may have died early).

    Attributes:
        start_time: When the agent process started (epoch seconds).
        end_time: When the cell finished the agent run.
        timeout_s: The agent's budget.
        last_submit_time: When the agent last submitted a model.
    """

    start_time: float | None
    end_time: float | None
    timeout_s: float | None
    last_submit_time: float | None

    @classmethod
    def from_run_meta(cls, meta: dict[str, Any] | None) -> RunTimes:
        """Read the fields of a parsed ``run_meta.json``; a missing file gives all None.

        >>> RunTimes.from_run_meta({"start_time": 10, "timeout_s": 100}).timeout_s
        100.0
        >>> RunTimes.from_run_meta(None).start_time is None
        True
        """
        meta = meta or {}

        def number(key: str) -> float | None:
            value = meta.get(key)
            return float(value) if isinstance(value, int | float) else None

        return cls(
            number("start_time"),
            number("end_time"),
            number("timeout_s"),
            number("last_submit_time"),
        )


def _since(start: float | None, t: float | None) -> float | None:
    if start is None or t is None:
        return None
    return round(t - start, 3)


def counts(sub: SubmissionRecord, allow_flagged: bool = False) -> bool:
    """Whether a submission may be the cell's best: valid, and unflagged unless
    ``allow_flagged``."""
    return is_valid(sub) and (allow_flagged or not sub.flags)


def best_index(subs: list[SubmissionRecord], allow_flagged: bool = False) -> int | None:
    """Position (0-based) of the best counting submission (:func:`counts`); the earliest wins a tie.

    >>> s = [SubmissionRecord("c", i + 1, "p", st, score=x) for i, (st, x) in enumerate(
    ...     [("scored", 1.0), ("invalid", None), ("scored", 3.0), ("duplicate", 3.0)])]
    >>> best_index(s)
    2
    >>> best_index([]) is None
    True
    """
    best: int | None = None
    for i, sub in enumerate(subs):
        if counts(sub, allow_flagged) and (
            best is None or float(sub.score) > float(subs[best].score)  # type: ignore[arg-type]
        ):
            best = i
    return best


def best_so_far(subs: list[SubmissionRecord], allow_flagged: bool = False) -> list[float | None]:
    """Running maximum of the counting scores (:func:`counts`), one entry per submission (None
    before the first).

    >>> s = [SubmissionRecord("c", i + 1, "p", st, score=x) for i, (st, x) in enumerate(
    ...     [("invalid", None), ("scored", 2.0), ("scored", 1.0), ("scored", 5.0)])]
    >>> best_so_far(s)
    [None, 2.0, 2.0, 5.0]
    """
    out: list[float | None] = []
    best: float | None = None
    for sub in subs:
        if counts(sub, allow_flagged):
            score = float(sub.score)  # type: ignore[arg-type]
            best = score if best is None else max(best, score)
        out.append(best)
    return out


def monotonic_ratio(scores: list[float]) -> float | None:
    """Fraction of consecutive pairs that strictly increase; None with fewer than two scores.

    >>> monotonic_ratio([1.0, 2.0, 2.0, 3.0])
    0.667
    >>> monotonic_ratio([5.0]) is None
    True
    """
    if len(scores) < 2:
        return None
    ups = sum(1 for a, b in zip(scores, scores[1:], strict=False) if b > a)
    return round(ups / (len(scores) - 1), 3)


def tokens_at(calls: list[tuple[float, int]], t: float) -> int:
    """Driver tokens (in + out) of the calls that started at or before ``t``.

    >>> tokens_at([(1.0, 10), (5.0, 7)], 4.0), tokens_at([(1.0, 10), (5.0, 7)], 5.0)
    (10, 17)
    """
    return sum(n for started, n in calls if started <= t)


def compute_cell_metrics(
    cell: CellRecord,
    subs: list[SubmissionRecord],
    times: RunTimes,
    calls: list[tuple[float, int]] | None = None,
) -> dict[str, Any]:
    """Every per-cell metric of docs/design.md#records-and-the-report.

    Args:
        cell: The cell's record (baseline, tokens, cost, exit class, ...).
        subs: The cell's submissions in submission order.
        times: The cell's ``run_meta.json`` facts.
        calls: ``(started_at, tokens in + out)`` of each driver call the gateway recorded, if any;
            they give the driver tokens spent before each submission.

    Returns:
        A JSON-ready dict; a metric that is undefined for this cell (no submission, no valid
        submission, no baseline, no ``run_meta``) is None, never a made-up 0.
    """
    baseline = cell.baseline
    valid = [s for s in subs if is_valid(s)]
    valid_scores = [float(s.score) for s in valid]  # type: ignore[arg-type]
    first_valid = next((i for i, s in enumerate(subs) if is_valid(s)), None)
    first_improvement = None
    if baseline is not None:
        first_improvement = next((s for s in valid if float(s.score) > baseline), None)  # type: ignore[arg-type]
    allow_flagged = allows_substitution(cell)
    best_i = best_index(subs, allow_flagged)
    best = subs[best_i] if best_i is not None else None
    # Selected on the feedback score, reported with its test score (docs/design.md#commands; the
    # same with test feedback).
    best_test = split_test_score(best, feedback_split(cell)) if best is not None else None
    best_score = float(best_test) if best_test is not None else None
    last_submit = times.last_submit_time
    if last_submit is None and subs:
        last_submit = max(s.submitted_at for s in subs)
    end = times.end_time
    used = None
    if times.start_time is not None and end is not None and times.timeout_s:
        used = round((end - times.start_time) / times.timeout_s, 4)
    return {
        "metrics_version": METRICS_VERSION,
        "cell_id": cell.cell_id,
        "status": cell.status,
        "baseline": baseline,
        "best_score": best_score,
        "improvement": round(best_score - baseline, 6)
        if best_score is not None and baseline is not None
        else None,
        "best_submission_id": best.submission_id if best is not None else None,
        "submissions": len(subs),
        "valid_submissions": len(valid),
        "valid_submission_rate": round(len(valid) / len(subs), 4) if subs else None,
        "first_valid_idx": first_valid + 1 if first_valid is not None else None,
        "first_valid_delay": _since(times.start_time, subs[first_valid].submitted_at)
        if first_valid is not None
        else None,
        "time_to_first_improvement": _since(times.start_time, first_improvement.submitted_at)
        if first_improvement
        else None,
        "time_to_best": _since(times.start_time, best.submitted_at) if best is not None else None,
        "monotonic_ratio": monotonic_ratio(valid_scores),
        "copy_model_count": sum(1 for s in subs if s.status == "copy_of_base"),
        "time_used_ratio": used,
        "last_submit_gap": round(end - last_submit, 3)
        if end is not None and last_submit is not None
        else None,
        "score_trajectory": [float(s.score) if is_valid(s) else None for s in subs],  # type: ignore[arg-type]
        "status_trajectory": [s.status for s in subs],
        "best_so_far": best_so_far(subs, allow_flagged),
        "flagged_submissions": sum(1 for s in subs if s.flags),
        "weight_distance": best.weight_distance if best is not None else None,
        "contamination": cell.contamination,
        "integrity_flags": cell.integrity_flags,
        "submit_times": [_since(times.start_time, s.submitted_at) for s in subs],
        "tokens_at_submit": [tokens_at(calls, s.submitted_at) for s in subs] if calls else None,
        "driver_calls": len(calls) if calls else 0,
        "tokens_in": cell.tokens_in,
        "tokens_out": cell.tokens_out,
        "tokens": cell.tokens_in + cell.tokens_out,
        "cost_usd": cell.cost_usd,
        "exit_class": cell.exit_class,
        "exit_code": cell.exit_code,
        "duration_s": cell.duration_s,
        "working_time_s": cell.working_time_s,
        "start_time": times.start_time,
        "end_time": end,
        "timeout_s": times.timeout_s,
    }
