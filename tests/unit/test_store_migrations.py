"""Schema versions and migrations of the record store, on a store written by the previous main.

``tests/fixtures/sweep_b0f395e`` holds a sweep folder made by autorl at b0f395e (schema version 1,
one completed and one cancelled cell); its README says how.
"""

from __future__ import annotations

import csv
import dataclasses
import enum
import hashlib
import shutil
import sqlite3
from pathlib import Path, PurePosixPath
from types import SimpleNamespace
from typing import Any

import pytest

from autorl.errors import AutorlError
from autorl.records import migrations
from autorl.records.migrations import (
    MIGRATIONS,
    SCHEMA_VERSION,
    Migration,
    SchemaTooNewError,
    autorl_version,
)
from autorl.records.results import write_results_csv
from autorl.records.store import RecordStore
from autorl.records.types import (
    CellAttempt,
    CellRecord,
    CodeRevision,
    DriverCall,
    SubmissionRecord,
    SweepStat,
    TraceSummary,
    plain_config,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "sweep_b0f395e" / "default-9f036f8b"
TABLES = (
    "cells",
    "submissions",
    "code_revisions",
    "baselines",
    "score_cache",
    "driver_calls",
    "traces",
)
RECORD_TABLES = {
    "cells": CellRecord,
    "submissions": SubmissionRecord,
    "code_revisions": CodeRevision,
    "driver_calls": DriverCall,
    "traces": TraceSummary,
    "cell_attempts": CellAttempt,
    "sweep_stats": SweepStat,
}
COMPLETED, CANCELLED = "gsm8k.scripted.none.tiny.s0", "gsm8k.scripted.none.tiny.s1"


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    """A private copy of the b0f395e store (opening it migrates it in place)."""
    shutil.copy(FIXTURE / "records.sqlite", tmp_path / "records.sqlite")
    return tmp_path / "records.sqlite"


def _raw(db: Path, sql: str, *params: object) -> list[sqlite3.Row]:
    # mode=ro: reading the file to compare must not change it.
    with sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True) as conn:
        conn.row_factory = sqlite3.Row
        return list(conn.execute(sql, params))


def _counts(db: Path) -> dict[str, int]:
    return {t: int(_raw(db, f"SELECT COUNT(*) FROM {t}")[0][0]) for t in TABLES}


def _columns(db: Path, table: str) -> list[str]:
    return [r[1] for r in _raw(db, f"PRAGMA table_info({table})")]


def _dump(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return list(conn.iterdump())


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_fixture_is_what_the_previous_main_wrote(old_store: Path) -> None:
    # A copy: even a read-only SQLite connection leaves -wal and -shm files beside the file.
    db = old_store
    assert [r[0] for r in _raw(db, "SELECT version FROM schema_version")] == [1]
    assert "autorl_version" not in _columns(db, "cells")
    assert {r["cell_id"]: r["status"] for r in _raw(db, "SELECT cell_id, status FROM cells")} == {
        COMPLETED: "completed",
        CANCELLED: "cancelled",
    }
    assert _counts(db)["submissions"] >= 1


def test_migrations_are_numbered_from_one_with_unique_names() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))
    assert len({m.name for m in MIGRATIONS}) == len(MIGRATIONS)
    assert SCHEMA_VERSION == 11


def test_old_store_is_migrated_and_keeps_every_row(old_store: Path) -> None:
    before = _counts(old_store)
    with RecordStore(old_store) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.migrated_from == 1
        assert store.migrations_applied == (
            "v1_late_tables",
            "cell_autorl_version",
            "cell_sandbox",
            "integrity",
            "attempts",
            "feedback",
            "model_build",
            "live_records",
            "checkpoints",
            "resumes",
        )
        log = store.migration_log()
    assert [(v, name) for v, name, _, _ in log] == [
        (2, "v1_late_tables"),
        (3, "cell_autorl_version"),
        (4, "cell_sandbox"),
        (5, "integrity"),
        (6, "attempts"),
        (7, "feedback"),
        (8, "model_build"),
        (9, "live_records"),
        (10, "checkpoints"),
        (11, "resumes"),
    ]
    assert all(by == autorl_version() for *_, by in log)
    assert [r[0] for r in _raw(old_store, "SELECT version FROM schema_version")] == [SCHEMA_VERSION]
    assert _counts(old_store) == before
    assert "autorl_version" in _columns(old_store, "cells")
    assert _raw(old_store, "PRAGMA integrity_check")[0][0] == "ok"


def test_old_rows_read_back_identically(old_store: Path) -> None:
    old_cells = {r["cell_id"]: dict(r) for r in _raw(old_store, "SELECT * FROM cells")}
    old_subs = [
        dict(r)
        for r in _raw(old_store, "SELECT * FROM submissions ORDER BY cell_id, submission_id")
    ]
    old_revs = [
        dict(r) for r in _raw(old_store, "SELECT * FROM code_revisions ORDER BY cell_id, revision")
    ]
    with RecordStore(old_store) as store:
        for cell_id, row in old_cells.items():
            cell = store.get_cell(cell_id)
            assert cell is not None
            assert {k: getattr(cell, k) for k in row} == row
            assert cell.autorl_version is None  # registered before the column existed
        completed = store.get_cell(COMPLETED)
        assert completed is not None and completed.status == "completed" and completed.finished_at
        subs = [s for c in sorted(old_cells) for s in store.list_submissions(c)]
        revs = [r for c in sorted(old_cells) for r in store.list_code_revisions(c)]
    # Fields added since take their defaults (no integrity flag, no weight distance); the rows are
    # filed under their cell's attempt (both fixture cells ran once).
    attempts = {c: max(row["attempts"], 1) for c, row in old_cells.items()}
    assert [dataclasses.asdict(s) for s in subs] == [
        row
        | {
            "flags": None,
            "weight_distance": None,
            "attempt": attempts[row["cell_id"]],
            "test_score": row["score"],
        }
        for row in old_subs
    ]
    assert sorted(
        (dataclasses.asdict(r) for r in revs), key=lambda r: (r["cell_id"], r["revision"])
    ) == [row | {"attempt": attempts[row["cell_id"]]} for row in old_revs]


def test_results_csv_from_the_migrated_store_matches_the_old_one(
    old_store: Path, tmp_path: Path
) -> None:
    with RecordStore(old_store) as store:
        (sweep_id,) = {c.sweep_id for c in store.list_cells()}
        assert write_results_csv(store, sweep_id, tmp_path / "results.csv") == 2
    new = list(csv.DictReader((tmp_path / "results.csv").open()))
    old = list(csv.DictReader((FIXTURE / "results.csv").open()))
    # The old columns keep their values; the columns added since say "ran before sealing existed".
    assert [{k: row[k] for k in old[0]} for row in new] == old
    assert {(row["sandbox"], row["limit_hit"], row["resumes"]) for row in new} == {("", "", "0")}
    # ... and "ran before the integrity checks": no contamination figure, no flags.
    assert {
        (row["contamination"], row["integrity_flags"], row["flagged_submissions"]) for row in new
    } == {("", "", "0")}


def test_opening_twice_changes_nothing_more(old_store: Path) -> None:
    RecordStore(old_store).close()
    once = _dump(old_store)
    with RecordStore(old_store) as store:
        assert store.migrated_from is None and store.migrations_applied == ()
        assert store.schema_version == SCHEMA_VERSION
        assert len(store.migration_log()) == SCHEMA_VERSION - 1
    assert _dump(old_store) == once


def test_migrated_store_has_the_shape_of_a_new_one(old_store: Path, tmp_path: Path) -> None:
    RecordStore(old_store).close()
    RecordStore(tmp_path / "new.sqlite").close()
    for table in (*TABLES, "cell_attempts", "sweep_stats", "schema_version", "schema_migrations"):
        assert _columns(old_store, table) == _columns(tmp_path / "new.sqlite", table), table


def test_new_store_columns_are_the_record_fields(tmp_path: Path) -> None:
    # A field added to a record type without a migration (or the reverse) fails here.
    RecordStore(tmp_path / "r.sqlite").close()
    for table, record_type in RECORD_TABLES.items():
        assert _columns(tmp_path / "r.sqlite", table) == [
            f.name for f in dataclasses.fields(record_type)
        ], table


def test_a_store_from_the_future_is_refused_and_left_alone(old_store: Path) -> None:
    RecordStore(old_store).close()
    with sqlite3.connect(old_store) as conn:
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    conn.close()
    dump = _dump(old_store)
    for read_only in (False, True):
        with pytest.raises(SchemaTooNewError) as caught:
            RecordStore(old_store, read_only=read_only)
        message = str(caught.value)
        assert f"schema version {SCHEMA_VERSION + 1}" in message
        assert f"up to {SCHEMA_VERSION}" in message and "Upgrade autorl" in message
    assert _dump(old_store) == dump


def test_read_only_reads_an_old_store_without_changing_it(old_store: Path) -> None:
    digest = _sha(old_store)
    with RecordStore(old_store, read_only=True) as store:
        assert store.schema_version == 1 and store.migrated_from is None
        cells = {c.cell_id: c for c in store.list_cells()}
        assert cells[COMPLETED].status == "completed" and cells[COMPLETED].autorl_version is None
        assert store.list_submissions(COMPLETED)
        assert store.migration_log() == []
        with pytest.raises(AutorlError, match="read-only"):
            store.set_cell_status(COMPLETED, "failed")
        with pytest.raises(AutorlError, match="read-only"):
            store.start_attempt(cells[CANCELLED])
    assert _sha(old_store) == digest
    # SQLite may leave an empty write-ahead log beside a WAL-mode file even when reading.
    wal = old_store.with_name("records.sqlite-wal")
    assert not wal.exists() or wal.stat().st_size == 0


def test_read_only_needs_an_existing_file(tmp_path: Path) -> None:
    with pytest.raises(AutorlError, match="does not exist"):
        RecordStore(tmp_path / "missing.sqlite", read_only=True)
    assert not (tmp_path / "missing.sqlite").exists()


def test_an_early_version_1_store_gets_its_missing_tables(old_store: Path) -> None:
    # Stores stamped 1 by a890a32..a3e9c3f have no driver_calls or traces tables.
    with sqlite3.connect(old_store) as conn:
        conn.execute("DROP TABLE driver_calls")
        conn.execute("DROP TABLE traces")
    conn.close()
    with RecordStore(old_store, read_only=True) as store:
        assert store.list_driver_calls(COMPLETED) == [] and store.get_trace(COMPLETED) is None
        assert store.driver_usage(COMPLETED)["calls"] == 0
    with RecordStore(old_store) as store:
        assert store.migrated_from == 1
        assert store.list_driver_calls(COMPLETED) == []
    assert _columns(old_store, "driver_calls") and _columns(old_store, "traces")


def test_an_unversioned_store_counts_as_version_0(old_store: Path) -> None:
    before = _counts(old_store)
    with sqlite3.connect(old_store) as conn:
        conn.execute("DROP TABLE schema_version")
    conn.close()
    with RecordStore(old_store) as store:
        assert store.migrated_from == 0 and store.schema_version == SCHEMA_VERSION
        assert store.migrations_applied == tuple(m.name for m in MIGRATIONS)
    assert _counts(old_store) == before


def test_a_failing_step_rolls_the_whole_migration_back(
    old_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half_done (x INTEGER)")
        raise RuntimeError("step failed")

    monkeypatch.setattr(
        migrations, "MIGRATIONS", (*MIGRATIONS, Migration(SCHEMA_VERSION + 1, "boom", boom))
    )
    monkeypatch.setattr(migrations, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    dump = _dump(old_store)
    with pytest.raises(RuntimeError, match="step failed"):
        RecordStore(old_store)
    assert _dump(old_store) == dump  # still version 1, no autorl_version column, no half_done table


@pytest.mark.parametrize(
    ("columns", "version", "message"),
    [
        (
            "cell_id TEXT PRIMARY KEY, colour TEXT",
            None,
            r"cannot migrate .* from schema version 0 to \d+: step 1 \(initial\)",
        ),
        (
            "cell_id TEXT PRIMARY KEY, sweep_id TEXT",
            None,
            r"step 6 \(attempts\) failed: no such column: c\.attempts",
        ),
        (
            "cell_id TEXT PRIMARY KEY, sweep_id TEXT",
            SCHEMA_VERSION,
            r"not a usable autorl record store .*it lacks cells\.agent, cells\.driver",
        ),
    ],
    ids=["migration fails", "migration fails later", "columns missing"],
)
def test_a_foreign_database_is_refused_with_what_is_wrong(
    tmp_path: Path, columns: str, version: int | None, message: str
) -> None:
    db = tmp_path / "other.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute(f"CREATE TABLE cells ({columns})")
        if version is not None:  # stamped current: no migration runs, the column check speaks
            conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
            conn.execute("INSERT INTO schema_version VALUES (?)", (version,))
    conn.close()
    with pytest.raises(AutorlError, match=message):
        RecordStore(db)


def test_new_cells_record_the_autorl_that_registered_them(old_store: Path) -> None:
    with RecordStore(old_store) as store:
        old = store.get_cell(CANCELLED)
        assert old is not None
        store.start_attempt(
            dataclasses.replace(
                old, status="pending", attempts=old.attempts + 1, autorl_version=autorl_version()
            )
        )
        assert store.get_cell(CANCELLED).autorl_version == autorl_version()  # type: ignore[union-attr]
        assert store.get_cell(COMPLETED).autorl_version is None  # type: ignore[union-attr]
    assert autorl_version().startswith("0.")


def test_a_report_builds_from_the_old_sweep_folder(tmp_path: Path) -> None:
    from autorl.report.build import build_report

    sweep_dir = tmp_path / FIXTURE.name
    shutil.copytree(FIXTURE, sweep_dir)
    index = build_report(sweep_dir)
    html = index.read_text()
    assert COMPLETED in html and CANCELLED in html
    # The completed cell's two submissions.
    stages = html.split('<section id="stages">', 1)[1].split("</section>", 1)[0]
    assert (
        "<th>output/v1</th>" in stages
        and "<th>output/v2</th>" in stages
        and "gsm8k/scripted/none/tiny" in stages
    )


class _Source(enum.Enum):
    FIXTURE = "fixture"


@dataclasses.dataclass
class _TaskCfg:
    name: str = "gsm8k"
    source: _Source = _Source.FIXTURE
    data_dir: PurePosixPath = dataclasses.field(default_factory=lambda: PurePosixPath("/data"))


@dataclasses.dataclass
class _CellCfg:
    task: _TaskCfg = dataclasses.field(default_factory=_TaskCfg)
    budget: dict[str, Any] = dataclasses.field(default_factory=lambda: {"seconds": 60})
    tags: tuple[str, ...] = ("a", "b")
    model: dict[str, Any] = dataclasses.field(
        default_factory=lambda: {"kind": "tiny", "hub_id": None}
    )


def test_plain_config_takes_a_dict_or_a_typed_config() -> None:
    as_dict = {
        "task": {"name": "gsm8k", "source": "fixture", "data_dir": "/data"},
        "budget": {"seconds": 60},
        "tags": ["a", "b"],
        "model": {"kind": "tiny", "hub_id": None},
    }
    assert plain_config(as_dict) == as_dict
    assert plain_config(_CellCfg()) == as_dict
    with pytest.raises(TypeError, match="mapping or a dataclass"):
        plain_config(["not", "a", "config"])
    with pytest.raises(TypeError, match="cannot store a object"):
        plain_config({"x": object()})


@pytest.mark.parametrize(
    "config",
    [
        {
            "task": {"name": "gsm8k", "source": "fixture", "data_dir": "/data"},
            "budget": {"seconds": 60},
            "tags": ["a", "b"],
            "model": {"kind": "tiny", "hub_id": None},
        },
        _CellCfg(),
    ],
    ids=["dict", "dataclass"],
)
def test_the_scheduler_registers_the_cell_config(config: Any) -> None:
    from autorl.scheduler import SweepRunner

    cell = SimpleNamespace(
        sweep_id="s",
        cell_id="c",
        agent="scripted",
        driver="none",
        task="gsm8k",
        model="tiny",
        seed=0,
        budget_s=60.0,
        config=config,
    )
    record = SweepRunner._record(SimpleNamespace(), cell, "pending", 0)  # type: ignore[arg-type]
    assert record.task_source == "fixture" and record.autorl_version == autorl_version()
    assert record.model_build == "tiny-b1"
    assert record.config_json == (
        '{"budget": {"seconds": 60}, "model": {"hub_id": null, "kind": "tiny"}, '
        '"tags": ["a", "b"], "task": {"data_dir": "/data", "name": "gsm8k", "source": "fixture"}}'
    )


def test_old_rows_are_filed_under_their_attempt_and_a_new_attempt_keeps_them(
    old_store: Path,
) -> None:
    old_cells = {r["cell_id"]: dict(r) for r in _raw(old_store, "SELECT * FROM cells")}
    old_subs = int(
        _raw(old_store, "SELECT COUNT(*) FROM submissions WHERE cell_id = ?", CANCELLED)[0][0]
    )
    with RecordStore(old_store) as store:
        # One attempt row per cell that ran, from the cell's own fields.
        for cell_id, row in old_cells.items():
            (attempt,) = store.list_attempts(cell_id)
            assert (attempt.attempt, attempt.status, attempt.error) == (
                max(row["attempts"], 1),
                row["status"],
                row["error"],
            )
        old = store.get_cell(CANCELLED)
        assert old is not None
        store.start_attempt(dataclasses.replace(old, status="pending", attempts=old.attempts + 1))
        assert store.list_submissions(CANCELLED) == []  # the new attempt starts with nothing
        # The old one is kept.
        assert len(store.list_submissions(CANCELLED, old.attempts)) == old_subs
        assert [a.status for a in store.list_attempts(CANCELLED)] == ["cancelled", "pending"]


def test_old_cells_get_the_model_build_of_their_time(old_store: Path) -> None:
    """Version 8 fills ``model_build`` from each cell's config; a resume then re-runs the cells
    whose build changed since (autorl.scheduler.stale_reason) and skips the others."""
    from autorl.models.resolve import model_build
    from autorl.scheduler import stale_reason

    store = RecordStore(old_store)
    cells = store.list_cells()
    assert {c.model_build for c in cells} == {"tiny-b1"}
    completed = [c for c in cells if c.status == "completed"]
    assert completed and all(
        stale_reason(c, c.task_version, model_build("tiny", None)) is None for c in completed
    )
    assert stale_reason(completed[0], completed[0].task_version, "tiny-b2") == (
        "model tiny-b1 -> tiny-b2"
    )
