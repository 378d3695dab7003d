"""Derived views of the record store: ``results.csv`` and a cell's submission summary.

Text in the records may come from the agent (model paths, error messages quoting its output) or
from the config; every view of it must show it as inert text (docs/threat-model.md). This module
holds the medium-neutral part, :func:`visible_controls`, which the report and the W&B rows build
on, and the CSV rule, :func:`csv_cell`.
"""

from __future__ import annotations

import csv
import json
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autorl.records.types import (
    RESULTS_COLUMNS,
    VALID_SUBMISSION_STATUSES,
    CellRecord,
    SubmissionRecord,
)

if TYPE_CHECKING:
    from autorl.records.store import RecordStore

# C0 and C1 control characters, DEL, and the invisible characters that reorder or hide text
# (bidi embeddings, overrides and isolates, zero-width characters, line and paragraph separators,
# the byte order mark): a terminal, spreadsheet or browser would act on them, not show them.
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
# OWASP's CSV-injection rule: a cell starting with one of these is run as a formula by spreadsheets.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
JUDGE_SANDBOX_COLUMN = "judge_sandbox"
# results.csv: the cell record's columns, then the ones derived from its submissions.
CSV_COLUMNS: tuple[str, ...] = (*RESULTS_COLUMNS, JUDGE_SANDBOX_COLUMN)


def visible_controls(text: str, keep: str = "") -> str:
    """``text`` with every control or invisible formatting character written out as an escape.

    Args:
        text: Any text, possibly the agent's.
        keep: Characters to leave as they are (e.g. ``"\\n\\t"`` inside a code block).

    Returns:
        The text, each such character replaced by ``\\xNN`` or ``\\uNNNN`` (the literal
        backslash sequence), so that it is seen rather than obeyed.

    >>> visible_controls("a\\x1b[31mb\\u202ec\\r\\n")
    'a\\\\x1b[31mb\\\\u202ec\\\\r\\\\n'
    >>> visible_controls("x\\ny", keep="\\n")
    'x\\ny'
    """

    def escape(match: re.Match[str]) -> str:
        char = match.group(0)
        if char in keep:
            return char
        named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char)
        if named:
            return named
        code = ord(char)
        return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"

    return _CONTROLS.sub(escape, text)


def csv_cell(value: Any) -> Any:
    """One ``results.csv`` cell: numbers stay numbers, text is made inert for spreadsheets.

    Text gets its control characters written out (:func:`visible_controls`, newlines included,
    so one cell is one line) and, when it would start a formula (``=``, ``+``, ``-``, ``@``, TAB,
    CR) and is not a number, a leading ``'``. Numbers (also a negative improvement) are never
    prefixed; floats are rounded to 4 decimals.

    >>> csv_cell(-3.5), csv_cell("-3.5"), csv_cell("=HYPERLINK(1)"), csv_cell("-1+1")
    (-3.5, '-3.5', "'=HYPERLINK(1)", "'-1+1")
    >>> csv_cell(None), csv_cell("a\\r\\nb")
    ('', 'a\\\\r\\\\nb')
    """
    if value is None:
        return ""
    if isinstance(value, float):
        return round(value, 4)
    if not isinstance(value, str):
        return value
    text = visible_controls(value)
    if value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        text = "'" + text
    return text


def judge_sandbox(subs: list[SubmissionRecord]) -> str | None:
    """How the task's judge ran the submissions' code (the evaluator's ``sandbox_mode`` detail).

    Every mode seen, comma-separated in order (graders on different nodes may differ); None for a
    task without a judge sandbox or a cell with no scored submission.
    """
    modes: list[str] = []
    for sub in subs:
        try:
            details = json.loads(sub.details_json or "{}")
        except ValueError:
            continue
        mode = details.get("sandbox_mode") if isinstance(details, dict) else None
        if isinstance(mode, str) and mode not in modes:
            modes.append(mode)
    return ",".join(modes) or None


def write_results_csv(store: RecordStore, sweep_id: str, path: Path) -> int:
    """(Re)write a sweep's ``results.csv`` from the store, atomically.

    The file is written to a temporary file next to it and moved into place, so a reader never
    sees a partial file and a rewrite never duplicates rows.

    Args:
        store: The record store.
        sweep_id: The sweep whose cells to write.
        path: Where to write; its parent directory is created if missing.

    Returns:
        The number of rows (cells) written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cells = store.list_cells(sweep_id)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(CSV_COLUMNS)
            for cell in cells:
                derived = judge_sandbox(store.list_submissions(cell.cell_id))
                row = [*(getattr(cell, c) for c in RESULTS_COLUMNS), derived]
                writer.writerow([csv_cell(v) for v in row])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return len(cells)


def allows_substitution(cell: CellRecord) -> bool:
    """Whether the cell ran with ``integrity.allow_substitution=true`` (flagged submissions count).

    Cells from before the integrity checks have no such key: there nothing was flagged anyway.
    """
    integrity = json.loads(cell.config_json or "{}").get("integrity") or {}
    return bool(integrity.get("allow_substitution", False))


def feedback_split(cell: CellRecord) -> str:
    """The split the cell's agent got its scores from (``grading.feedback``): ``test`` or ``dev``.

    Cells from before the setting existed ran with test feedback.
    """
    if cell.feedback:
        return cell.feedback
    grading = json.loads(cell.config_json or "{}").get("grading") or {}
    return str(grading.get("feedback") or "test")


def summarize_cell(cell: CellRecord, subs: list[SubmissionRecord]) -> dict[str, Any]:
    """:func:`summarize_submissions` with the cell's own baseline, ``allow_substitution`` and
    feedback split."""
    return summarize_submissions(
        subs, cell.baseline, allow_flagged=allows_substitution(cell), feedback=feedback_split(cell)
    )


def split_test_score(sub: SubmissionRecord, feedback: str = "test") -> float | None:
    """A submission's test score: its ``test_score``; with test feedback its ``score`` stands in
    when that is unset (the feedback split is the test split).
    """
    if sub.test_score is not None or feedback != "test":
        return sub.test_score
    return sub.score


def summarize_submissions(
    subs: list[SubmissionRecord],
    baseline: float | None,
    *,
    allow_flagged: bool = False,
    feedback: str = "test",
) -> dict[str, Any]:
    """Summarise a cell's submissions by the rule of docs/design.md#the-grading-api.

    A submission is valid when its status is one of :data:`VALID_SUBMISSION_STATUSES` and it has
    a (feedback) score. It counts towards the best when it is valid and unflagged (a flagged one,
    e.g. ``model_mismatch``, counts only with ``allow_flagged``, i.e.
    ``integrity.allow_substitution``). The best is the counting submission with the highest feedback
    score (``score``; the first one on ties); ``best_score`` is its *test* score
    (:func:`split_test_score`), so with dev feedback it stays None until the cell's submissions have
    been scored on the test split.

    Args:
        subs: The cell's submissions (of its final attempt), in submission order.
        baseline: The cell's baseline score (the base model on the test split), if known.
        allow_flagged: Let flagged submissions count.
        feedback: ``grading.feedback``: ``test`` or ``dev``.

    Returns:
        ``{"best_score", "improvement", "best_feedback_score", "best_on_test", "submissions",
        "valid_submissions", "flagged_submissions", "weight_distance", "best_submission_id"}``
        (``weight_distance``: the best's; ``best_on_test``: the highest test score of any counting
        submission); scores, ``improvement`` and ``best_submission_id`` are None when no
        submission counts, and ``improvement`` also when there is no baseline or test score.
        ``improvement`` is rounded to 6 decimals.
    """
    valid = [s for s in subs if s.status in VALID_SUBMISSION_STATUSES and s.score is not None]
    flagged = [s for s in subs if s.flags]
    counting = [s for s in valid if allow_flagged or not s.flags]
    best: SubmissionRecord | None = None
    for sub in counting:
        # Strictly greater, so the earliest of equal scores stays best.
        if best is None or (
            sub.score is not None and best.score is not None and sub.score > best.score
        ):
            best = sub
    best_score = split_test_score(best, feedback) if best is not None else None
    tests = [t for t in (split_test_score(s, feedback) for s in counting) if t is not None]
    improvement = (
        round(best_score - baseline, 6) if best_score is not None and baseline is not None else None
    )
    return {
        "best_score": best_score,
        "improvement": improvement,
        "best_feedback_score": best.score if best is not None else None,
        "best_on_test": max(tests) if tests else None,
        "submissions": len(subs),
        "valid_submissions": len(valid),
        "flagged_submissions": len(flagged),
        "weight_distance": best.weight_distance if best is not None else None,
        "best_submission_id": best.submission_id if best is not None else None,
    }
