"""The embedded record store: one SQLite file (WAL mode) per sweep.

Exactly one writer (the recorder actor) owns a :class:`RecordStore`; readers such as
``autorl.report`` and resume may open the same file concurrently, which WAL allows. Every write
is an idempotent upsert keyed by natural keys (cell id, submission id, revision, cache key), so
replaying a message under at-least-once delivery never duplicates a row. Importing this module
is cheap: standard library only.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Self, TypeVar

from autorl.errors import AutorlError
from autorl.records.live import LiveRecords
from autorl.records.live_types import CheckpointRecord, ResourceSample, TraceEvent
from autorl.records.migrations import SCHEMA_VERSION, check_not_newer, migrate, stored_version
from autorl.records.resumes import ResumeEvent, ResumeRecords
from autorl.records.types import (
    ATTEMPT_STATUSES,
    CELL_STATUSES,
    FINAL_STATUSES,
    CellAttempt,
    CellRecord,
    CodeRevision,
    DriverCall,
    SubmissionRecord,
    SweepStat,
    TraceSummary,
    _check_status,
)

_R = TypeVar("_R")

_CELL_FIELDS = tuple(f.name for f in dataclasses.fields(CellRecord))
_SUBMISSION_FIELDS = tuple(f.name for f in dataclasses.fields(SubmissionRecord))
_REVISION_FIELDS = tuple(f.name for f in dataclasses.fields(CodeRevision))
# The natural key cannot be changed through set_cell_status; status has its own argument.
_SETTABLE_CELL_FIELDS = frozenset(_CELL_FIELDS) - {"cell_id", "status"}


def _upsert_sql(table: str, fields: tuple[str, ...], key: tuple[str, ...]) -> str:
    columns = ", ".join(fields)
    placeholders = ", ".join("?" for _ in fields)
    updates = ", ".join(f"{f} = excluded.{f}" for f in fields if f not in key)
    return (
        f"INSERT INTO {table} ({columns}) VALUES ({placeholders}) "
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}"
    )


_CALL_FIELDS = tuple(f.name for f in dataclasses.fields(DriverCall))
_TRACE_FIELDS = tuple(f.name for f in dataclasses.fields(TraceSummary))
_UPSERT_CELL = _upsert_sql("cells", _CELL_FIELDS, ("cell_id",))
_ATTEMPT_FIELDS = tuple(f.name for f in dataclasses.fields(CellAttempt))
_STAT_FIELDS = tuple(f.name for f in dataclasses.fields(SweepStat))
_UPSERT_CALL = _upsert_sql("driver_calls", _CALL_FIELDS, ("cell_id", "attempt", "call_id"))
_UPSERT_TRACE = _upsert_sql("traces", _TRACE_FIELDS, ("cell_id", "attempt"))
_UPSERT_SUBMISSION = _upsert_sql(
    "submissions", _SUBMISSION_FIELDS, ("cell_id", "attempt", "submission_id")
)
_UPSERT_STAT = _upsert_sql("sweep_stats", _STAT_FIELDS, ("sweep_id", "run", "name"))
# A revision id is a content address, so a replay carries the same content: keep the first.
_INSERT_REVISION = (
    f"INSERT INTO code_revisions ({', '.join(_REVISION_FIELDS)}) "
    f"VALUES ({', '.join('?' for _ in _REVISION_FIELDS)}) ON CONFLICT (cell_id, attempt, revision) "
    "DO NOTHING"
)
_INSERT_ATTEMPT = (
    f"INSERT INTO cell_attempts ({', '.join(_ATTEMPT_FIELDS)}) "
    f"VALUES ({', '.join('?' for _ in _ATTEMPT_FIELDS)}) ON CONFLICT (cell_id, attempt) DO NOTHING"
)
# The cell's current attempt: the one new records are filed under and readers count (at least 1).
_CURRENT_ATTEMPT = "SELECT MAX(attempts, 1) FROM cells WHERE cell_id = ?"
_INTERRUPTED = "interrupted: its attempt ended (node or sweep lost) before it was scored"
_SETTABLE_ATTEMPT_FIELDS = frozenset(_ATTEMPT_FIELDS) - {"cell_id", "attempt", "status"}


# The tables that hold records, and which of their fields have defaults: a read-only store at an
# older schema version may lack those columns (fields added by a migration always have one).
_RECORD_TYPES: dict[str, Any] = {
    "cells": CellRecord,
    "submissions": SubmissionRecord,
    "code_revisions": CodeRevision,
    "driver_calls": DriverCall,
    "traces": TraceSummary,
    "cell_attempts": CellAttempt,
    "sweep_stats": SweepStat,
    "trace_events": TraceEvent,
    "resource_samples": ResourceSample,
    "checkpoints": CheckpointRecord,
    "cell_resumes": ResumeEvent,
}
_TABLE_FIELDS = {
    table: tuple(f.name for f in dataclasses.fields(rt)) for table, rt in _RECORD_TYPES.items()
}
_OPTIONAL_FIELDS = {
    table: frozenset(
        f.name
        for f in dataclasses.fields(rt)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    )
    for table, rt in _RECORD_TYPES.items()
}


class RecordStore(LiveRecords, ResumeRecords):
    """The sweep's SQLite record store.

    Every write is an idempotent upsert, committed immediately. One process should write;
    others may read the same file at the same time.

    Opening a store migrates it to :data:`SCHEMA_VERSION` (see :mod:`autorl.records.migrations`),
    so a sweep folder written by an older autorl resumes. Opened with ``read_only=True`` the file
    is never changed: an older store is read as it is, fields its schema lacks taking their
    record defaults (e.g. ``CellRecord.autorl_version`` is None), and an older autorl can still
    resume it afterwards.

    Args:
        path: The database file; created (with its parent directory) if missing, unless
            ``read_only``.
        read_only: Open for reading only: no migration, and every write raises.

    Attributes:
        path: The database file.
        read_only: Whether writes are refused.
        schema_version: The file's schema version now (after any migration).
        migrated_from: The version before this open migrated it (0: this open created the store);
            None when nothing was migrated.
        migrations_applied: Names of the steps this open applied, oldest first.

    Raises:
        SchemaTooNewError: The file was written by a newer schema version.
        AutorlError: ``read_only`` and there is no file, or the file is not an autorl record
            store (tables or columns missing).
    """

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self.migrated_from: int | None = None
        self.migrations_applied: tuple[str, ...] = ()
        # A Ray actor may call in from several threads; the lock serialises use of the connection.
        self._lock = threading.Lock()
        if read_only:
            if not self.path.is_file():
                raise AutorlError(f"no record store at {self.path}: the file does not exist")
            # mode=ro: SQLite itself refuses writes, so a report can never change an archived sweep.
            target, uri = f"{self.path.resolve().as_uri()}?mode=ro", True
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            target, uri = str(self.path), False
        self._conn = sqlite3.connect(
            target, timeout=30.0, isolation_level=None, check_same_thread=False, uri=uri
        )
        self._conn.row_factory = sqlite3.Row
        try:
            if read_only:
                self.schema_version = stored_version(self._conn)
                check_not_newer(self.schema_version, self.path)
            else:
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=NORMAL")
                before, steps = migrate(self._conn, self.path)
                self.schema_version = SCHEMA_VERSION
                if steps:
                    self.migrated_from, self.migrations_applied = (
                        before,
                        tuple(m.name for m in steps),
                    )
            self._columns = self._table_columns()
            self._check_columns()
        except BaseException:
            self._conn.close()
            raise

    def _table_columns(self) -> dict[str, frozenset[str]]:
        """Columns of each record table; a table the file lacks maps to no columns."""
        return {
            table: frozenset(row[1] for row in self._conn.execute(f"PRAGMA table_info({table})"))
            for table in _TABLE_FIELDS
        }

    def _check_columns(self) -> None:
        """Refuse a file whose tables cannot hold the records (not an autorl store, or damaged).

        A writable store must have every column (the migrations put them there). A read-only one
        may lack the tables and optional columns that later schema versions added.
        """
        missing = []
        for table, fields in _TABLE_FIELDS.items():
            columns = self._columns[table]
            if not columns:
                if not self.read_only or table == "cells":
                    missing.append(f"the {table} table")
                # An old store may predate a whole table (driver_calls and traces before version 2,
                # cell_attempts and sweep_stats before version 6, the live records before 9, the
                # checkpoints before 10, the resumes before 11).
                continue
            optional = _OPTIONAL_FIELDS[table] if self.read_only else frozenset()
            missing += [
                f"{table}.{name}" for name in fields if name not in columns and name not in optional
            ]
        if missing:
            raise AutorlError(
                f"{self.path} is not a usable autorl record store (schema version "
                f"{self.schema_version}): it lacks "
                f"{', '.join(missing)}. Was it written by autorl? Point autorl at the sweep "
                "folder's records.sqlite."
            )

    def _check_writable(self) -> None:
        if self.read_only:
            raise AutorlError(
                f"record store {self.path} was opened read-only; open it without read_only=True to "
                "write"
            )

    def _has_table(self, table: str) -> bool:
        return bool(self._columns[table])

    def _write(self, sql: str, params: Iterable[Any] = ()) -> int:
        self._check_writable()
        with self._lock:
            return self._conn.execute(sql, tuple(params)).rowcount

    def _read(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, tuple(params)).fetchall()

    @staticmethod
    def _to_record(record_type: type[_R], row: sqlite3.Row, fields: tuple[str, ...]) -> _R:
        # A read-only older store lacks the columns later versions added: those take their defaults.
        present = set(row.keys())
        return record_type(**{name: row[name] for name in fields if name in present})

    def migration_log(self) -> list[tuple[int, str, float, str]]:
        """The migrations applied to this file: ``(version, name, applied_at, autorl_version)``.

        Empty for a store no autorl with migrations has written to (every store made before
        schema version 3, opened read-only).
        """
        exists = self._read(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
        )
        if not exists:
            return []
        rows = self._read(
            "SELECT version, name, applied_at, autorl_version FROM schema_migrations ORDER BY "
            "version"
        )
        return [(int(r[0]), str(r[1]), float(r[2]), str(r[3])) for r in rows]

    # Cells.

    def upsert_cell(self, rec: CellRecord) -> None:
        """Insert the cell, or replace every field of the stored one with the same ``cell_id``.

        Args:
            rec: The cell.
        """
        self._write(_UPSERT_CELL, (getattr(rec, f) for f in _CELL_FIELDS))

    def get_cell(self, cell_id: str) -> CellRecord | None:
        """Return the cell with this id, or None if there is none."""
        rows = self._read("SELECT * FROM cells WHERE cell_id = ?", (cell_id,))
        return self._to_record(CellRecord, rows[0], _CELL_FIELDS) if rows else None

    def list_cells(self, sweep_id: str | None = None) -> list[CellRecord]:
        """Return the cells of one sweep (or of all sweeps), ordered by task, agent, driver,
        model, seed."""
        order = " ORDER BY task, agent, driver, model, seed, cell_id"
        if sweep_id is None:
            rows = self._read("SELECT * FROM cells" + order)
        else:
            rows = self._read("SELECT * FROM cells WHERE sweep_id = ?" + order, (sweep_id,))
        return [self._to_record(CellRecord, r, _CELL_FIELDS) for r in rows]

    def set_cell_status(self, cell_id: str, status: str, **fields: Any) -> None:
        """Set a cell's status and, optionally, other fields; fields not given are kept.

        Args:
            cell_id: The cell.
            status: One of :data:`CELL_STATUSES`.
            **fields: Other :class:`CellRecord` fields to set (not ``cell_id``).

        Raises:
            ValueError: The status or a field name is not valid.
            KeyError: No cell has this id.
        """
        _check_status(status, CELL_STATUSES, "cell")
        unknown = sorted(set(fields) - _SETTABLE_CELL_FIELDS)
        if unknown:
            raise ValueError(
                f"cannot set cell field(s) {', '.join(unknown)}; settable fields: "
                f"{', '.join(f for f in _CELL_FIELDS if f in _SETTABLE_CELL_FIELDS)}"
            )
        # Field names come from the fixed whitelist above, never from the caller's strings as such.
        names = ["status", *(f for f in _CELL_FIELDS if f in fields)]
        assignments = ", ".join(f"{name} = ?" for name in names)
        values = [status, *(fields[n] for n in names[1:]), cell_id]
        if self._write(f"UPDATE cells SET {assignments} WHERE cell_id = ?", values) == 0:
            raise KeyError(f"no cell {cell_id!r} in record store {self.path}")

    def start_attempt(self, rec: CellRecord) -> int:
        """Start attempt number ``rec.attempts`` of its cell: the cell's record becomes ``rec``.

        The earlier attempts' submissions, code revisions, driver calls and trace stay in the store
        under their own attempt numbers (readers count only the current one); an earlier attempt
        that never ended (the sweep process was killed) is marked ``interrupted``, and so are its
        submissions still queued or being scored. Idempotent: a
        replay, or any ``rec.attempts`` not above the stored one, changes nothing.

        Args:
            rec: The cell's fresh record; ``rec.attempts`` is the new attempt's number (>= 1).

        Returns:
            The cell's attempt number now.

        Raises:
            ValueError: ``rec.attempts`` is below 1.
        """
        self._check_writable()
        if rec.attempts < 1:
            raise ValueError(
                f"start_attempt({rec.cell_id!r}) needs the new attempt's number in rec.attempts (1 "
                "for the first), "
                f"got {rec.attempts}"
            )
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                row = self._conn.execute(
                    "SELECT attempts FROM cells WHERE cell_id = ?", (rec.cell_id,)
                ).fetchone()
                if row is not None and int(row[0]) >= rec.attempts:
                    self._conn.execute("COMMIT")
                    return int(row[0])
                self._conn.execute(
                    "UPDATE cell_attempts SET status = 'interrupted' WHERE cell_id = ? AND "
                    "attempt < ? "
                    f"AND status NOT IN ({', '.join('?' for _ in FINAL_STATUSES)})",
                    (rec.cell_id, rec.attempts, *FINAL_STATUSES),
                )
                # What an earlier attempt left queued or being scored died with it.
                self._conn.execute(
                    "UPDATE submissions SET status = 'interrupted', error = ? WHERE cell_id = ? "
                    "AND attempt < ? AND status IN ('queued', 'scoring')",
                    (_INTERRUPTED, rec.cell_id, rec.attempts),
                )
                self._conn.execute(_UPSERT_CELL, tuple(getattr(rec, f) for f in _CELL_FIELDS))
                attempt = CellAttempt(rec.cell_id, rec.attempts, rec.status, started_at=time.time())
                self._conn.execute(
                    _INSERT_ATTEMPT, tuple(getattr(attempt, f) for f in _ATTEMPT_FIELDS)
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return rec.attempts

    def current_attempt(self, cell_id: str) -> int:
        """The attempt a cell's new records are filed under, and the one readers count: the cell's
        ``attempts`` (at least 1; 1 for a cell the store does not know)."""
        with self._lock:
            return self._current_attempt(cell_id)

    def _current_attempt(self, cell_id: str) -> int:
        row = self._conn.execute(_CURRENT_ATTEMPT, (cell_id,)).fetchone()
        return int(row[0]) if row is not None else 1

    def set_attempt(self, cell_id: str, attempt: int, status: str, **fields: Any) -> None:
        """Update one attempt of a cell: its status and any of ``error``, ``node_id``,
        ``started_at``, ``finished_at``.

        Raises:
            ValueError: The status or a field name is not valid.
            KeyError: The cell has no such attempt.
        """
        _check_status(status, ATTEMPT_STATUSES, "attempt")
        unknown = sorted(set(fields) - _SETTABLE_ATTEMPT_FIELDS)
        if unknown:
            raise ValueError(
                f"cannot set attempt field(s) {', '.join(unknown)}; settable: "
                f"{', '.join(sorted(_SETTABLE_ATTEMPT_FIELDS))}"
            )
        names = ["status", *(f for f in _ATTEMPT_FIELDS if f in fields)]
        values = [status, *(fields[n] for n in names[1:]), cell_id, attempt]
        assignments = ", ".join(f"{n} = ?" for n in names)
        sql = f"UPDATE cell_attempts SET {assignments} WHERE cell_id = ? AND attempt = ?"
        if self._write(sql, values) == 0:
            raise KeyError(f"cell {cell_id!r} has no attempt {attempt} in record store {self.path}")

    def list_attempts(self, cell_id: str) -> list[CellAttempt]:
        """Every attempt of a cell, first first (none from a store older than version 6)."""
        if not self._has_table("cell_attempts"):
            return []
        rows = self._read(
            "SELECT * FROM cell_attempts WHERE cell_id = ? ORDER BY attempt", (cell_id,)
        )
        return [self._to_record(CellAttempt, r, _ATTEMPT_FIELDS) for r in rows]

    def _stamped(self, sql: str, rec: Any, fields: tuple[str, ...]) -> None:
        """Write ``rec``, filed under its cell's current attempt unless it names one."""
        self._check_writable()
        with self._lock:
            if rec.attempt is None:
                rec = dataclasses.replace(rec, attempt=self._current_attempt(rec.cell_id))
            self._conn.execute(sql, tuple(getattr(rec, f) for f in fields))

    def _of_attempt(
        self, table: str, cell_id: str, attempt: int | None
    ) -> tuple[str, tuple[Any, ...]]:
        """``WHERE`` clause and parameters for one attempt's rows (the current one when None).

        A read-only store older than version 6 has one attempt per cell and no ``attempt`` column.
        """
        if "attempt" not in self._columns[table]:
            return "cell_id = ?", (cell_id,)
        if attempt is None:
            return f"cell_id = ? AND attempt = COALESCE(({_CURRENT_ATTEMPT}), 1)", (
                cell_id,
                cell_id,
            )
        return "cell_id = ? AND attempt = ?", (cell_id, attempt)

    # Submissions.

    def upsert_submission(self, rec: SubmissionRecord) -> None:
        """Insert the submission, or replace the stored one with the same
        ``(cell_id, attempt, submission_id)`` (last write wins); ``attempt`` None: the cell's
        current."""
        self._stamped(_UPSERT_SUBMISSION, rec, _SUBMISSION_FIELDS)

    def list_submissions(self, cell_id: str, attempt: int | None = None) -> list[SubmissionRecord]:
        """Return one attempt's submissions (the cell's current attempt by default) by
        ``submission_id``."""
        where, params = self._of_attempt("submissions", cell_id, attempt)
        rows = self._read(f"SELECT * FROM submissions WHERE {where} ORDER BY submission_id", params)
        return [self._to_record(SubmissionRecord, r, _SUBMISSION_FIELDS) for r in rows]

    def get_submission(
        self, cell_id: str, submission_id: int, attempt: int | None = None
    ) -> SubmissionRecord | None:
        """Return one submission of an attempt (the current one by default), or None if there is
        none."""
        where, params = self._of_attempt("submissions", cell_id, attempt)
        rows = self._read(
            f"SELECT * FROM submissions WHERE {where} AND submission_id = ?",
            (*params, submission_id),
        )
        return self._to_record(SubmissionRecord, rows[0], _SUBMISSION_FIELDS) if rows else None

    def next_submission_id(self, cell_id: str) -> int:
        """Return the id the cell's next submission should get in its current attempt: 1 for the
        first."""
        where, params = self._of_attempt("submissions", cell_id, None)
        rows = self._read(
            f"SELECT COALESCE(MAX(submission_id), 0) + 1 FROM submissions WHERE {where}", params
        )
        return int(rows[0][0])

    # Baselines and the cross-cell score cache.

    def put_baseline(self, key: str, score: float, details_json: str) -> None:
        """Store the baseline score for a key the caller builds (task, version, eval config,
        model weights hash)."""
        self._write(
            "INSERT INTO baselines (key, score, details_json) VALUES (?, ?, ?) "
            "ON CONFLICT (key) DO UPDATE SET score = excluded.score, "
            "details_json = excluded.details_json",
            (key, float(score), details_json),
        )

    def get_baseline(self, key: str) -> float | None:
        """Return the stored baseline score for the key, or None."""
        rows = self._read("SELECT score FROM baselines WHERE key = ?", (key,))
        return float(rows[0][0]) if rows else None

    def put_cached_score(self, key: str, score: float, details_json: str) -> None:
        """Cache a score for a key the caller builds (task key plus weights hash)."""
        self._write(
            "INSERT INTO score_cache (key, score, details_json) VALUES (?, ?, ?) "
            "ON CONFLICT (key) DO UPDATE SET score = excluded.score, "
            "details_json = excluded.details_json",
            (key, float(score), details_json),
        )

    def get_cached_score(self, key: str) -> tuple[float, str] | None:
        """Return ``(score, details_json)`` cached for the key, or None."""
        rows = self._read("SELECT score, details_json FROM score_cache WHERE key = ?", (key,))
        return (float(rows[0][0]), str(rows[0][1])) if rows else None

    # Code revisions.

    def add_code_revision(self, rec: CodeRevision) -> None:
        """Record a code revision under the cell's current attempt (unless it names one); a replay
        of an already stored ``(cell_id, attempt, revision)`` is a no-op."""
        self._stamped(_INSERT_REVISION, rec, _REVISION_FIELDS)

    def list_code_revisions(self, cell_id: str, attempt: int | None = None) -> list[CodeRevision]:
        """Return one attempt's code revisions (the current attempt by default), oldest first."""
        where, params = self._of_attempt("code_revisions", cell_id, attempt)
        rows = self._read(
            f"SELECT * FROM code_revisions WHERE {where} ORDER BY created_at, rowid", params
        )
        return [self._to_record(CodeRevision, r, _REVISION_FIELDS) for r in rows]

    # Driver calls and agent traces.

    def upsert_driver_call(self, rec: DriverCall) -> None:
        """Record one driver call under the cell's current attempt (unless it names one); a replay
        of the same ``(cell_id, attempt, call_id)`` replaces it."""
        self._stamped(_UPSERT_CALL, rec, _CALL_FIELDS)

    def list_driver_calls(self, cell_id: str, attempt: int | None = None) -> list[DriverCall]:
        """Return one attempt's driver calls (the current by default), oldest first (none from a
        store without the table)."""
        if not self._has_table("driver_calls"):
            return []
        where, params = self._of_attempt("driver_calls", cell_id, attempt)
        rows = self._read(
            f"SELECT * FROM driver_calls WHERE {where} ORDER BY started_at, rowid", params
        )
        return [self._to_record(DriverCall, r, _CALL_FIELDS) for r in rows]

    def driver_usage(self, cell_id: str, attempt: int | None = None) -> dict[str, Any]:
        """One attempt's (the current by default) summed driver usage: ``{"tokens_in", "tokens_out",
        "cost_usd", "calls"}``."""
        if not self._has_table("driver_calls"):
            return {"tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0, "calls": 0}
        where, params = self._of_attempt("driver_calls", cell_id, attempt)
        row = self._read(
            "SELECT COALESCE(SUM(tokens_in), 0), COALESCE(SUM(tokens_out), 0), "
            "COALESCE(SUM(cost_usd), 0.0), COUNT(*) "
            f"FROM driver_calls WHERE {where}",
            params,
        )[0]
        return {
            "tokens_in": int(row[0]),
            "tokens_out": int(row[1]),
            "cost_usd": float(row[2]),
            "calls": int(row[3]),
        }

    def upsert_trace(self, rec: TraceSummary) -> None:
        """Store (or replace) the summary of the agent trace of the cell's current attempt (unless
        it names one)."""
        self._stamped(_UPSERT_TRACE, rec, _TRACE_FIELDS)

    def get_trace(self, cell_id: str, attempt: int | None = None) -> TraceSummary | None:
        """The summary of one attempt's (the current by default) parsed agent trace, or None."""
        if not self._has_table("traces"):
            return None
        where, params = self._of_attempt("traces", cell_id, attempt)
        rows = self._read(f"SELECT * FROM traces WHERE {where}", params)
        return self._to_record(TraceSummary, rows[0], _TRACE_FIELDS) if rows else None

    # Sweep-level measurements.

    def put_sweep_stat(self, sweep_id: str, run: str, name: str, value: dict[str, Any]) -> None:
        """Store (or replace) one measurement of one run of a sweep (see :class:`SweepStat`)."""
        stat = SweepStat(sweep_id, run, name, json.dumps(value, sort_keys=True), time.time())
        self._write(_UPSERT_STAT, (getattr(stat, f) for f in _STAT_FIELDS))

    def list_sweep_stats(self, name: str | None = None) -> list[SweepStat]:
        """Every stored measurement (of ``name`` only, when given), by sweep and run (none from a
        store older than version 6)."""
        if not self._has_table("sweep_stats"):
            return []
        where, params = ("WHERE name = ?", (name,)) if name else ("", ())
        rows = self._read(f"SELECT * FROM sweep_stats {where} ORDER BY sweep_id, run, name", params)
        return [self._to_record(SweepStat, r, _STAT_FIELDS) for r in rows]

    def close(self) -> None:
        """Close the connection; the store cannot be used afterwards."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
