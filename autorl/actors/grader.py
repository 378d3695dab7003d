"""Grader actor: holds an inference engine and scores models on a task's private eval split."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any

from autorl.actors.model_source import RaySource, this_node
from autorl.engine.warm import WarmEngines
from autorl.grading.scoring import EvalTarget, ScoreOutcome, score_model
from autorl.grading.transfer import DigestCache, ModelFetcher, ModelRef

logger = logging.getLogger(__name__)


class Grader:
    """One scoring worker; the GraderPool supervises several of them.

    Heavy imports (torch, transformers) happen on the first call, inside the actor process,
    after Ray has set ``CUDA_VISIBLE_DEVICES`` for it.
    """

    def __init__(
        self,
        cache_dir: str,
        batch_size: int,
        num_threads: int,
        engine: str = "auto",
        engine_options: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        """Remember where task data lives, how big a generate batch may be and which engine scores.

        ``engine`` is ``grader.engine`` (``auto``, ``hf``, ``vllm``); ``engine_options`` maps an
        engine name to its options (``grader.engines.<name>.options``). The engine stays loaded
        between submissions (:class:`WarmEngines`).
        """
        self.cache_dir = Path(cache_dir)
        self.batch_size = batch_size
        # torch defaults to every core of the node; a grader must stay within what it reserved.
        os.environ.setdefault("OMP_NUM_THREADS", str(num_threads))
        _hide_unreserved_gpus()
        self.num_threads = num_threads
        self.engine = engine
        self.engines = WarmEngines(engine_options)
        # Submissions and bases from other nodes land here (autorl.grading.transfer).
        self.models = ModelFetcher(
            DigestCache(self.cache_dir / "transfer"), this_node(), RaySource()
        )

    def score(
        self, target: EvalTarget, model_dir: ModelRef | str, base_dir: ModelRef | str | None = None
    ) -> ScoreOutcome:
        """Score ``model_dir`` on ``target``; load failures come back as an outcome with an error.

        ``base_dir`` is the cell's base model: a LoRA adapter in ``model_dir`` is applied to it (and
        scoring one without it raises), whatever base the adapter's config names. Either may be a
        :class:`ModelRef` on another node: it is brought here first, and a submission's copy is
        deleted again after scoring.

        Raises:
            TransferError: a model on another node could not be brought here intact.
        """
        import torch

        torch.set_num_threads(self.num_threads)
        from autorl.actors.env_pool import find_pool_client
        from autorl.tasks import get_task

        spec = get_task(target.task_id)
        # Interactive tasks play their episodes in the sweep's envpool:<kind> (in-process without
        # one).
        envs = find_pool_client(spec.env) if spec.kind == "interactive" else None
        with (
            self.models.local(model_dir) as model_path,
            self.models.local(base_dir) as base_path,
            self.engines.lock,
        ):
            assert model_path is not None
            return score_model(
                target,
                model_path,
                self.cache_dir,
                batch_size=self.batch_size,
                envs=envs,
                base_dir=base_path,
                engine=self.engine,
                warm=self.engines,
            )

    def engine_identity(self) -> dict[str, Any]:
        """What besides the model and the eval options decides this grader's scores: the engine it
        resolves to and its options, batch size, threads, device and library versions, and autorl's
        own version (the key of the cross-sweep baseline cache,
        :mod:`autorl.grading.baseline_cache`)."""
        import importlib.metadata

        import torch

        from autorl.engine import resolve_engine
        from autorl.records.migrations import autorl_version

        name = resolve_engine(self.engine)
        packages = ["torch", "transformers", "peft"] + (["vllm"] if name == "vllm" else [])
        identity = {
            "engine": name,
            "options": self.engines.options.get(name, {}),
            "batch_size": self.batch_size,
            "threads": self.num_threads,
            "autorl": autorl_version(),
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
            "packages": {package: importlib.metadata.version(package) for package in packages},
        }
        # Plain JSON values (an engine option may be a tuple or a path): what the cache stores is
        # what it compares.
        return json.loads(json.dumps(identity, default=str))  # type: ignore[no-any-return]

    def engine_stats(self) -> dict[str, int]:
        """How this grader got its engines: ``builds`` (loaded anew) and ``swaps`` (weights swapped
        in)."""
        return {"builds": self.engines.builds, "swaps": self.engines.swaps}

    def close(self) -> None:
        """Free the warm engine (before the actor is killed)."""
        self.engines.close()

    def transfer_stats(self) -> dict[str, int]:
        """What this grader's fetcher did: models used in place, downloaded, or reused from its
        cache."""
        return dataclasses.asdict(self.models.stats)

    def node_id(self) -> str:
        """The Ray node this grader runs on (the pool sends it the submissions already on that
        node)."""
        return this_node()

    def ping(self) -> bool:
        """Liveness check."""
        return True


def _hide_unreserved_gpus() -> None:
    """Hide the node's GPUs from a grader that reserved none (``grader.gpus=0``).

    Ray sets ``CUDA_VISIBLE_DEVICES`` only for an actor that holds GPUs; one with none would see
    every GPU of its node, cells' included, and ``grader.engine=auto`` would start vLLM on them.
    """
    import ray

    if ray.is_initialized() and not ray.get_runtime_context().get_accelerator_ids().get("GPU"):
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
