"""Pieces of a cell's grading side for tests that serve a real grading API without Ray.

The scorer is the real in-process grader (:func:`autorl.grading.scoring.score_model`) on a small
GSM8K fixture target; the sink is a real record store, standing in for the Recorder actor.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from autorl.grading.scoring import EvalTarget, ScoreOutcome, score_model
from autorl.records.store import RecordStore
from autorl.records.types import SubmissionRecord

TARGET = EvalTarget("gsm8k", 1, "fixture", 0, {"train_size": 20, "eval_size": 16}, {"num_shots": 0, "max_new_tokens": 8})


@dataclass
class StoreSink:
    """Records submissions in a real record store, as the Recorder actor does."""

    store: RecordStore

    def record_submission(self, record: SubmissionRecord) -> None:
        """Store or replace one submission record."""
        self.store.upsert_submission(record)


class GatedScorer:
    """The real in-process grader, optionally held at a gate so tests can fill the queue."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.gate = threading.Event()
        self.gate.set()
        self.calls = 0

    def __call__(self, model_dir: Path, digest: str) -> tuple[ScoreOutcome, bool]:
        """Wait at the gate (at most a minute), then score ``model_dir`` on :data:`TARGET`."""
        self.gate.wait(60)
        self.calls += 1
        return score_model(TARGET, model_dir, self.cache_dir, batch_size=16), False
