"""Recorder actor: the single writer of the sweep's record store.

Every record of every cell travels here through Ray (never through a shared filesystem), so the
sweep directory on the driver's node receives all of them even when cells run on other nodes.
Every method is an idempotent upsert keyed by natural ids, which makes it safe to run with
``max_task_retries=-1`` (at-least-once delivery); a restarted recorder reopens the same database.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from autorl.records.store import (
    CellRecord,
    CodeRevision,
    RecordStore,
    SubmissionRecord,
    summarize_submissions,
    write_results_csv,
)

logger = logging.getLogger(__name__)


class Recorder:
    """Owns ``records.sqlite`` of one sweep; wrapped with ``ray.remote`` by the scheduler."""

    def __init__(self, db_path: str) -> None:
        """Open (or create) the record store at ``db_path``."""
        self.db_path = Path(db_path)
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        self.store = RecordStore(self.db_path)

    def upsert_cell(self, record: CellRecord) -> None:
        """Create or replace a cell's record."""
        self.store.upsert_cell(record)

    def start_attempt(self, record: CellRecord) -> None:
        """Register a new attempt of a cell, dropping an earlier attempt's submissions."""
        self.store.start_attempt(record)

    def set_cell_status(self, cell_id: str, status: str, fields: dict[str, Any] | None = None) -> None:
        """Update a cell's status and any of its fields."""
        self.store.set_cell_status(cell_id, status, **(fields or {}))

    def get_cell(self, cell_id: str) -> CellRecord | None:
        """One cell's record, or None."""
        return self.store.get_cell(cell_id)

    def list_cells(self, sweep_id: str) -> list[CellRecord]:
        """Every cell of ``sweep_id``."""
        return self.store.list_cells(sweep_id)

    def record_submission(self, record: SubmissionRecord) -> None:
        """Create or replace one submission and refresh its cell's running summary."""
        self.store.upsert_submission(record)
        cell = self.store.get_cell(record.cell_id)
        if cell is None:
            return
        summary = summarize_submissions(self.store.list_submissions(record.cell_id), cell.baseline)
        summary.pop("best_submission_id", None)
        self.store.upsert_cell(dataclasses.replace(cell, **summary))

    def next_submission_id(self, cell_id: str) -> int:
        """The next free submission id of a cell (1-based)."""
        return self.store.next_submission_id(cell_id)

    def list_submissions(self, cell_id: str) -> list[SubmissionRecord]:
        """A cell's submissions in order."""
        return self.store.list_submissions(cell_id)

    def add_code_revision(self, revision: CodeRevision) -> None:
        """Store one code revision of a cell's ``code/``."""
        self.store.add_code_revision(revision)

    def get_baseline(self, key: str) -> float | None:
        """A cached baseline score."""
        return self.store.get_baseline(key)

    def put_baseline(self, key: str, score: float, details_json: str) -> None:
        """Cache a baseline score (only successful baselines are ever stored)."""
        self.store.put_baseline(key, score, details_json)

    def get_cached_score(self, key: str) -> tuple[float, str] | None:
        """A cached submission score by (task key, weights hash)."""
        return self.store.get_cached_score(key)

    def put_cached_score(self, key: str, score: float, details_json: str) -> None:
        """Cache a submission score by (task key, weights hash)."""
        self.store.put_cached_score(key, score, details_json)

    def write_results(self, sweep_id: str, path: str) -> int:
        """Rewrite ``results.csv`` of the sweep from the store; returns the row count."""
        return write_results_csv(self.store, sweep_id, Path(path))

    def ping(self) -> bool:
        """Liveness check."""
        return True
