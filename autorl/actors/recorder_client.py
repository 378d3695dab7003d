"""The typed client of the Recorder actor: the one place that calls its methods through Ray.

Ray types an actor handle's methods as the plain methods, without their ``.remote`` (only methods
decorated with ``@ray.method`` get typed remote calls), so a bare ``recorder.X.remote(...)`` is
``Any`` in and out. :class:`RecorderClient` gives each :class:`~autorl.actors.recorder.Recorder`
method a typed counterpart (blocking, plus ``async`` ones for the async GraderPool and a
fire-and-forget one for driver calls). Every other module holds a ``RecorderClient``;
``tests/unit/test_recorder_client.py`` fails on a call to the handle anywhere else under
``autorl/``.

The client is plain data around the handle, so it travels to other actors as an argument.
"""

from __future__ import annotations

from typing import Any

import ray
from ray.actor import ActorHandle

from autorl.records.live_types import CheckpointRecord, ResourceSample, TraceEvent
from autorl.records.resumes import ResumeEvent
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


class RecorderClient:
    """Typed, blocking calls to one Recorder actor (see the module docstring)."""

    def __init__(self, handle: ActorHandle[Any]) -> None:
        """Wrap ``handle``, a Recorder actor (``ray.remote(Recorder)...remote(...)``)."""
        # Any: the handle's attributes are Ray's method wrappers, whose .remote mypy cannot see.
        self._handle: Any = handle

    @classmethod
    def of(cls, recorder: RecorderClient | ActorHandle[Any]) -> RecorderClient:
        """``recorder`` itself when it is a client, else a client of the handle (tests pass
        handles)."""
        return recorder if isinstance(recorder, RecorderClient) else cls(recorder)

    @property
    def handle(self) -> ActorHandle[Any]:
        """The Recorder actor's handle (to kill it or pass it on)."""
        handle: ActorHandle[Any] = self._handle
        return handle

    # Cells and attempts.

    def upsert_cell(self, record: CellRecord) -> None:
        """Create or replace a cell's record."""
        ray.get(self._handle.upsert_cell.remote(record))

    def start_attempt(self, record: CellRecord) -> int:
        """Start attempt ``record.attempts`` of a cell; returns the cell's attempt number."""
        return int(ray.get(self._handle.start_attempt.remote(record)))

    def set_attempt(
        self, cell_id: str, attempt: int, status: str, fields: dict[str, Any] | None = None
    ) -> None:
        """Record how one attempt of a cell went (status, error, node, times)."""
        ray.get(self._handle.set_attempt.remote(cell_id, attempt, status, fields))

    def list_attempts(self, cell_id: str) -> list[CellAttempt]:
        """Every attempt of a cell, first first."""
        attempts: list[CellAttempt] = ray.get(self._handle.list_attempts.remote(cell_id))
        return attempts

    def set_cell_status(
        self, cell_id: str, status: str, fields: dict[str, Any] | None = None
    ) -> None:
        """Update a cell's status and any of its :class:`CellRecord` fields."""
        ray.get(self._handle.set_cell_status.remote(cell_id, status, fields or {}))

    def complete_cell(self, cell_id: str, outcome: CellOutcome, finished_at: float) -> None:
        """Mark a cell completed with the outcome its Workspace actor returned."""
        ray.get(self._handle.complete_cell.remote(cell_id, outcome, finished_at))

    def get_cell(self, cell_id: str) -> CellRecord | None:
        """One cell's record, or None."""
        cell: CellRecord | None = ray.get(self._handle.get_cell.remote(cell_id))
        return cell

    def list_cells(self, sweep_id: str) -> list[CellRecord]:
        """Every cell of ``sweep_id``."""
        cells: list[CellRecord] = ray.get(self._handle.list_cells.remote(sweep_id))
        return cells

    # What a running cell records.

    def record_submission(self, record: SubmissionRecord) -> None:
        """Create or replace one submission (its cell's summary follows)."""
        ray.get(self._handle.record_submission.remote(record))

    def next_submission_id(self, cell_id: str) -> int:
        """The next free submission id of a cell (1-based)."""
        return int(ray.get(self._handle.next_submission_id.remote(cell_id)))

    def list_submissions(self, cell_id: str, attempt: int | None = None) -> list[SubmissionRecord]:
        """One attempt's submissions in order (the cell's current attempt by default)."""
        records: list[SubmissionRecord] = ray.get(
            self._handle.list_submissions.remote(cell_id, attempt)
        )
        return records

    def add_code_revision(self, revision: CodeRevision) -> None:
        """Store one code revision of a cell's ``code/``."""
        ray.get(self._handle.add_code_revision.remote(revision))

    def list_code_revisions(self, cell_id: str, attempt: int | None = None) -> list[CodeRevision]:
        """One attempt's code revisions, oldest first (the current attempt by default)."""
        revisions: list[CodeRevision] = ray.get(
            self._handle.list_code_revisions.remote(cell_id, attempt)
        )
        return revisions

    def send_driver_calls(self, calls: list[DriverCall]) -> ray.ObjectRef[None]:
        """Send driver calls without waiting; ``ray.get`` the returned ref to know them stored."""
        ref: ray.ObjectRef[None] = self._handle.record_driver_calls.remote(calls)
        return ref

    def record_driver_calls(self, calls: list[DriverCall]) -> None:
        """Store driver calls (blocking until stored)."""
        ray.get(self.send_driver_calls(calls))

    def record_trace(self, summary: TraceSummary) -> None:
        """Store the summary of a cell's parsed agent trace."""
        ray.get(self._handle.record_trace.remote(summary))

    def record_trace_events(self, events: list[TraceEvent], timeout_s: float | None = None) -> None:
        """Store a running cell's newest trace events.

        Raises:
            ray.exceptions.GetTimeoutError: The Recorder did not answer within ``timeout_s``.
        """
        ray.get(self._handle.record_trace_events.remote(events), timeout=timeout_s)

    def record_resource_samples(
        self, samples: list[ResourceSample], timeout_s: float | None = None
    ) -> None:
        """Store a running cell's newest resource samples.

        Raises:
            ray.exceptions.GetTimeoutError: The Recorder did not answer within ``timeout_s``.
        """
        ray.get(self._handle.record_resource_samples.remote(samples), timeout=timeout_s)

    def record_checkpoint(self, record: CheckpointRecord) -> None:
        """Store a running cell's checkpoint (or the error of one that failed)."""
        ray.get(self._handle.record_checkpoint.remote(record))

    def list_checkpoints(self, cell_id: str) -> list[CheckpointRecord]:
        """The current attempt's checkpoints, oldest first."""
        return list(ray.get(self._handle.list_checkpoints.remote(cell_id)))

    def record_resume(self, event: ResumeEvent, interrupted_error: str) -> list[int]:
        """Store a resume event; what the lost node was scoring becomes ``interrupted``."""
        return list(ray.get(self._handle.record_resume.remote(event, interrupted_error)))

    def list_resumes(self, cell_id: str) -> list[ResumeEvent]:
        """The current attempt's resume events."""
        return list(ray.get(self._handle.list_resumes.remote(cell_id)))

    def last_trace_seq(self, cell_id: str) -> int:
        """The largest trace-event number stored for the current attempt."""
        return int(ray.get(self._handle.last_trace_seq.remote(cell_id)))

    def driver_usage(self, cell_id: str) -> DriverUsage | None:
        """The current attempt's driver usage over every driver call it recorded."""
        usage: DriverUsage | None = ray.get(self._handle.driver_usage.remote(cell_id))
        return usage

    # The score caches, from the async GraderPool: awaited, never blocking its event loop.

    async def get_baseline(self, key: str) -> float | None:
        """A cached baseline score."""
        score: float | None = await self._handle.get_baseline.remote(key)
        return score

    async def put_baseline(self, key: str, score: float, details_json: str) -> None:
        """Cache a baseline score (only successful baselines are ever stored)."""
        await self._handle.put_baseline.remote(key, score, details_json)

    async def get_cached_score(self, key: str) -> tuple[float, str] | None:
        """A cached submission score by (task key, weights hash)."""
        cached: tuple[float, str] | None = await self._handle.get_cached_score.remote(key)
        return cached

    async def put_cached_score(self, key: str, score: float, details_json: str) -> None:
        """Cache a submission score by (task key, weights hash)."""
        await self._handle.put_cached_score.remote(key, score, details_json)

    # The sweep.

    def put_sweep_stat(self, sweep_id: str, run: str, name: str, value: dict[str, Any]) -> None:
        """Store a sweep-level measurement of one run."""
        ray.get(self._handle.put_sweep_stat.remote(sweep_id, run, name, value))

    def list_sweep_stats(self, name: str | None = None) -> list[SweepStat]:
        """Every stored sweep-level measurement (of ``name`` only, when given)."""
        stats: list[SweepStat] = ray.get(self._handle.list_sweep_stats.remote(name))
        return stats

    def write_results(self, sweep_id: str, path: str) -> int:
        """Rewrite ``results.csv`` of the sweep from the store; returns the row count."""
        return int(ray.get(self._handle.write_results.remote(sweep_id, path)))

    def finish_sweep(self, sweep_id: str, timeout_s: float | None = None) -> bool:
        """Close the sweep's W&B runs and write its comparison table; True when all reached W&B.

        Raises:
            ray.exceptions.GetTimeoutError: The Recorder did not answer within ``timeout_s``.
        """
        return bool(ray.get(self._handle.finish_sweep.remote(sweep_id), timeout=timeout_s))

    def ping(self, timeout_s: float | None = None) -> bool:
        """Liveness check."""
        return bool(ray.get(self._handle.ping.remote(), timeout=timeout_s))
