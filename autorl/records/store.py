"""The embedded record store: one SQLite file (WAL mode) per sweep.

Exactly one writer (the recorder actor) owns a :class:`RecordStore`; readers such as
``autorl.report`` and resume may open the same file concurrently, which WAL allows. Every write
is an idempotent upsert keyed by natural keys (cell id, submission id, revision, cache key), so
replaying a message under at-least-once delivery never duplicates a row. Importing this module
is cheap: standard library only.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import sqlite3
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from autorl.errors import AutorlError

SCHEMA_VERSION = 1

CELL_STATUSES = ("pending", "running", "completed", "failed", "cancelled")
FINAL_STATUSES = ("completed", "failed", "cancelled")
SUBMISSION_STATUSES = ("queued", "scoring", "scored", "invalid", "duplicate", "copy_of_base")
VALID_SUBMISSION_STATUSES = ("scored", "duplicate", "copy_of_base")

RESULTS_COLUMNS: tuple[str, ...] = (
    "sweep_id",
    "cell_id",
    "agent",
    "driver",
    "task",
    "task_version",
    "model",
    "seed",
    "budget_s",
    "status",
    "baseline",
    "best_score",
    "improvement",
    "submissions",
    "valid_submissions",
    "duration_s",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "task_source",
    "exit_class",
    "working_time_s",
    "error",
)


def _check_status(status: str, valid: tuple[str, ...], what: str) -> None:
    if status not in valid:
        raise ValueError(f"invalid {what} status {status!r}; valid statuses: {', '.join(valid)}")


@dataclass(frozen=True)
class CellRecord:
    """One cell of a sweep (one agent × driver × task × model × seed) and its outcome.

    Attributes:
        sweep_id: The sweep the cell belongs to.
        cell_id: Unique id of the cell; the natural key.
        agent: Agent name.
        driver: Driver (LLM) name.
        task: Task id.
        task_version: Task version from its manifest.
        model: Base model name.
        seed: Seed of this repetition.
        budget_s: Agent time budget in seconds.
        status: One of :data:`CELL_STATUSES`.
        baseline: Score of the unmodified base model, once known.
        best_score: Best valid submission score, once any.
        improvement: ``best_score - baseline`` when both exist.
        submissions: Number of submissions.
        valid_submissions: Number of submissions that produced a score.
        duration_s: Wall time of the agent run.
        tokens_in: Driver input tokens.
        tokens_out: Driver output tokens.
        cost_usd: Driver cost.
        exit_class: ``exited``, ``timeout``, ``killed`` or ``crashed``.
        exit_code: The agent process's exit code, when it exited.
        working_time_s: Wall time minus the time submissions waited in the grader queue.
        task_source: Where the task data came from (e.g. hub or fixture).
        error: Infrastructure error message, if any.
        attempts: How many times the cell was started.
        config_json: The cell's resolved configuration as JSON.
        started_at: Unix time the cell started.
        finished_at: Unix time the cell reached a final status.
    """

    sweep_id: str
    cell_id: str
    agent: str
    driver: str
    task: str
    task_version: int
    model: str
    seed: int
    budget_s: float
    status: str
    baseline: float | None = None
    best_score: float | None = None
    improvement: float | None = None
    submissions: int = 0
    valid_submissions: int = 0
    duration_s: float | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    exit_class: str | None = None
    exit_code: int | None = None
    working_time_s: float | None = None
    task_source: str | None = None
    error: str | None = None
    attempts: int = 0
    config_json: str = "{}"
    started_at: float | None = None
    finished_at: float | None = None

    def __post_init__(self) -> None:
        _check_status(self.status, CELL_STATUSES, "cell")


@dataclass(frozen=True)
class SubmissionRecord:
    """One model the agent submitted for grading.

    Attributes:
        cell_id: The cell that submitted it.
        submission_id: 1-based index within the cell; with ``cell_id`` the natural key.
        model_path: Path of the submitted model.
        status: One of :data:`SUBMISSION_STATUSES`.
        weights_hash: Content hash of the weights, once computed.
        score: Grader score, when scored.
        baseline_score: The baseline it is compared against.
        improvement: ``score - baseline_score`` when both exist.
        error: Why it could not be scored, if it could not.
        details_json: Grader details as JSON.
        code_revision: The code revision snapshotted at submission time.
        submitted_at: Unix time of the submission.
        started_at: Unix time scoring started.
        finished_at: Unix time scoring finished.
        queue_wait_s: Time spent waiting in the grader queue.
    """

    cell_id: str
    submission_id: int
    model_path: str
    status: str
    weights_hash: str | None = None
    score: float | None = None
    baseline_score: float | None = None
    improvement: float | None = None
    error: str | None = None
    details_json: str = "{}"
    code_revision: str | None = None
    submitted_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    queue_wait_s: float | None = None

    def __post_init__(self) -> None:
        _check_status(self.status, SUBMISSION_STATUSES, "submission")


@dataclass(frozen=True)
class CodeRevision:
    """A snapshot of the agent's ``code/`` directory.

    Attributes:
        cell_id: The cell whose code it is.
        revision: Content address (or commit id) of the snapshot; with ``cell_id`` the natural key.
        created_at: Unix time of the snapshot.
        reason: Why it was taken (e.g. ``submission`` or ``periodic``).
        diff: Diff against the previous revision.
        files_changed: Number of files the diff touches.
    """

    cell_id: str
    revision: str
    created_at: float
    reason: str
    diff: str
    files_changed: int


@dataclass(frozen=True)
class DriverCall:
    """One call of a cell's agent to its driver LLM, as the driver gateway saw it.

    Attributes:
        cell_id: The cell whose agent made the call.
        call_id: Unique id of the call (from the gateway); with ``cell_id`` the natural key.
        started_at: Unix time the gateway received the call.
        latency_s: Time from receiving the call to the last byte of the response.
        protocol: ``chat``, ``responses``, ``messages`` or ``gemini`` (the route the agent used).
        requested_model: The model the agent asked for.
        model: The model the call was forwarded to.
        status_code: HTTP status returned to the agent.
        stream: Whether the response was streamed (SSE).
        attempts: Upstream attempts (retries on provider 429/5xx).
        tokens_in: Input tokens the provider reported (cached ones included), if any.
        tokens_out: Output tokens the provider reported, if any.
        cached_in: Cached input tokens, if reported.
        cost_usd: Cost from the driver's ``price_per_mtok``; None when the price is unknown.
        request_bytes: Size of the request body.
        response_bytes: Size of the response body sent to the agent.
        translated: 1 when LiteLLM translated the call to another protocol, else 0.
        error: What went wrong (provider error, budget exhausted, ...), if anything.
    """

    cell_id: str
    call_id: str
    started_at: float
    latency_s: float
    protocol: str
    requested_model: str | None
    model: str
    status_code: int
    stream: int
    attempts: int
    tokens_in: int | None = None
    tokens_out: int | None = None
    cached_in: int | None = None
    cost_usd: float | None = None
    request_bytes: int = 0
    response_bytes: int = 0
    translated: int = 0
    error: str | None = None


@dataclass(frozen=True)
class TraceSummary:
    """What the agent's own output stream said, parsed into ``cells/<cell_id>/trace.jsonl``.

    Attributes:
        cell_id: The cell; the natural key.
        agent: The agent whose stream format was parsed.
        events: Normalised trace events written.
        messages: Assistant messages.
        tool_calls: Tool calls.
        tokens_in: Input tokens the agent's stream reported (trace side; the gateway's count is
            on the cell).
        tokens_out: Output tokens the agent's stream reported.
        unparsed_lines: Output lines that were not events of the agent's format.
        path: Where the trace file is, on the node that ran the cell.
    """

    cell_id: str
    agent: str
    events: int
    messages: int
    tool_calls: int
    tokens_in: int
    tokens_out: int
    unparsed_lines: int
    path: str


_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS cells (
    sweep_id TEXT NOT NULL,
    cell_id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    driver TEXT NOT NULL,
    task TEXT NOT NULL,
    task_version INTEGER NOT NULL,
    model TEXT NOT NULL,
    seed INTEGER NOT NULL,
    budget_s REAL NOT NULL,
    status TEXT NOT NULL,
    baseline REAL,
    best_score REAL,
    improvement REAL,
    submissions INTEGER NOT NULL,
    valid_submissions INTEGER NOT NULL,
    duration_s REAL,
    tokens_in INTEGER NOT NULL,
    tokens_out INTEGER NOT NULL,
    cost_usd REAL NOT NULL,
    exit_class TEXT,
    exit_code INTEGER,
    working_time_s REAL,
    task_source TEXT,
    error TEXT,
    attempts INTEGER NOT NULL,
    config_json TEXT NOT NULL,
    started_at REAL,
    finished_at REAL
);
CREATE INDEX IF NOT EXISTS cells_by_sweep ON cells (sweep_id);
CREATE TABLE IF NOT EXISTS submissions (
    cell_id TEXT NOT NULL,
    submission_id INTEGER NOT NULL,
    model_path TEXT NOT NULL,
    status TEXT NOT NULL,
    weights_hash TEXT,
    score REAL,
    baseline_score REAL,
    improvement REAL,
    error TEXT,
    details_json TEXT NOT NULL,
    code_revision TEXT,
    submitted_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    queue_wait_s REAL,
    PRIMARY KEY (cell_id, submission_id)
);
CREATE TABLE IF NOT EXISTS code_revisions (
    cell_id TEXT NOT NULL,
    revision TEXT NOT NULL,
    created_at REAL NOT NULL,
    reason TEXT NOT NULL,
    diff TEXT NOT NULL,
    files_changed INTEGER NOT NULL,
    PRIMARY KEY (cell_id, revision)
);
CREATE TABLE IF NOT EXISTS baselines (
    key TEXT PRIMARY KEY,
    score REAL NOT NULL,
    details_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS score_cache (
    key TEXT PRIMARY KEY,
    score REAL NOT NULL,
    details_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS driver_calls (
    cell_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    started_at REAL NOT NULL,
    latency_s REAL NOT NULL,
    protocol TEXT NOT NULL,
    requested_model TEXT,
    model TEXT NOT NULL,
    status_code INTEGER NOT NULL,
    stream INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    tokens_in INTEGER,
    tokens_out INTEGER,
    cached_in INTEGER,
    cost_usd REAL,
    request_bytes INTEGER NOT NULL,
    response_bytes INTEGER NOT NULL,
    translated INTEGER NOT NULL,
    error TEXT,
    PRIMARY KEY (cell_id, call_id)
);
CREATE TABLE IF NOT EXISTS traces (
    cell_id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    events INTEGER NOT NULL,
    messages INTEGER NOT NULL,
    tool_calls INTEGER NOT NULL,
    tokens_in INTEGER NOT NULL,
    tokens_out INTEGER NOT NULL,
    unparsed_lines INTEGER NOT NULL,
    path TEXT NOT NULL
);
"""

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
_UPSERT_CALL = _upsert_sql("driver_calls", _CALL_FIELDS, ("cell_id", "call_id"))
_UPSERT_TRACE = _upsert_sql("traces", _TRACE_FIELDS, ("cell_id",))
_UPSERT_SUBMISSION = _upsert_sql("submissions", _SUBMISSION_FIELDS, ("cell_id", "submission_id"))
# A revision id is a content address, so a replay carries the same content: keep the first.
_INSERT_REVISION = (
    f"INSERT INTO code_revisions ({', '.join(_REVISION_FIELDS)}) "
    f"VALUES ({', '.join('?' for _ in _REVISION_FIELDS)}) ON CONFLICT (cell_id, revision) DO NOTHING"
)


class RecordStore:
    """The sweep's SQLite record store.

    Every write is an idempotent upsert, committed immediately. One process should write;
    others may read the same file at the same time.

    Args:
        path: The database file; created (with its parent directory) if missing.

    Raises:
        AutorlError: The file was written by a newer schema version.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A Ray actor may call in from several threads; the lock serialises use of the connection.
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False
        )
        self._conn.row_factory = sqlite3.Row
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._init_schema()
        except BaseException:
            self._conn.close()
            raise

    def _init_schema(self) -> None:
        # executescript() would commit on its own; one immediate transaction keeps a reader that
        # opens the file at the same moment from seeing half a schema.
        statements = [s.strip() for s in _SCHEMA.split(";") if s.strip()]
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in statements:
                    self._conn.execute(statement)
                row = self._conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
                version = row[0]
                if version is None:
                    self._conn.execute(
                        "INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,)
                    )
                elif version > SCHEMA_VERSION:
                    raise AutorlError(
                        f"record store {self.path} has schema version {version}, newer than this "
                        f"autorl's {SCHEMA_VERSION}; upgrade autorl to read it"
                    )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def _write(self, sql: str, params: Iterable[Any] = ()) -> int:
        with self._lock:
            return self._conn.execute(sql, tuple(params)).rowcount

    def _read(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, tuple(params)).fetchall()

    @staticmethod
    def _to_record(record_type: type[_R], row: sqlite3.Row, fields: tuple[str, ...]) -> _R:
        return record_type(**{name: row[name] for name in fields})

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

    def start_attempt(self, rec: CellRecord) -> None:
        """Store ``rec`` as a fresh attempt of its cell: the cell's earlier submissions and code
        revisions (from an interrupted or failed attempt) are removed, so a re-run never mixes
        two workspaces' results."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute("DELETE FROM submissions WHERE cell_id = ?", (rec.cell_id,))
                self._conn.execute("DELETE FROM code_revisions WHERE cell_id = ?", (rec.cell_id,))
                self._conn.execute("DELETE FROM driver_calls WHERE cell_id = ?", (rec.cell_id,))
                self._conn.execute("DELETE FROM traces WHERE cell_id = ?", (rec.cell_id,))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        self.upsert_cell(rec)

    # Submissions.

    def upsert_submission(self, rec: SubmissionRecord) -> None:
        """Insert the submission, or replace the stored one with the same
        ``(cell_id, submission_id)`` (last write wins)."""
        self._write(_UPSERT_SUBMISSION, (getattr(rec, f) for f in _SUBMISSION_FIELDS))

    def list_submissions(self, cell_id: str) -> list[SubmissionRecord]:
        """Return a cell's submissions ordered by ``submission_id``."""
        rows = self._read(
            "SELECT * FROM submissions WHERE cell_id = ? ORDER BY submission_id", (cell_id,)
        )
        return [self._to_record(SubmissionRecord, r, _SUBMISSION_FIELDS) for r in rows]

    def get_submission(self, cell_id: str, submission_id: int) -> SubmissionRecord | None:
        """Return one submission, or None if there is none."""
        rows = self._read(
            "SELECT * FROM submissions WHERE cell_id = ? AND submission_id = ?", (cell_id, submission_id)
        )
        return self._to_record(SubmissionRecord, rows[0], _SUBMISSION_FIELDS) if rows else None

    def next_submission_id(self, cell_id: str) -> int:
        """Return the id the cell's next submission should get: 1 for the first."""
        rows = self._read(
            "SELECT COALESCE(MAX(submission_id), 0) + 1 FROM submissions WHERE cell_id = ?",
            (cell_id,),
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
        """Record a code revision; a replay of an already stored ``(cell_id, revision)`` is a
        no-op."""
        self._write(_INSERT_REVISION, (getattr(rec, f) for f in _REVISION_FIELDS))

    def list_code_revisions(self, cell_id: str) -> list[CodeRevision]:
        """Return a cell's code revisions, oldest first."""
        rows = self._read(
            "SELECT * FROM code_revisions WHERE cell_id = ? ORDER BY created_at, rowid", (cell_id,)
        )
        return [self._to_record(CodeRevision, r, _REVISION_FIELDS) for r in rows]

    # Driver calls and agent traces.

    def upsert_driver_call(self, rec: DriverCall) -> None:
        """Record one driver call; a replay of the same ``(cell_id, call_id)`` replaces it."""
        self._write(_UPSERT_CALL, (getattr(rec, f) for f in _CALL_FIELDS))

    def list_driver_calls(self, cell_id: str) -> list[DriverCall]:
        """Return a cell's driver calls, oldest first."""
        rows = self._read("SELECT * FROM driver_calls WHERE cell_id = ? ORDER BY started_at, rowid", (cell_id,))
        return [self._to_record(DriverCall, r, _CALL_FIELDS) for r in rows]

    def driver_usage(self, cell_id: str) -> dict[str, Any]:
        """A cell's summed driver usage: ``{"tokens_in", "tokens_out", "cost_usd", "calls"}``."""
        row = self._read(
            "SELECT COALESCE(SUM(tokens_in), 0), COALESCE(SUM(tokens_out), 0), COALESCE(SUM(cost_usd), 0.0), COUNT(*) "
            "FROM driver_calls WHERE cell_id = ?",
            (cell_id,),
        )[0]
        return {"tokens_in": int(row[0]), "tokens_out": int(row[1]), "cost_usd": float(row[2]), "calls": int(row[3])}

    def upsert_trace(self, rec: TraceSummary) -> None:
        """Store (or replace) the summary of a cell's parsed agent trace."""
        self._write(_UPSERT_TRACE, (getattr(rec, f) for f in _TRACE_FIELDS))

    def get_trace(self, cell_id: str) -> TraceSummary | None:
        """The summary of a cell's parsed agent trace, or None."""
        rows = self._read("SELECT * FROM traces WHERE cell_id = ?", (cell_id,))
        return self._to_record(TraceSummary, rows[0], _TRACE_FIELDS) if rows else None

    def close(self) -> None:
        """Close the connection; the store cannot be used afterwards."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> RecordStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return round(value, 4)
    return value


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
            writer.writerow(RESULTS_COLUMNS)
            for cell in cells:
                writer.writerow([_csv_value(getattr(cell, c)) for c in RESULTS_COLUMNS])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return len(cells)


def summarize_submissions(subs: list[SubmissionRecord], baseline: float | None) -> dict[str, Any]:
    """Summarise a cell's submissions.

    A submission is valid when its status is one of :data:`VALID_SUBMISSION_STATUSES` and it has
    a score. The best is the highest valid score (the first one on ties).

    Args:
        subs: The cell's submissions, in submission order.
        baseline: The cell's baseline score, if known.

    Returns:
        ``{"best_score", "improvement", "submissions", "valid_submissions",
        "best_submission_id"}``; ``best_score``, ``improvement`` and ``best_submission_id`` are
        None when there is no valid submission, and ``improvement`` also when there is no
        baseline. ``improvement`` is rounded to 6 decimals.
    """
    valid = [s for s in subs if s.status in VALID_SUBMISSION_STATUSES and s.score is not None]
    best: SubmissionRecord | None = None
    best_score: float | None = None
    for sub in valid:
        # Strictly greater, so the earliest of equal scores stays best.
        if sub.score is not None and (best_score is None or sub.score > best_score):
            best, best_score = sub, sub.score
    improvement = (
        round(best_score - baseline, 6) if best_score is not None and baseline is not None else None
    )
    return {
        "best_score": best_score,
        "improvement": improvement,
        "submissions": len(subs),
        "valid_submissions": len(valid),
        "best_submission_id": best.submission_id if best is not None else None,
    }
