"""A cell's grading side for tests that serve a real grading API without Ray.

:func:`start_grading_cell` serves the real :class:`GradingServer` (uvicorn on a real socket) over
the real :class:`SubmissionService`. The scorer is the real in-process grader
(:func:`autorl.grading.scoring.score_model`) on a small GSM8K fixture target; the sink is a real
record store, standing in for the Recorder actor.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autorl.envs.training import TrainingEnvs
from autorl.grading.api import GradingServer, create_app
from autorl.grading.model_checks import check_loadable_model, weights_hash
from autorl.grading.scoring import EvalTarget, ScoreOutcome, score_model
from autorl.grading.service import CellGradingContext, SubmissionService
from autorl.records.store import RecordStore
from autorl.records.types import SubmissionRecord
from autorl.workspace.run_meta import RunMeta

TARGET = EvalTarget(
    "gsm8k",
    1,
    "fixture",
    0,
    {"train_size": 20, "eval_size": 16},
    {"num_shots": 0, "max_new_tokens": 8},
)


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


@dataclass
class LiveGradingCell:
    """A served cell: its workspace (``output/`` empty, ``models/tiny`` the base) and what serves
    it."""

    workspace: Path
    server: GradingServer
    service: SubmissionService
    scorer: GatedScorer
    store: RecordStore
    baseline: float

    def close(self) -> None:
        """Open the scorer's gate, stop the server and the queue, close the store."""
        self.scorer.gate.set()
        self.server.stop()
        self.service.close()
        self.store.close()


def start_grading_cell(
    root: Path,
    tiny_model_dir: Path,
    cache_dir: Path,
    *,
    token: str,
    cell_id: str,
    max_queued: int,
    max_body_bytes: int,
    submit_timeout_s: float,
    budget_s: float,
    envs: TrainingEnvs | None = None,
) -> LiveGradingCell:
    """Serve one cell whose files live under ``root`` (workspace, records, grader copies); its agent
    started now."""
    workspace = root / "workspace"
    (workspace / "output").mkdir(parents=True)
    (workspace / "models").mkdir()
    (workspace / "models" / "tiny").symlink_to(tiny_model_dir)
    baseline = score_model(TARGET, tiny_model_dir, cache_dir, batch_size=16).score
    assert baseline is not None
    store = RecordStore(root / "records.sqlite")
    scorer = GatedScorer(cache_dir)
    run_meta = RunMeta(workspace / "run_meta.json", budget_s, root)
    run_meta.update(start_time=time.time())
    ctx = CellGradingContext(
        cell_id, workspace, weights_hash(check_loadable_model(tiny_model_dir)), baseline, max_queued
    )
    service = SubmissionService(ctx, scorer, StoreSink(store), run_meta, root / "grader_copies")
    timeout: Callable[[], float] = lambda: submit_timeout_s  # noqa: E731 - the API asks for the time left each time
    app = create_app(
        service,
        run_meta,
        token=token,
        task_id="gsm8k",
        max_body_bytes=max_body_bytes,
        submit_timeout_s=timeout,
        envs=envs,
    )
    server = GradingServer(app)
    server.start()
    return LiveGradingCell(workspace, server, service, scorer, store, baseline)


def save_variant(tiny_model_dir: Path, dest: Path, *, noise_seed: int | None) -> Path:
    """A copy of the base model, with its weights perturbed when ``noise_seed`` is given; returns
    ``dest``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    if noise_seed is not None:
        generator = torch.Generator().manual_seed(noise_seed)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.02)
    model.save_pretrained(dest)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(dest)
    return dest
