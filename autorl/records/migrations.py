"""Schema versions of the record store and the ordered migrations between them.

A store's version is the number in its one-row ``schema_version`` table. That is where every
autorl since the first walking skeleton wrote it (always ``1``), and every one of them reads
``MAX(version)`` on open and refuses a larger number ("upgrade autorl"). Keeping the number there,
rather than in ``PRAGMA user_version``, means an older autorl pointed at a store this code has
migrated refuses it with that message instead of writing rows into a schema it does not know.

:data:`MIGRATIONS` lists one step per version, oldest first; step ``N`` takes a store from version
``N - 1`` to ``N``. :func:`migrate` applies the missing steps in one ``BEGIN IMMEDIATE``
transaction, so a crash or a concurrent opener never sees a half-migrated store. A file with no
``schema_version`` table is version 0; step 1 only uses ``CREATE ... IF NOT EXISTS``, so it also
completes an unversioned store that already has some of the tables.

Adding a version: append a :class:`Migration` whose function makes the change (``ALTER TABLE ...
ADD COLUMN``, ``CREATE TABLE``), add the matching field to the record type in
:mod:`autorl.records.types`, and never edit a step that has shipped: stores in the wild went
through it as it was. Standard library only.
"""

from __future__ import annotations

import functools
import sqlite3
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autorl.errors import AutorlError
from autorl.records.migrations_live import checkpoints, live_records, resumes
from autorl.records.migrations_live import statements as _statements


class SchemaTooNewError(AutorlError):
    """The store was written by a newer autorl, whose schema this code does not know."""


@dataclass(frozen=True)
class Migration:
    """One step of the schema, from ``version - 1`` to ``version``.

    Attributes:
        version: The version the store has after this step.
        name: A short, stable name (recorded in ``schema_migrations``).
        apply: Makes the change on a connection inside the caller's transaction; must not commit.
    """

    version: int
    name: str
    apply: Callable[[sqlite3.Connection], None]


# Version 1: the schema of the first autorl releases, which wrote no migration log. Frozen: a later
# change is a new step, never an edit here.
_V1_TABLES = """
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
"""

# Tables that came without a version bump: some stores stamped version 1 lack them.
_V1_LATE_TABLES = """
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


def _initial(conn: sqlite3.Connection) -> None:
    """Version 1: cells, submissions, code revisions, baselines, score cache (and the version)."""
    for statement in _statements(_V1_TABLES):
        conn.execute(statement)


def _v1_late_tables(conn: sqlite3.Connection) -> None:
    """Version 2: the driver-call and trace tables that early version-1 stores lack."""
    for statement in _statements(_V1_LATE_TABLES):
        conn.execute(statement)


def _cell_autorl_version(conn: sqlite3.Connection) -> None:
    """Version 3: which autorl registered each cell, and a log of the migrations applied.

    A resumed sweep can mix cells run by two autorl versions; ``cells.autorl_version`` tells them
    apart (NULL for cells registered before this version). ``schema_migrations`` says which
    autorl upgraded the store and when.
    """
    conn.execute("ALTER TABLE cells ADD COLUMN autorl_version TEXT")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL, autorl_version "
        "TEXT NOT NULL)"
    )


def _cell_sandbox(conn: sqlite3.Connection) -> None:
    """Version 4: how each cell's agent was sealed, which limit ended it, how often it was resumed.

    ``cells.sandbox`` is ``bwrap``, ``bwrap+host-network`` or ``none`` (NULL for cells run before
    sealing existed, which ran unsealed); ``cells.limit_hit`` is ``memory`` or ``pids`` when the
    cell's cgroup hit that limit; ``cells.resumes`` counts continuation prompts
    (``agent.reprompt``).
    """
    conn.execute("ALTER TABLE cells ADD COLUMN sandbox TEXT")
    conn.execute("ALTER TABLE cells ADD COLUMN limit_hit TEXT")
    conn.execute("ALTER TABLE cells ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0")


def _integrity(conn: sqlite3.Connection) -> None:
    """Version 5: integrity checks (docs/design.md#the-grading-api).

    ``submissions.flags`` (``model_mismatch``) and ``submissions.weight_distance`` (relative
    distance to the base weights); ``cells.flagged_submissions``, ``cells.weight_distance`` (the
    best submission's), ``cells.contamination`` (fraction of eval items seen in the
    agent's files), ``cells.integrity_flags`` and ``cells.integrity_json`` (the checks' details).
    """
    conn.execute("ALTER TABLE submissions ADD COLUMN flags TEXT")
    conn.execute("ALTER TABLE submissions ADD COLUMN weight_distance REAL")
    conn.execute("ALTER TABLE cells ADD COLUMN flagged_submissions INTEGER NOT NULL DEFAULT 0")
    conn.execute("ALTER TABLE cells ADD COLUMN weight_distance REAL")
    conn.execute("ALTER TABLE cells ADD COLUMN contamination REAL")
    conn.execute("ALTER TABLE cells ADD COLUMN integrity_flags TEXT")
    conn.execute("ALTER TABLE cells ADD COLUMN integrity_json TEXT NOT NULL DEFAULT '{}'")


# Version 6: every table of a cell's records gets the attempt that wrote them. SQLite cannot change
# a primary key in place, so each table is rebuilt (same columns, then ``attempt``) and its rows
# copied, filed under their cell's attempt number at the time (earlier attempts were deleted then).
_V6_REBUILT = {
    "submissions": """
CREATE TABLE submissions_v6 (
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
    flags TEXT,
    weight_distance REAL,
    attempt INTEGER NOT NULL,
    PRIMARY KEY (cell_id, attempt, submission_id)
)""",
    "code_revisions": """
CREATE TABLE code_revisions_v6 (
    cell_id TEXT NOT NULL,
    revision TEXT NOT NULL,
    created_at REAL NOT NULL,
    reason TEXT NOT NULL,
    diff TEXT NOT NULL,
    files_changed INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    PRIMARY KEY (cell_id, attempt, revision)
)""",
    "driver_calls": """
CREATE TABLE driver_calls_v6 (
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
    attempt INTEGER NOT NULL,
    PRIMARY KEY (cell_id, attempt, call_id)
)""",
    "traces": """
CREATE TABLE traces_v6 (
    cell_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    events INTEGER NOT NULL,
    messages INTEGER NOT NULL,
    tool_calls INTEGER NOT NULL,
    tokens_in INTEGER NOT NULL,
    tokens_out INTEGER NOT NULL,
    unparsed_lines INTEGER NOT NULL,
    path TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    PRIMARY KEY (cell_id, attempt)
)""",
}
_V6_NEW_TABLES = """
CREATE TABLE IF NOT EXISTS cell_attempts (
    cell_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    node_id TEXT,
    started_at REAL,
    finished_at REAL,
    PRIMARY KEY (cell_id, attempt)
);
CREATE TABLE IF NOT EXISTS sweep_stats (
    sweep_id TEXT NOT NULL,
    run TEXT NOT NULL,
    name TEXT NOT NULL,
    value_json TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (sweep_id, run, name)
)
"""


def _attempts(conn: sqlite3.Connection) -> None:
    """Version 6: a retried cell keeps every attempt's records (issue #13).

    ``submissions``, ``code_revisions``, ``driver_calls`` and ``traces`` get ``attempt`` (part of
    their primary key, so attempt 2 may have its own submission 1). Existing rows are filed under
    their cell's attempt number (at least 1): before this version a new attempt deleted the
    earlier one's rows, so every row left belongs to that attempt. ``cell_attempts`` lists each
    attempt of a cell with how it ended (one row per cell that ran, from the cell's own fields);
    ``sweep_stats`` holds sweep-level measurements such as the graders' busy fractions.
    """
    current = "COALESCE((SELECT MAX(c.attempts, 1) FROM cells c WHERE c.cell_id = t.cell_id), 1)"
    for table, create in _V6_REBUILT.items():
        conn.execute(create)
        conn.execute(f"INSERT INTO {table}_v6 SELECT t.*, {current} FROM {table} t")
        conn.execute(f"DROP TABLE {table}")
        conn.execute(f"ALTER TABLE {table}_v6 RENAME TO {table}")
    for statement in _statements(_V6_NEW_TABLES):
        conn.execute(statement)
    conn.execute(
        "INSERT INTO cell_attempts (cell_id, attempt, status, error, started_at, finished_at) "
        "SELECT cell_id, attempts, status, error, started_at, finished_at FROM cells WHERE "
        "attempts >= 1"
    )


def _feedback(conn: sqlite3.Connection) -> None:
    """Version 7: a held-out test split (``grading.feedback``, docs/design.md#the-grading-api).

    ``submissions.test_score`` is a submission's test score; every earlier submission was scored
    on the test split only, so it is its ``score``. ``cells.feedback`` (``test`` or ``dev``; NULL:
    test), ``cells.feedback_baseline`` (the base model on the feedback split),
    ``cells.best_feedback_score`` (the best's feedback score) and ``cells.best_on_test`` (the
    highest test score of any counting submission) are filled in for earlier cells as what test
    feedback gave: the feedback split was the test split.
    """
    conn.execute("ALTER TABLE submissions ADD COLUMN test_score REAL")
    conn.execute("UPDATE submissions SET test_score = score")
    for column in (
        "feedback TEXT",
        "feedback_baseline REAL",
        "best_feedback_score REAL",
        "best_on_test REAL",
    ):
        conn.execute(f"ALTER TABLE cells ADD COLUMN {column}")
    conn.execute(
        "UPDATE cells SET feedback = 'test', feedback_baseline = baseline, best_feedback_score = "
        "best_score, "
        "best_on_test = best_score"
    )


def _model_build(conn: sqlite3.Connection) -> None:
    """Version 8: ``cells.model_build``, the build of the base model a cell ran on.

    Earlier cells get the builds of their time, read from their config: ``tiny-b1`` (tiny's only
    build so far), ``small-b2`` (small's build before its tokenizer trained on rendered prompts),
    a hub model's id; NULL where the config does not name the model's kind.
    """
    conn.execute("ALTER TABLE cells ADD COLUMN model_build TEXT")
    conn.execute(
        "UPDATE cells SET model_build = CASE json_extract(config_json, '$.model.kind') "
        "WHEN 'tiny' THEN 'tiny-b1' WHEN 'small' THEN 'small-b2' "
        "ELSE json_extract(config_json, '$.model.hub_id') END "
        "WHERE json_valid(config_json)"
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial", _initial),
    Migration(2, "v1_late_tables", _v1_late_tables),
    Migration(3, "cell_autorl_version", _cell_autorl_version),
    Migration(4, "cell_sandbox", _cell_sandbox),
    Migration(5, "integrity", _integrity),
    Migration(6, "attempts", _attempts),
    Migration(7, "feedback", _feedback),
    Migration(8, "model_build", _model_build),
    Migration(9, "live_records", live_records),
    Migration(10, "checkpoints", checkpoints),
    Migration(11, "resumes", resumes),
)
SCHEMA_VERSION: int = MIGRATIONS[-1].version


@functools.cache
def autorl_version() -> str:
    """This autorl's version: the package version, plus the git commit of a source checkout.

    ``0.1.0+g0a310a8`` (``.dirty`` appended with uncommitted changes) when autorl runs from a git
    work tree, else ``0.1.0``. Computed once per process.
    """
    import autorl

    version = autorl.__version__
    root = Path(autorl.__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return version
    try:
        described = subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "describe",
                "--always",
                "--dirty=.dirty",
                "--abbrev=7",
                "--exclude=*",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return (
            version  # no git, or not a repository after all: the package version still says a lot
        )
    return f"{version}+g{described}" if described else version


def stored_version(conn: sqlite3.Connection) -> int:
    """The store's schema version; 0 for a file without a ``schema_version`` table or row."""
    if not conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone():
        return 0
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def check_not_newer(version: int, path: Path) -> None:
    """Refuse a store whose schema is newer than this code's.

    Raises:
        SchemaTooNewError: naming both versions and what to do.
    """
    if version > SCHEMA_VERSION:
        raise SchemaTooNewError(
            f"record store {path} has schema version {version}, but this autorl "
            f"({autorl_version()}) knows "
            f"schema versions up to {SCHEMA_VERSION}: a newer autorl wrote it. Upgrade autorl "
            "(update this "
            "checkout or install a newer release) to resume or report this sweep; this one cannot "
            "read it safely."
        )


def migrate(conn: sqlite3.Connection, path: Path) -> tuple[int, list[Migration]]:
    """Bring the store on ``conn`` to :data:`SCHEMA_VERSION` in one transaction.

    Cheap when the store is current: the version is read without taking the write lock. The
    connection must be in autocommit mode (``isolation_level=None``).

    Args:
        conn: An open, writable connection to the store.
        path: The store's file, for messages.

    Returns:
        ``(version before, steps applied)``; no steps when the store was current.

    Raises:
        SchemaTooNewError: The store is newer than this code (nothing is changed).
        AutorlError: A step failed on the file (not an autorl store, or damaged); nothing is
            changed.
    """
    before = stored_version(conn)
    check_not_newer(before, path)
    if before == SCHEMA_VERSION:
        return before, []
    by = autorl_version()  # may run git: not while holding the write lock
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have migrated it between the read above and taking the lock.
        before = stored_version(conn)
        check_not_newer(before, path)
        steps = [m for m in MIGRATIONS if m.version > before]
        for step in steps:
            try:
                step.apply(conn)
            except sqlite3.Error as error:
                raise AutorlError(
                    f"cannot migrate record store {path} from schema version {before} to "
                    f"{SCHEMA_VERSION}: step "
                    f"{step.version} ({step.name}) failed: {error}. Nothing was changed. Is it a "
                    "records.sqlite "
                    "written by autorl?"
                ) from error
        conn.execute("DELETE FROM schema_version")
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        now = time.time()
        conn.executemany(
            "INSERT OR REPLACE INTO schema_migrations (version, name, applied_at, autorl_version) "
            "VALUES (?, ?, ?, ?)",
            [(m.version, m.name, now, by) for m in steps],
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return before, steps
