"""One cell's submission queue: validate, record, score one at a time, answer the agent.

The HTTP layer (``autorl.grading.api``) is a thin shell over this class. Scoring goes through an
injected ``scorer`` (the GraderPool in a sweep; an in-process grader in unit tests) and every
record through an injected ``sink`` (the Recorder actor in a sweep), so this module needs no Ray.
"""

from __future__ import annotations

import json
import logging
import queue
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from autorl.grading.identity import BaseModel, IdentityReport
from autorl.grading.lora import adapter_digest
from autorl.grading.model_checks import (
    ADAPTER_CONFIG,
    CorruptWeightsError,
    ModelFiles,
    SubmissionRejected,
    check_loadable_model,
    normalize_tokenizer_config,
    resolve_submission_path,
    weights_hash,
)
from autorl.grading.public_errors import (
    CORRUPT_WEIGHTS,
    GRADING,
    REJECTED,
    UNREADABLE,
    PublicError,
    checked,
    fixed,
    from_details,
    mentioned_file,
    strip_details,
)
from autorl.grading.scoring import ScoreOutcome
from autorl.records.results import summarize_submissions
from autorl.records.types import SubmissionRecord
from autorl.workspace.run_meta import RunMeta

logger = logging.getLogger(__name__)

Scorer = Callable[[Path, str], tuple[ScoreOutcome, bool]]
"""(model_dir, weights_hash) -> (outcome, came_from_cache)."""


class RecordSink(Protocol):
    """Where submission records go (the Recorder actor, or a store in tests)."""

    def record_submission(self, record: SubmissionRecord) -> None:
        """Store or replace one submission record."""
        ...


# String details an agent may see: written by the service (never by an evaluator, which could copy
# eval data into them; the service overwrites these keys after merging an evaluator's details).
_PUBLIC_STRINGS = ("flag", "flag_reason")
# Keys an agent may see: names such as ``per_type`` or ``pick``; an evaluator that keyed numbers
# by an eval item (its question, its id) would hand the item's text to the agent.
_PUBLIC_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,39}")


def public_details(details: dict[str, Any]) -> dict[str, Any]:
    """The part of a grader's details an agent may see: numbers, flags and tables of numbers.

    Evaluators keep samples (eval questions, gold answers, predictions) in their details for the
    records and the report; returning those to the agent would leak the private eval split.

    >>> samples = [{"question": "q", "gold": "4"}]
    >>> public_details({"correct": 3, "samples": samples, "flag": "duplicate"})
    {'correct': 3, 'flag': 'duplicate'}
    >>> public_details({"per_type": {"pick": 50.0, "note": "x"}})
    {'per_type': {'pick': 50.0}}

    The integrity fields the service itself writes pass too, so an agent learns why it is flagged:

    >>> flagged = {"flag": "model_mismatch", "flag_reason": "hidden_size 8 (base: 16)"}
    >>> public_details({**flagged, "weight_distance": 1.2}) == {**flagged, "weight_distance": 1.2}
    True

    Keys that are not short names (an eval question used as a key) are left out, at both levels:

    >>> public_details({"by_question": {"What is 2 + 2?": 1, "q_7": 0}, "Natalia sold clips?": 3})
    {'by_question': {'q_7': 0}}
    """

    def number(value: Any) -> bool:
        return isinstance(value, int | float)  # bools included: they are ints

    def name(key: Any) -> bool:
        return isinstance(key, str) and _PUBLIC_KEY.fullmatch(key) is not None

    public: dict[str, Any] = {}
    for key, value in strip_details(details).items():
        if not name(key):
            continue
        if number(value) or (key in _PUBLIC_STRINGS and isinstance(value, str)):
            public[key] = value
        elif isinstance(value, dict):
            numbers = {k: v for k, v in value.items() if name(k) and number(v)}
            if numbers:
                public[key] = numbers
    return public


class QueueFull(Exception):
    """Too many of this cell's submissions are waiting to be scored (HTTP 429)."""


@dataclass(frozen=True)
class CellGradingContext:
    """What the submission queue knows about its cell.

    Attributes:
        cell_id: The cell.
        workspace: The cell's workspace root (submissions are resolved inside its ``output/``).
        base_weights_hash: The base model's weights hash (a submission with it is ``copy_of_base``).
        baseline: The base model's score.
        max_queued: Submissions that may wait to be scored at once.
        base_model_dir: The grader's copy of the base model; every submission is compared with it
            (:mod:`autorl.grading.identity`). None: no identity checks (flags and distances stay
            None).
        allow_substitution: ``integrity.allow_substitution``: flagged submissions may be the best.
        feedback: ``grading.feedback``: the split ``scorer`` and ``baseline`` are of. ``test``: a
            submission's score is also its test score; ``dev``: its test score comes after the cell
            ends (:mod:`autorl.grading.heldout`), so scored snapshots are kept until then.
    """

    cell_id: str
    workspace: Path
    base_weights_hash: str
    baseline: float
    max_queued: int
    base_model_dir: Path | None = None
    allow_substitution: bool = False
    feedback: str = "test"


@dataclass
class _Pending:
    record: SubmissionRecord
    model_dir: Path
    done: threading.Event


class SubmissionService:
    """Validates and scores one cell's submissions in arrival order on a worker thread."""

    def __init__(
        self,
        ctx: CellGradingContext,
        scorer: Scorer,
        sink: RecordSink,
        run_meta: RunMeta,
        snapshot_root: Path,
        snapshot_code: Callable[[str], str | None] = lambda reason: None,
    ) -> None:
        """Start the worker thread; ``snapshot_root`` (outside the workspace) holds scoring
        copies.
        """
        self.snapshot_root = snapshot_root
        self.ctx = ctx
        self.scorer = scorer
        self.sink = sink
        self.run_meta = run_meta
        self.snapshot_code = snapshot_code
        self._lock = threading.Lock()
        self._records: dict[int, SubmissionRecord] = {}
        self._events: dict[int, threading.Event] = {}
        self._queue: queue.Queue[_Pending | None] = queue.Queue()
        self._queued = 0
        self._scored_hashes: dict[str, SubmissionRecord] = {}
        self._base: BaseModel | None = None
        self._worker = threading.Thread(
            target=self._work, name=f"grading-{ctx.cell_id}", daemon=True
        )
        self._worker.start()

    def carry(self, earlier: list[SubmissionRecord]) -> None:
        """Take over the submissions an earlier run of this attempt made (a cell resumed after its
        node was lost): new ones are numbered on after them, the agent's list and best include them,
        and weights they scored count as duplicates. Call before the first submission."""
        with self._lock:
            for record in sorted(earlier, key=lambda r: r.submission_id):
                self._records[record.submission_id] = record
                self._events[record.submission_id] = threading.Event()
                self._events[record.submission_id].set()
                if record.weights_hash and record.score is not None:
                    self._scored_hashes.setdefault(record.weights_hash, record)

    # ---- called by the HTTP layer -------------------------------------------------------------

    def submit(self, model_path: object) -> int:
        """Validate ``model_path``, record the submission as queued and return its id.

        Raises:
            SubmissionRejected: 400/422 with a message saying what to fix (nothing is recorded).
            QueueFull: when ``max_queued`` submissions of this cell already wait.
        """
        try:
            model_dir = resolve_submission_path(self.ctx.workspace, model_path)
            check_loadable_model(model_dir)
        except SubmissionRejected as rejected:
            # The checks name files relative to the workspace; this catches a host path they missed.
            roots = [self.ctx.workspace, self.snapshot_root]
            public = checked(REJECTED, rejected.message, [], roots)
            raise SubmissionRejected(rejected.status_code, public.message) from rejected
        with self._lock:
            if self._queued >= self.ctx.max_queued:
                raise QueueFull(
                    f"{self._queued} submissions of this cell are already waiting to be scored; "
                    "wait for a result (GET /submissions) before submitting more"
                )
            submission_id = max(self._records, default=0) + 1
            self._queued += 1
            record = SubmissionRecord(
                cell_id=self.ctx.cell_id,
                submission_id=submission_id,
                model_path=str(model_path),
                status="queued",
                baseline_score=self.ctx.baseline,
                code_revision=self.snapshot_code(f"submission {submission_id}"),
                submitted_at=time.time(),
            )
            self._records[submission_id] = record
            done = threading.Event()
            self._events[submission_id] = done
        self.sink.record_submission(record)
        self.run_meta.update(last_submit_time=record.submitted_at)
        self._queue.put(_Pending(record, model_dir, done))
        return submission_id

    def wait(self, submission_id: int, timeout: float | None) -> bool:
        """Block until the submission is final; False on timeout."""
        return self._events[submission_id].wait(timeout)

    def response(self, submission_id: int) -> dict[str, Any] | None:
        """The agent-facing view of one submission (docs/design.md#the-grading-api), or None if
        unknown.
        """
        with self._lock:
            record = self._records.get(submission_id)
            if record is None:
                return None
            summary = summarize_submissions(
                list(self._records.values()),
                self.ctx.baseline,
                allow_flagged=self.ctx.allow_substitution,
                feedback=self.ctx.feedback,
            )
            total = len(self._records)
        body: dict[str, Any] = {
            "submission_id": record.submission_id,
            "status": record.status,
            "model_path": record.model_path,
            "score": record.score,
            "baseline_score": self.ctx.baseline,
            "improvement": record.improvement,
            # Feedback scores only: with dev feedback a test score must never reach the agent.
            "best": {
                "submission_id": summary["best_submission_id"],
                "score": summary["best_feedback_score"],
            },
            "total_submissions": total,
        }
        stored = json.loads(record.details_json)
        public = from_details(stored, record.error)
        if public is not None:  # the class and a fixed text: the full error stays in the records
            body |= public.as_answer()
        details = public_details(stored)
        if details:
            body["details"] = details
        return body

    def responses(self) -> list[dict[str, Any]]:
        """Every submission of this cell, in order."""
        with self._lock:
            ids = sorted(self._records)
        return [r for r in (self.response(i) for i in ids) if r is not None]

    def queued(self) -> int:
        """Submissions of this cell waiting or being scored."""
        with self._lock:
            return self._queued

    def queue_wait_s(self) -> float:
        """Total time this cell's submissions waited before a grader took them."""
        with self._lock:
            return sum(r.queue_wait_s or 0.0 for r in self._records.values())

    def drain(self, timeout: float) -> bool:
        """Wait until every queued submission is final; True if the queue emptied in time."""
        deadline = time.monotonic() + timeout
        while self.queued() and time.monotonic() < deadline:
            time.sleep(0.2)
        return not self.queued()

    def close(self, timeout: float | None = None) -> None:
        """Stop the worker thread after the submissions already queued; wait up to ``timeout`` for
        it.
        """
        self._queue.put(None)
        if timeout is not None:
            self._worker.join(timeout)

    def records(self) -> list[SubmissionRecord]:
        """This cell's submission records, in submission order."""
        with self._lock:
            return [self._records[i] for i in sorted(self._records)]

    def update(self, record: SubmissionRecord) -> None:
        """Replace a final record (e.g. with its test score) and store it."""
        self._store(record)

    # ---- worker -------------------------------------------------------------------------------

    def _work(self) -> None:
        while (pending := self._queue.get()) is not None:
            try:
                final = self._score(pending)
            except Exception as error:  # noqa: BLE001 - never lose a submission to a grader crash
                logger.exception("scoring submission %s failed", pending.record.submission_id)
                final = self._invalid(pending.record, f"grading failed: {error}", fixed(GRADING))
            self._finish(final)
            pending.done.set()

    def _score(self, pending: _Pending) -> SubmissionRecord:
        started = time.time()
        record = replace(
            pending.record,
            status="scoring",
            started_at=started,
            queue_wait_s=started - pending.record.submitted_at,
        )
        self._store(record)
        # Hash and score a private copy, so the weights hashed are the weights scored even if the
        # agent rewrites output/ meanwhile; the copy also gets the tokenizer quirk fixed.
        snapshot = self.snapshot_root / str(record.submission_id)
        shutil.rmtree(snapshot, ignore_errors=True)
        result: SubmissionRecord | None = None
        try:
            normalize_tokenizer_config(pending.model_dir, snapshot)
            files = check_loadable_model(snapshot)
            digest = weights_hash(files)
            if files.is_adapter:
                # Scored on this cell's base, so its key covers the base (and the config that scales
                # it).
                config = json.loads((snapshot / ADAPTER_CONFIG).read_text(encoding="utf-8"))
                digest = adapter_digest(digest, config, self.ctx.base_weights_hash)
            identity = self._identity(snapshot, files)
            result = self._score_snapshot(record, snapshot, digest, identity)
            return result
        except (CorruptWeightsError, SubmissionRejected, OSError) as error:
            return self._invalid(record, str(error), self._public_error(error, snapshot))
        finally:
            # With dev feedback a scored snapshot waits for its test score (autorl.grading.heldout).
            if not (
                self.ctx.feedback == "dev"
                and result is not None
                and result.status in ("scored", "duplicate")
            ):
                shutil.rmtree(snapshot, ignore_errors=True)

    def _identity(self, snapshot: Path, files: ModelFiles) -> IdentityReport | None:
        """The snapshot's identity checks against the cell's base; None when the cell has no base
        dir.
        """
        if self.ctx.base_model_dir is None:
            return None
        if self._base is None:
            self._base = BaseModel(self.ctx.base_model_dir)  # indexed once, on the first submission
        return self._base.check(snapshot, files)

    def _score_snapshot(
        self,
        record: SubmissionRecord,
        snapshot: Path,
        digest: str,
        identity: IdentityReport | None = None,
    ) -> SubmissionRecord:
        # A flagged model is still scored (the report shows what it would have scored); it counts
        # towards the best only with integrity.allow_substitution (summarize_submissions).
        integrity: dict[str, Any] = identity.details() if identity is not None else {}
        record = replace(
            record,
            weights_hash=digest,
            flags=identity.flag if identity is not None else None,
            weight_distance=identity.weight_distance if identity is not None else None,
        )
        if digest == self.ctx.base_weights_hash:
            return self._scored(
                record, self.ctx.baseline, "copy_of_base", {**integrity, "flag": "copy_of_base"}
            )
        earlier = self._scored_hashes.get(digest)
        if earlier is not None and earlier.score is not None:
            flags = {
                **integrity,
                "flag": integrity.get("flag", "duplicate"),
                "duplicate_of": earlier.submission_id,
            }
            return self._scored(record, earlier.score, "duplicate", flags)
        outcome, cached = self.scorer(snapshot, digest)
        if outcome.error is not None or outcome.score is None:
            public = outcome.public_error or fixed(GRADING)
            return self._invalid(record, outcome.error or "scored without a score", public)
        details = {"num_examples": outcome.num_examples, **strip_details(outcome.details)}
        for key in _PUBLIC_STRINGS:
            details.pop(key, None)  # only the service writes these (see public_details)
        if cached:
            details["flag"] = "duplicate"
        details.update(
            integrity
        )  # model_mismatch outranks duplicate: it is what decides whether it counts
        return self._scored(record, outcome.score, "duplicate" if cached else "scored", details)

    def _invalid(
        self, record: SubmissionRecord, error: str, public: PublicError
    ) -> SubmissionRecord:
        """``record`` made invalid: ``error`` in full for the records, ``public`` (in its details)
        for the agent."""
        details = json.dumps({**json.loads(record.details_json), **public.as_details()})
        return replace(
            record, status="invalid", error=error, details_json=details, finished_at=time.time()
        )

    def _public_error(self, error: Exception, snapshot: Path) -> PublicError:
        """What the agent is told of a check that failed on the snapshot (no host path, and no
        library text of an OS error)."""
        try:
            names = [path.name for path in snapshot.iterdir()]
        except OSError:
            names = []
        roots = [snapshot, self.snapshot_root, self.ctx.workspace]
        if self.ctx.base_model_dir is not None:
            roots.append(self.ctx.base_model_dir)
        if isinstance(error, SubmissionRejected):
            return checked(REJECTED, error.message, names, roots)
        if isinstance(error, CorruptWeightsError):
            return checked(CORRUPT_WEIGHTS, str(error), names, roots)
        filename = getattr(error, "filename", None)
        named = mentioned_file(Path(str(filename)).name, names) if filename else None
        return fixed(UNREADABLE, named)

    def _scored(
        self, record: SubmissionRecord, score: float, status: str, details: dict[str, Any]
    ) -> SubmissionRecord:
        return replace(
            record,
            status=status,
            score=score,
            test_score=score if self.ctx.feedback == "test" else None,
            improvement=round(score - self.ctx.baseline, 6),
            details_json=json.dumps(details),
            finished_at=time.time(),
        )

    def _store(self, record: SubmissionRecord) -> None:
        with self._lock:
            self._records[record.submission_id] = record
        self.sink.record_submission(record)

    def _finish(self, record: SubmissionRecord) -> None:
        self._store(record)
        with self._lock:
            # Only after the final record is stored, so drain() never ends with it unrecorded.
            self._queued -= 1
            if (
                record.weights_hash
                and record.score is not None
                and record.weights_hash not in self._scored_hashes
            ):
                self._scored_hashes[record.weights_hash] = record
