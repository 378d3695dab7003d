"""Recorder actor: the single writer of the sweep's record store.

Every record of every cell travels here through Ray (never through a shared filesystem), so the
sweep directory on the driver's node receives all of them even when cells run on other nodes.
Every method is an idempotent upsert keyed by natural ids, which makes it safe to run with
``max_task_retries=-1`` (at-least-once delivery); a restarted recorder reopens the same database.
Records are filed under their cell's current attempt (the store stamps it), so a retried cell keeps
its earlier attempts' records and the cell's summary counts only the current one.

Callers reach it through :class:`autorl.actors.recorder_client.RecorderClient`, never its handle.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from autorl.records.live_types import CheckpointRecord, ResourceSample, TraceEvent
from autorl.records.migrations import autorl_version
from autorl.records.results import summarize_cell, write_results_csv
from autorl.records.resumes import ResumeEvent
from autorl.records.store import RecordStore
from autorl.records.types import (
    CellAttempt,
    CellOutcome,
    CellRecord,
    CodeRevision,
    DriverCall,
    DriverUsage,
    SubmissionRecord,
    SweepStat,
    TraceSummary,
)
from autorl.tracking import metrics as dashboard
from autorl.tracking.wandb_runs import WandbTracker

logger = logging.getLogger(__name__)


class Recorder:
    """Owns ``records.sqlite`` of one sweep; wrapped with ``ray.remote`` by the scheduler."""

    def __init__(self, db_path: str, tracking: dict[str, Any] | None = None) -> None:
        """Open (or create) the record store at ``db_path``; ``tracking`` is the ``tracking`` config
        block (W&B off when None)."""
        self.db_path = Path(db_path)
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        # Opening migrates a store written by an older autorl (a resumed sweep) to this schema.
        self.store = RecordStore(self.db_path)
        if self.store.migrated_from:
            logger.warning(
                "record store %s migrated from schema version %d to %d (%s) by autorl %s; an "
                "autorl that knows "
                "only version %d can no longer open it",
                self.db_path,
                self.store.migrated_from,
                self.store.schema_version,
                ", ".join(self.store.migrations_applied),
                autorl_version(),
                self.store.migrated_from,
            )
        wandb_cfg = tracking["wandb"] if tracking else {"enabled": False}
        self.tracker = WandbTracker(wandb_cfg, self.db_path.parent)
        dashboard.set_cell_counts(self.store.list_cells())

    def upsert_cell(self, record: CellRecord) -> None:
        """Create or replace a cell's record."""
        self.store.upsert_cell(record)
        dashboard.set_cell_counts(self.store.list_cells())

    def start_attempt(self, record: CellRecord) -> int:
        """Start attempt ``record.attempts`` of a cell (earlier attempts' records are kept under
        their numbers; a replay changes nothing); returns the cell's attempt number."""
        before = self.store.get_cell(record.cell_id)
        attempt = self.store.start_attempt(record)
        if before is None or before.attempts < attempt:
            self.tracker.new_attempt(record.cell_id)
        dashboard.set_cell_counts(self.store.list_cells())
        return attempt

    def set_attempt(
        self, cell_id: str, attempt: int, status: str, fields: dict[str, Any] | None = None
    ) -> None:
        """Record how one attempt of a cell went (status, error, node, times)."""
        self.store.set_attempt(cell_id, attempt, status, **(fields or {}))

    def list_attempts(self, cell_id: str) -> list[CellAttempt]:
        """Every attempt of a cell, first first."""
        return self.store.list_attempts(cell_id)

    def put_sweep_stat(self, sweep_id: str, run: str, name: str, value: dict[str, Any]) -> None:
        """Store a sweep-level measurement (e.g. the grader pool's busy fractions) of one run."""
        self.store.put_sweep_stat(sweep_id, run, name, value)

    def list_sweep_stats(self, name: str | None = None) -> list[SweepStat]:
        """Every stored sweep-level measurement (of ``name`` only, when given)."""
        return self.store.list_sweep_stats(name)

    def set_cell_status(
        self, cell_id: str, status: str, fields: dict[str, Any] | None = None
    ) -> None:
        """Update a cell's status and any of its fields."""
        self.store.set_cell_status(cell_id, status, **(fields or {}))
        dashboard.set_cell_counts(self.store.list_cells())
        cell = self.store.get_cell(cell_id)
        if cell is not None:
            self.tracker.cell_status(cell)

    def complete_cell(self, cell_id: str, outcome: CellOutcome, finished_at: float) -> None:
        """Mark a cell completed with its run's outcome (and no error)."""
        self.set_cell_status(
            cell_id, "completed", outcome.fields() | {"finished_at": finished_at, "error": None}
        )

    def get_cell(self, cell_id: str) -> CellRecord | None:
        """One cell's record, or None."""
        return self.store.get_cell(cell_id)

    def list_cells(self, sweep_id: str) -> list[CellRecord]:
        """Every cell of ``sweep_id``."""
        return self.store.list_cells(sweep_id)

    def record_submission(self, record: SubmissionRecord) -> None:
        """Create or replace one submission and refresh its cell's running summary."""
        previous = self.store.get_submission(record.cell_id, record.submission_id)
        self.store.upsert_submission(record)
        cell = self.store.get_cell(record.cell_id)
        if cell is None:
            return
        if previous is None or previous.status != record.status:
            dashboard.count_submission(cell, record.status)
            self.tracker.submission(cell, record)
        summary = summarize_cell(cell, self.store.list_submissions(record.cell_id))
        summary.pop("best_submission_id", None)
        self.store.upsert_cell(dataclasses.replace(cell, **summary))

    def next_submission_id(self, cell_id: str) -> int:
        """The next free submission id of a cell (1-based)."""
        return self.store.next_submission_id(cell_id)

    def list_submissions(self, cell_id: str, attempt: int | None = None) -> list[SubmissionRecord]:
        """One attempt's submissions in order (the cell's current attempt by default)."""
        return self.store.list_submissions(cell_id, attempt)

    def add_code_revision(self, revision: CodeRevision) -> None:
        """Store one code revision of a cell's ``code/``."""
        self.store.add_code_revision(revision)

    def list_code_revisions(self, cell_id: str, attempt: int | None = None) -> list[CodeRevision]:
        """One attempt's code revisions, oldest first (the current attempt by default; the
        integrity judge reads them)."""
        return self.store.list_code_revisions(cell_id, attempt)

    def record_driver_calls(self, calls: list[DriverCall]) -> None:
        """Store driver calls (from a cell's gateway) and refresh the cells' token and cost sums."""
        for call in calls:
            self.store.upsert_driver_call(call)
        for cell_id in {call.cell_id for call in calls}:
            cell = self.store.get_cell(cell_id)
            if cell is None:
                continue
            usage = self.store.driver_usage(cell_id)
            self.store.set_cell_status(
                cell_id,
                cell.status,
                tokens_in=usage["tokens_in"],
                tokens_out=usage["tokens_out"],
                cost_usd=usage["cost_usd"],
            )

    def record_trace(self, summary: TraceSummary) -> None:
        """Store the summary of a cell's parsed agent trace (trace-side token counts)."""
        self.store.upsert_trace(summary)

    def record_trace_events(self, events: list[TraceEvent]) -> None:
        """Store a running cell's newest trace events (the live viewer's steps)."""
        self.store.add_trace_events(events)

    def record_resource_samples(self, samples: list[ResourceSample]) -> None:
        """Store a running cell's newest resource samples."""
        self.store.add_resource_samples(samples)

    def record_checkpoint(self, record: CheckpointRecord) -> None:
        """Store a running cell's checkpoint (or the error of one that failed)."""
        self.store.add_checkpoint(record)

    def list_checkpoints(self, cell_id: str) -> list[CheckpointRecord]:
        """The current attempt's checkpoints, oldest first."""
        return self.store.list_checkpoints(cell_id)

    def record_resume(self, event: ResumeEvent, interrupted_error: str) -> list[int]:
        """Store a resume event and mark what the lost node was scoring ``interrupted``; returns
        the ids of those submissions."""
        self.store.add_resume(event)
        ids = self.store.interrupt_submissions(event.cell_id, interrupted_error)
        cell = self.store.get_cell(event.cell_id)
        if cell is not None and ids:
            summary = summarize_cell(cell, self.store.list_submissions(event.cell_id))
            summary.pop("best_submission_id", None)
            self.store.upsert_cell(dataclasses.replace(cell, **summary))
        return ids

    def list_resumes(self, cell_id: str) -> list[ResumeEvent]:
        """The current attempt's resume events, first first."""
        return self.store.list_resumes(cell_id)

    def last_trace_seq(self, cell_id: str) -> int:
        """The largest trace-event number stored for the current attempt."""
        return self.store.last_trace_seq(cell_id)

    def driver_usage(self, cell_id: str) -> DriverUsage | None:
        """The current attempt's driver usage over every driver call it recorded."""
        totals = self.store.driver_usage_totals(cell_id)
        return None if totals is None else DriverUsage(*totals)

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

    def finish_sweep(self, sweep_id: str) -> bool:
        """Close the sweep's W&B runs and write its comparison table (bounded wait; never
        raises)."""
        return self.tracker.finish_sweep(sweep_id, self.store.list_cells(sweep_id))

    def ping(self) -> bool:
        """Liveness check."""
        return True
