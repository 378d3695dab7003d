"""The record store's schema steps for what running cells send (versions 9 to 11: live trace
events and resource samples, checkpoints, resumes), kept apart from :mod:`autorl.records.migrations`
so that each module stays small. Standard library only."""

from __future__ import annotations

import sqlite3


def statements(script: str) -> list[str]:
    """The statements of a schema script, to run one by one inside the caller's transaction."""
    # executescript() would commit on its own; the caller's transaction must hold every step.
    return [s.strip() for s in script.split(";") if s.strip()]


_V9_TABLES = """
CREATE TABLE IF NOT EXISTS trace_events (
    cell_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    t REAL NOT NULL,
    kind TEXT NOT NULL,
    tool TEXT,
    text TEXT NOT NULL DEFAULT '',
    tokens_in INTEGER,
    tokens_out INTEGER,
    attempt INTEGER NOT NULL,
    PRIMARY KEY (cell_id, attempt, seq)
);
CREATE TABLE IF NOT EXISTS resource_samples (
    cell_id TEXT NOT NULL,
    t REAL NOT NULL,
    cpu_s REAL,
    cpu_fraction REAL,
    memory_bytes INTEGER,
    gpu_util REAL,
    gpu_memory_bytes INTEGER,
    attempt INTEGER NOT NULL,
    PRIMARY KEY (cell_id, attempt, t)
)
"""


def live_records(conn: sqlite3.Connection) -> None:
    """Version 9: what a running cell sends for the live viewer.

    ``trace_events`` holds the agent's normalised trace events (an excerpt of each) and
    ``resource_samples`` its processes' CPU and memory use, both filed by attempt. Earlier cells
    have none: their trace stays in ``trace.jsonl`` on the node that ran them.
    """
    for statement in statements(_V9_TABLES):
        conn.execute(statement)


_V10_TABLES = """
CREATE TABLE IF NOT EXISTS checkpoints (
    cell_id TEXT NOT NULL,
    t REAL NOT NULL,
    checkpoint_id TEXT NOT NULL DEFAULT '',
    agent_time_s REAL,
    files INTEGER NOT NULL DEFAULT 0,
    bytes_total INTEGER NOT NULL DEFAULT 0,
    bytes_new INTEGER NOT NULL DEFAULT 0,
    frozen INTEGER NOT NULL DEFAULT 0,
    frozen_s REAL NOT NULL DEFAULT 0,
    total_s REAL NOT NULL DEFAULT 0,
    error TEXT,
    attempt INTEGER NOT NULL,
    PRIMARY KEY (cell_id, attempt, t)
)
"""


def checkpoints(conn: sqlite3.Connection) -> None:
    """Version 10: the checkpoints each running cell takes (or fails to take), one row each."""
    for statement in statements(_V10_TABLES):
        conn.execute(statement)


_V11_TABLES = """
CREATE TABLE IF NOT EXISTS cell_resumes (
    cell_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    t REAL NOT NULL,
    checkpoint_id TEXT NOT NULL,
    checkpoint_t REAL NOT NULL,
    time_used_s REAL NOT NULL,
    lost_s REAL NOT NULL,
    from_node TEXT,
    to_node TEXT,
    reason TEXT NOT NULL DEFAULT '',
    attempt INTEGER NOT NULL,
    PRIMARY KEY (cell_id, attempt, seq)
)
"""


def resumes(conn: sqlite3.Connection) -> None:
    """Version 11: cells that lost their node and resumed elsewhere from a checkpoint.

    ``cell_resumes`` holds one row per resume; ``cells.node_resumes`` counts them and
    ``cells.lost_s`` adds up the wall time they lost (0 for every earlier cell).
    """
    for statement in statements(_V11_TABLES):
        conn.execute(statement)
    conn.execute("ALTER TABLE cells ADD COLUMN node_resumes INTEGER NOT NULL DEFAULT 0")
    conn.execute("ALTER TABLE cells ADD COLUMN lost_s REAL NOT NULL DEFAULT 0")
