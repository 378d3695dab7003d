"""Grader actor: holds an inference engine and scores models on a task's private eval split."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from autorl.grading.scoring import EvalTarget, ScoreOutcome, score_model

logger = logging.getLogger(__name__)


class Grader:
    """One scoring worker; the GraderPool supervises several of them.

    Heavy imports (torch, transformers) happen on the first call, inside the actor process,
    after Ray has set ``CUDA_VISIBLE_DEVICES`` for it.
    """

    def __init__(self, cache_dir: str, batch_size: int, num_threads: int) -> None:
        """Remember where task data lives and how big a generate batch may be."""
        self.cache_dir = Path(cache_dir)
        self.batch_size = batch_size
        # torch defaults to every core of the node; a grader must stay within what it reserved.
        os.environ.setdefault("OMP_NUM_THREADS", str(num_threads))
        self.num_threads = num_threads

    def score(self, target: EvalTarget, model_dir: str, base_dir: str | None = None) -> ScoreOutcome:
        """Score ``model_dir`` on ``target``; load failures come back as an outcome with an error.

        ``base_dir`` is the cell's base model: a LoRA adapter in ``model_dir`` is applied to it (and
        scoring one without it raises), whatever base the adapter's config names.
        """
        import torch

        torch.set_num_threads(self.num_threads)
        from autorl.actors.env_pool import find_pool_client
        from autorl.tasks import get_task

        spec = get_task(target.task_id)
        # Interactive tasks play their episodes in the sweep's envpool:<kind> (in-process without one).
        envs = find_pool_client(spec.env) if spec.kind == "interactive" else None
        return score_model(
            target, Path(model_dir), self.cache_dir, batch_size=self.batch_size, envs=envs,
            base_dir=Path(base_dir) if base_dir is not None else None,
        )

    def ping(self) -> bool:
        """Liveness check."""
        return True
