"""The record store: idempotent upserts, persistence, results.csv and submission summaries."""

from __future__ import annotations

import csv
import dataclasses
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from autorl.records.migrations import SCHEMA_VERSION
from autorl.records.results import CSV_COLUMNS, summarize_submissions, write_results_csv
from autorl.records.store import RecordStore
from autorl.records.types import (
    CELL_STATUSES,
    FINAL_STATUSES,
    RESULTS_COLUMNS,
    CellRecord,
    CodeRevision,
    SubmissionRecord,
)
from tests.helpers.view_server import cell


def _cell(cell_id: str = "c1", **overrides: object) -> CellRecord:
    return cell(cell_id, **overrides)  # the viewer tests' builder: sweep s1, gsm8k × scripted


def _sub(submission_id: int, status: str = "scored", score: float | None = 0.5, **kw: object):
    return SubmissionRecord(
        cell_id=str(kw.pop("cell_id", "c1")),
        submission_id=submission_id,
        model_path=f"/ws/output/m{submission_id}",
        status=status,
        score=score,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def store(tmp_path: Path):
    s = RecordStore(tmp_path / "records.sqlite")
    yield s
    s.close()


def _count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def _read_csv(path: Path) -> list[list[str]]:
    with path.open(newline="") as f:
        return list(csv.reader(f))


def test_constants() -> None:
    assert CELL_STATUSES == ("pending", "running", "completed", "failed", "cancelled")
    assert FINAL_STATUSES == ("completed", "failed", "cancelled")
    assert RESULTS_COLUMNS[:19] == (
        "sweep_id", "cell_id", "agent", "driver", "task", "task_version", "model", "seed",
        "budget_s", "status", "baseline", "best_score", "improvement", "submissions",
        "valid_submissions", "duration_s", "tokens_in", "tokens_out", "cost_usd",
    )  # fmt: skip
    assert RESULTS_COLUMNS[19:] == (
        "task_source",
        "exit_class",
        "sandbox",
        "limit_hit",
        "resumes",
        "flagged_submissions",
        "weight_distance",
        "contamination",
        "integrity_flags",
        "working_time_s",
        "error",
        "feedback",
        "feedback_baseline",
        "best_feedback_score",
        "best_on_test",
        "node_resumes",
        "lost_s",
    )


def test_wal_mode_and_schema_version(store: RecordStore) -> None:
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    RecordStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(Exception, match="schema version 99"):
        RecordStore(path)


def test_cell_round_trip_all_fields(store: RecordStore) -> None:
    rec = _cell(
        status="completed", baseline=0.25, best_score=0.5, improvement=0.25, submissions=3,
        valid_submissions=2, duration_s=12.5, tokens_in=10, tokens_out=20, cost_usd=0.01,
        exit_class="exited", exit_code=0, working_time_s=11.0, task_source="fixture",
        error=None, attempts=1, config_json='{"a": 1}', started_at=1.0, finished_at=2.0,
    )  # fmt: skip
    store.upsert_cell(rec)
    assert store.get_cell("c1") == rec
    assert store.get_cell("missing") is None


def test_upsert_cell_twice_is_one_row(store: RecordStore) -> None:
    store.upsert_cell(_cell())
    store.upsert_cell(_cell())
    store.upsert_cell(_cell(status="running", attempts=1))
    assert _count(store.path, "cells") == 1
    got = store.get_cell("c1")
    assert got is not None and got.status == "running" and got.attempts == 1


def test_list_cells_order_and_sweep_filter(store: RecordStore) -> None:
    store.upsert_cell(_cell("c3", task="b", seed=1))
    store.upsert_cell(_cell("c2", task="b", seed=0))
    store.upsert_cell(_cell("c1", task="a", agent="z"))
    store.upsert_cell(_cell("x1", sweep_id="other", task="0"))
    assert [c.cell_id for c in store.list_cells("s1")] == ["c1", "c2", "c3"]
    assert [c.cell_id for c in store.list_cells()] == ["x1", "c1", "c2", "c3"]
    assert store.list_cells("nope") == []


def test_set_cell_status_updates_only_given_fields(store: RecordStore) -> None:
    store.upsert_cell(_cell(tokens_in=5, config_json='{"k": 2}'))
    store.set_cell_status("c1", "running", attempts=1, started_at=100.0)
    store.set_cell_status("c1", "completed", best_score=0.7, finished_at=200.0)
    got = store.get_cell("c1")
    assert got is not None
    assert (got.status, got.attempts, got.started_at) == ("completed", 1, 100.0)
    assert (got.best_score, got.finished_at) == (0.7, 200.0)
    assert (got.tokens_in, got.config_json) == (5, '{"k": 2}')


def test_statuses_validated(store: RecordStore) -> None:
    store.upsert_cell(_cell())
    with pytest.raises(ValueError, match="pending, running, completed, failed, cancelled"):
        store.set_cell_status("c1", "done")
    with pytest.raises(ValueError, match="valid statuses"):
        _cell(status="bogus")
    with pytest.raises(ValueError, match="queued, scoring, scored, invalid, duplicate"):
        _sub(1, status="great")
    with pytest.raises(ValueError, match="nonsense"):
        store.set_cell_status("c1", "running", nonsense=1)
    with pytest.raises(KeyError, match="nope"):
        store.set_cell_status("nope", "running")
    got = store.get_cell("c1")
    assert got is not None and got.status == "pending"


def test_records_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        _cell().status = "running"  # type: ignore[misc]


def test_submissions_upsert_order_and_next_id(store: RecordStore) -> None:
    assert store.next_submission_id("c1") == 1
    store.upsert_submission(_sub(2, status="queued", score=None))
    store.upsert_submission(_sub(1))
    assert store.next_submission_id("c1") == 3
    assert store.next_submission_id("other") == 1
    # Replays and later states of the same submission replace, never add.
    store.upsert_submission(_sub(2, status="queued", score=None))
    final = _sub(2, status="scored", score=0.9, weights_hash="h", details_json='{"n": 3}',
                 submitted_at=5.0, started_at=6.0, finished_at=7.0, queue_wait_s=1.0,
                 code_revision="abc", baseline_score=0.4, improvement=0.5)  # fmt: skip
    store.upsert_submission(final)
    store.upsert_submission(final)
    subs = store.list_submissions("c1")
    assert [s.submission_id for s in subs] == [1, 2]
    # Filed under the cell's current attempt.
    assert subs[1] == dataclasses.replace(final, attempt=1)
    assert _count(store.path, "submissions") == 2
    assert store.list_submissions("other") == []


def test_code_revisions_idempotent(store: RecordStore) -> None:
    r1 = CodeRevision("c1", "aaa", 1.0, "submission", "+x", 1)
    r2 = CodeRevision("c1", "bbb", 2.0, "periodic", "+y", 2)
    store.add_code_revision(r2)
    store.add_code_revision(r1)
    store.add_code_revision(r1)
    assert store.list_code_revisions("c1") == [dataclasses.replace(r, attempt=1) for r in (r1, r2)]
    assert store.list_code_revisions("c2") == []
    assert _count(store.path, "code_revisions") == 2


def test_baseline_and_cache(store: RecordStore) -> None:
    assert store.get_baseline("gsm8k|1|tiny") is None
    store.put_baseline("gsm8k|1|tiny", 0.125, "{}")
    store.put_baseline("gsm8k|1|tiny", 0.125, "{}")
    assert store.get_baseline("gsm8k|1|tiny") == 0.125
    assert store.get_cached_score("k|h") is None
    store.put_cached_score("k|h", 0.5, '{"n": 1}')
    assert store.get_cached_score("k|h") == (0.5, '{"n": 1}')
    store.put_cached_score("k|h", 0.6, '{"n": 2}')
    assert store.get_cached_score("k|h") == (0.6, '{"n": 2}')
    assert _count(store.path, "baselines") == 1
    assert _count(store.path, "score_cache") == 1


def test_reopen_persists(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "records.sqlite"
    with RecordStore(path) as s:
        s.upsert_cell(_cell())
        s.upsert_submission(_sub(1))
        s.put_baseline("b", 0.1, "{}")
        s.put_cached_score("c", 0.2, "{}")
        s.add_code_revision(CodeRevision("c1", "r", 1.0, "submission", "", 0))
    with RecordStore(path) as s:
        assert s.get_cell("c1") == _cell()
        assert s.list_submissions("c1") == [_sub(1, attempt=1)]
        assert s.get_baseline("b") == 0.1
        assert s.get_cached_score("c") == (0.2, "{}")
        assert len(s.list_code_revisions("c1")) == 1
        assert s.next_submission_id("c1") == 2


def test_reader_sees_writer_data_concurrently(tmp_path: Path) -> None:
    path = tmp_path / "records.sqlite"
    with RecordStore(path) as writer, RecordStore(path) as reader:
        writer.upsert_cell(_cell())
        assert reader.get_cell("c1") == _cell()


def test_results_csv_columns_rows_and_rewrite(store: RecordStore, tmp_path: Path) -> None:
    store.upsert_cell(_cell("c2", seed=1))
    store.upsert_cell(_cell("c1", seed=0, baseline=0.123456789, cost_usd=0.00001, error="x,y"))
    store.upsert_cell(_cell("x", sweep_id="other"))
    out = tmp_path / "out" / "results.csv"
    assert write_results_csv(store, "s1", out) == 2
    rows = _read_csv(out)
    assert tuple(rows[0]) == CSV_COLUMNS == (*RESULTS_COLUMNS, "judge_sandbox")
    assert len(rows) == 3
    first = dict(zip(rows[0], rows[1], strict=True))
    assert first["cell_id"] == "c1"
    assert first["baseline"] == "0.1235"
    assert first["cost_usd"] == "0.0"
    assert first["best_score"] == "" and first["exit_class"] == ""
    assert first["error"] == "x,y"
    assert (first["task_version"], first["seed"], first["budget_s"]) == ("1", "0", "600.0")

    store.set_cell_status("c1", "completed", best_score=0.5, improvement=0.3765)
    store.upsert_cell(_cell("c3", seed=2))
    assert write_results_csv(store, "s1", out) == 3
    rows = _read_csv(out)
    assert len(rows) == 4
    assert [r[1] for r in rows[1:]] == ["c1", "c2", "c3"]
    first = dict(zip(rows[0], rows[1], strict=True))
    assert (first["status"], first["best_score"]) == ("completed", "0.5")
    assert [p.name for p in out.parent.iterdir()] == ["results.csv"]


def test_results_csv_empty_sweep(store: RecordStore, tmp_path: Path) -> None:
    out = tmp_path / "results.csv"
    assert write_results_csv(store, "s1", out) == 0
    assert _read_csv(out) == [list(CSV_COLUMNS)]


def test_summarize_with_invalid_and_ties() -> None:
    subs = [
        _sub(1, status="invalid", score=None, error="no weights"),
        _sub(2, status="scored", score=0.4),
        _sub(3, status="invalid", score=0.99),  # an invalid one never counts, even with a score
        _sub(4, status="copy_of_base", score=0.6),
        _sub(5, status="duplicate", score=0.6),
        _sub(6, status="queued", score=None),
        _sub(7, status="scored", score=None),
    ]
    got = summarize_submissions(subs, baseline=0.1)
    assert got == {
        "best_score": 0.6,
        "improvement": 0.5,
        "best_feedback_score": 0.6,
        "best_on_test": 0.6,
        "submissions": 7,
        "valid_submissions": 3,
        "flagged_submissions": 0,
        "weight_distance": None,
        "best_submission_id": 4,
    }


def test_summarize_flagged_counts_only_when_allowed() -> None:
    """docs/design.md#the-grading-api: a flagged submission (another architecture) never counts
    unless substitution is allowed."""
    subs = [
        _sub(1, score=0.3, weight_distance=0.02),
        _sub(2, score=0.9, flags="model_mismatch", weight_distance=1.7),
        _sub(3, score=0.3, weight_distance=0.05),
    ]
    strict = summarize_submissions(subs, baseline=0.1)
    assert (strict["best_score"], strict["best_submission_id"], strict["weight_distance"]) == (
        0.3,
        1,
        0.02,
    )
    assert strict["flagged_submissions"] == 1 and strict["valid_submissions"] == 3
    allowed = summarize_submissions(subs, baseline=0.1, allow_flagged=True)
    assert (allowed["best_score"], allowed["best_submission_id"], allowed["weight_distance"]) == (
        0.9,
        2,
        1.7,
    )


def test_summarize_no_baseline_and_rounding() -> None:
    got = summarize_submissions([_sub(1, score=0.3)], baseline=None)
    assert got["best_score"] == 0.3 and got["improvement"] is None
    assert summarize_submissions([_sub(1, score=0.3)], 0.1)["improvement"] == 0.2


def test_summarize_nothing_valid() -> None:
    assert summarize_submissions([], 0.2) == {
        "best_score": None,
        "improvement": None,
        "best_feedback_score": None,
        "best_on_test": None,
        "submissions": 0,
        "valid_submissions": 0,
        "flagged_submissions": 0,
        "weight_distance": None,
        "best_submission_id": None,
    }
    got = summarize_submissions([_sub(1, status="invalid", score=None)], 0.2)
    assert (got["submissions"], got["valid_submissions"], got["best_score"]) == (1, 0, None)


def test_import_is_light() -> None:
    code = (
        "import sys, autorl.records.store; "
        "bad = [m for m in ('ray', 'torch', 'transformers', 'numpy') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_retried_cell_keeps_each_attempts_records(store: RecordStore) -> None:
    from autorl.records.types import DriverCall, TraceSummary

    store.upsert_cell(_cell())  # registered, never placed: attempt 0
    assert store.start_attempt(_cell(attempts=1)) == 1
    store.upsert_submission(_sub(1, score=0.9))
    store.upsert_submission(_sub(2, score=0.2))
    store.add_code_revision(CodeRevision("c1", "aaa", 1.0, "submission", "+x", 1))
    store.upsert_driver_call(
        DriverCall(
            "c1", "call-1", 1.0, 0.1, "chat", None, "m", 200, 0, 1, tokens_in=5, tokens_out=5
        )
    )
    store.upsert_trace(TraceSummary("c1", "scripted", 3, 1, 1, 0, 0, 0, "/t"))
    store.set_attempt("c1", 1, "failed", error="node died", node_id="n1", finished_at=2.0)

    # Attempt 2 starts over: submission 1 again, the same code revision again.
    assert store.start_attempt(_cell(attempts=2, status="pending")) == 2
    assert store.start_attempt(_cell(attempts=2, status="running")) == 2  # a replay changes nothing
    assert store.start_attempt(_cell(attempts=1)) == 2  # nor does an older number
    assert store.get_cell("c1").status == "pending"  # type: ignore[union-attr]
    assert store.list_submissions("c1") == [] and store.next_submission_id("c1") == 1
    assert store.driver_usage("c1")["calls"] == 0 and store.get_trace("c1") is None
    store.upsert_submission(_sub(1, score=0.5))
    store.add_code_revision(CodeRevision("c1", "aaa", 3.0, "submission", "+x", 1))

    assert [(s.attempt, s.submission_id, s.score) for s in store.list_submissions("c1")] == [
        (2, 1, 0.5)
    ]
    assert [(s.submission_id, s.score) for s in store.list_submissions("c1", 1)] == [
        (1, 0.9),
        (2, 0.2),
    ]
    assert [r.attempt for r in store.list_code_revisions("c1")] == [2]
    assert [r.attempt for r in store.list_code_revisions("c1", 1)] == [1]
    assert store.driver_usage("c1", 1) == {
        "tokens_in": 5,
        "tokens_out": 5,
        "cost_usd": 0.0,
        "calls": 1,
    }
    assert store.get_trace("c1", 1) is not None
    assert _count(store.path, "submissions") == 3 and _count(store.path, "code_revisions") == 2
    attempts = store.list_attempts("c1")
    assert [(a.attempt, a.status, a.error, a.node_id) for a in attempts] == [
        (1, "failed", "node died", "n1"),
        (2, "pending", None, None),
    ]
    with pytest.raises(ValueError, match="needs the new attempt's number"):
        store.start_attempt(_cell(attempts=0))
    with pytest.raises(KeyError, match="no attempt 3"):
        store.set_attempt("c1", 3, "running")
    with pytest.raises(ValueError, match="invalid attempt status"):
        store.set_attempt("c1", 2, "lost")


def test_an_attempt_that_never_ended_is_interrupted_by_the_next(store: RecordStore) -> None:
    store.start_attempt(_cell(attempts=1))
    store.set_attempt("c1", 1, "running")  # then the sweep process was killed
    store.start_attempt(_cell(attempts=2))
    store.set_attempt("c1", 2, "completed")
    store.start_attempt(_cell(attempts=3))  # a completed attempt stays completed
    assert [a.status for a in store.list_attempts("c1")] == ["interrupted", "completed", "pending"]


def test_sweep_stats_are_kept_per_run(store: RecordStore) -> None:
    store.put_sweep_stat(
        "s1", "run-a", "grader_pool", {"graders": [{"grader": 0, "busy_fraction": 0.5}]}
    )
    store.put_sweep_stat(
        "s1", "run-a", "grader_pool", {"graders": [{"grader": 0, "busy_fraction": 0.75}]}
    )
    store.put_sweep_stat("s1", "run-b", "grader_pool", {"graders": []})
    store.put_sweep_stat("s1", "run-b", "other", {})
    stats = store.list_sweep_stats("grader_pool")
    assert [(s.run, s.value_json) for s in stats] == [
        ("run-a", '{"graders": [{"busy_fraction": 0.75, "grader": 0}]}'),
        ("run-b", '{"graders": []}'),
    ]
    assert len(store.list_sweep_stats()) == 3
