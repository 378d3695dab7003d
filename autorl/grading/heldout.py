"""The held-out test split of ``grading.feedback=dev`` (docs/design.md#the-grading-api).

With dev feedback an agent's submissions are scored on a dev split while it runs (the scores it
sees), and on the test split only after its cell ends, here. The dev split is the task's own builder
run with :data:`DEV_SEED` instead of the test split's seed 0: for a generated (fixture) source that
draws other items from the same generator, none of which the agent's public folder holds. A source
whose builder ignores the seed (hub data) would give the test split again: :func:`check_dev_split`
refuses it rather than leak test scores as "dev" scores (sources a task lists as ``fixed_sources``
in its ``task.yaml`` are refused earlier, when the sweep is planned).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from dataclasses import replace
from pathlib import Path

from autorl.errors import ConfigError
from autorl.grading.scoring import EvalTarget
from autorl.grading.service import Scorer, SubmissionService
from autorl.records.types import VALID_SUBMISSION_STATUSES, SubmissionRecord

logger = logging.getLogger(__name__)

DEV_SEED = 1_000_003
"""The build seed of every task's dev split (the test split is built with seed 0)."""


def dev_target(test: EvalTarget) -> EvalTarget:
    """The dev split of ``test``: the same task, version, source and options, built with
    :data:`DEV_SEED`.

    Its cache keys differ from the test split's (the seed is part of them); the test target is not
    touched.

    >>> t = EvalTarget("gsm8k", 1, "fixture", 0)
    >>> dev_target(t).seed, dev_target(t).cache_key("h") != t.cache_key("h")
    (1000003, True)
    """
    return replace(test, seed=DEV_SEED)


def _folder_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def check_dev_split(task_id: str, source: str, test_private: Path, dev_private: Path) -> None:
    """Refuse a dev split that is the test split again (a source whose builder ignores the seed).

    Raises:
        ConfigError: naming the task, its source and the fix.
    """
    if _folder_digest(test_private) == _folder_digest(dev_private):
        raise ConfigError(
            f"task {task_id!r} (source {source!r}) has no dev split: its data does not depend on "
            "the build seed, so a dev split would be the test split. Run it with "
            "grading.feedback=test, or with task.source=fixture."
        )


def score_on_test(
    service: SubmissionService, scorer: Scorer, test_baseline: float
) -> list[SubmissionRecord]:
    """Score every valid submission of a finished cell on the test split and store its
    ``test_score``.

    Call it after the agent has stopped and the service has drained (its worker is idle). A copy of
    the base gets ``test_baseline``; identical weights are scored once; a submission whose snapshot
    is gone or whose test scoring fails keeps ``test_score`` None (it can then not be the cell's
    ``best_score``). The kept snapshots are deleted afterwards.

    Returns:
        The updated records, in submission order.
    """
    by_hash: dict[str, float | None] = {}
    updated = []
    try:
        for record in service.records():
            if record.status not in VALID_SUBMISSION_STATUSES or record.score is None:
                continue
            if record.status == "copy_of_base":
                test: float | None = test_baseline
            elif record.weights_hash is not None and record.weights_hash in by_hash:
                test = by_hash[record.weights_hash]
            else:
                test = _score_snapshot(
                    service.snapshot_root / str(record.submission_id), record, scorer
                )
                if record.weights_hash is not None:
                    by_hash[record.weights_hash] = test
            final = replace(record, test_score=test)
            service.update(final)
            updated.append(final)
    finally:
        shutil.rmtree(service.snapshot_root, ignore_errors=True)
    return updated


def _score_snapshot(snapshot: Path, record: SubmissionRecord, scorer: Scorer) -> float | None:
    if not snapshot.is_dir() or record.weights_hash is None:
        logger.warning(
            "submission %s of %s has no snapshot to score on the test split",
            record.submission_id,
            record.cell_id,
        )
        return None
    outcome, _ = scorer(snapshot, record.weights_hash)
    if outcome.error is not None:
        logger.warning(
            "test scoring of submission %s of %s failed: %s",
            record.submission_id,
            record.cell_id,
            outcome.error,
        )
    return outcome.score
