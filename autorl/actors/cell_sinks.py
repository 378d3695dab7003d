"""What a cell's Workspace actor hands the shared services: its records to the Recorder
(:class:`RecorderSink`) and its submissions to the GraderPool (:func:`pool_scorer`)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import ray

from autorl.actors.recorder_client import RecorderClient
from autorl.grading.scoring import EvalTarget, ScoreOutcome
from autorl.grading.service import Scorer
from autorl.grading.transfer import ModelPublisher, ModelRef
from autorl.records.types import DriverCall, SubmissionRecord, TraceSummary


class RecorderSink:
    """The cell's records to the Recorder actor: the sink of the submission service
    (:class:`autorl.grading.service.RecordSink`) and of the driver session
    (:class:`autorl.agents.session.SessionSink`)."""

    def __init__(self, recorder: RecorderClient) -> None:
        self.recorder = recorder
        self._pending: list[ray.ObjectRef[None]] = []  # driver calls sent, not yet known stored
        self._lock = threading.Lock()

    def record_submission(self, record: SubmissionRecord) -> None:
        """Store a submission record (blocking until stored)."""
        self.recorder.record_submission(record)

    def record_trace(self, summary: TraceSummary) -> None:
        """Store the trace summary (blocking until stored)."""
        self.recorder.record_trace(summary)

    def record_driver_call(self, call: DriverCall) -> None:
        """Send a driver call without waiting (called on the gateway's thread)."""
        ref = self.recorder.send_driver_calls([call])
        with self._lock:
            self._pending.append(ref)

    def flush(self) -> None:
        """Wait until every driver call sent so far is stored."""
        with self._lock:
            refs, self._pending = self._pending, []
        ray.get(refs)


def pool_scorer(pool: Any, target: EvalTarget, publisher: ModelPublisher, base: ModelRef) -> Scorer:
    """The cell's scorer: each submission snapshot goes to the GraderPool as a :class:`ModelRef`.

    ``base`` is the cell's base model, which a LoRA adapter is always applied to. The snapshot must
    outlive the call, since a grader on another node reads it from here while scoring; it does:
    :meth:`SubmissionService._score` deletes it only after the scorer returns.
    """

    def scorer(model_dir: Path, digest: str) -> tuple[ScoreOutcome, bool]:
        with publisher.submission(model_dir, digest) as ref:
            outcome, cached = ray.get(pool.score.remote(target, ref, digest, base_dir=base))
        return outcome, bool(cached)

    return scorer
