"""GraderPool: the supervisor of the sweep's Grader actors (Ray's tree-of-actors pattern).

It routes each scoring request to the least-loaded grader (of those, one on the node that holds
the submission, which then reads it in place instead of fetching it), replaces a grader that died
and retries its request (an infrastructure failure, never the agent's), caches baselines and
submission scores in the record store (baselines also across sweeps on its node:
:mod:`autorl.grading.baseline_cache`), and reports its queue depth.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import ray
from ray.actor import ActorHandle
from ray.exceptions import RayActorError

from autorl.actors.grader import Grader
from autorl.actors.recorder_client import RecorderClient
from autorl.errors import AutorlError
from autorl.grading.baseline_cache import BaselineCache
from autorl.grading.scoring import EvalTarget, ScoreOutcome
from autorl.grading.transfer import ModelRef
from autorl.schema import GraderConfig
from autorl.tracking import metrics as dashboard
from autorl.tracking.busy import BusyClock

logger = logging.getLogger(__name__)
_MAX_ATTEMPTS = 3


def pick_grader(in_flight: list[int], nodes: list[str | None], source: str | None) -> int:
    """The grader for the next request: the least loaded, and among those one on ``source``'s node.

    >>> pick_grader([1, 0, 0], ["a", "b", "c"], "c")  # idle first, then the submission's node
    2
    >>> pick_grader([0, 1], ["a", "b"], "b")  # a busy grader on the node does not beat an idle one
    0
    >>> pick_grader([0, 0], [None, None], None)
    0
    """
    return min(
        range(len(in_flight)), key=lambda i: (in_flight[i], source is None or nodes[i] != source)
    )


class BaselineError(AutorlError):
    """The base model could not be scored; a cell must not start with a made-up baseline."""


class GraderPool:
    """Async supervisor actor; wrapped with ``ray.remote`` by the scheduler."""

    def __init__(
        self, grader_cfg: GraderConfig, cache_dir: str, recorder: RecorderClient | ActorHandle[Any]
    ) -> None:
        """Start ``grader_cfg.replicas`` graders with the configured resources; scores are cached
        in ``recorder``'s store."""
        self.cfg = grader_cfg
        self.cache_dir = cache_dir
        self.recorder = RecorderClient.of(recorder)
        self.workers = [self._start_grader() for _ in range(grader_cfg.replicas)]
        self.in_flight = [0] * len(self.workers)
        # Each grader's node, asked on first need.
        self.nodes: list[str | None] = [None] * len(self.workers)
        # Each grader's busy time over the time the queue was non-empty (dashboard and report).
        self.busy = BusyClock(len(self.workers))
        self.key_locks: dict[str, asyncio.Lock] = {}
        # Baselines of earlier sweeps on this node (grader.baseline_cache), keyed by what the
        # graders score with.
        self.baselines = BaselineCache(Path(cache_dir) / "baselines")
        self.identity: dict[str, Any] | None = None

    def _start_grader(self) -> Any:
        options: dict[str, Any] = {"num_cpus": self.cfg.cpus, "max_restarts": 2}
        if self.cfg.gpus:
            options["num_gpus"] = self.cfg.gpus
        # E.g. {grader_node: 1}: only nodes started with that resource host graders.
        if self.cfg.resources:
            options["resources"] = dict(self.cfg.resources)
        threads = max(1, int(self.cfg.cpus))
        engine_options = {name: dict(engine.options) for name, engine in self.cfg.engines.items()}
        return (
            ray.remote(Grader)
            .options(**options)
            .remote(self.cache_dir, self.cfg.batch_size, threads, self.cfg.engine, engine_options)
        )

    async def _run_on_grader(
        self, target: EvalTarget, model_dir: ModelRef | str, base_dir: ModelRef | str | None = None
    ) -> ScoreOutcome:
        source = model_dir.node_id if isinstance(model_dir, ModelRef) else None
        for attempt in range(1, _MAX_ATTEMPTS + 1):
            if source is not None:
                await self._learn_nodes()
            index = pick_grader(self.in_flight, self.nodes, source)
            self.in_flight[index] += 1
            self.busy.begin(index)
            dashboard.set_queue_depth(self.queue_depth())
            started = time.monotonic()
            try:
                return await self.workers[index].score.remote(target, model_dir, base_dir)  # type: ignore[no-any-return]
            except RayActorError as error:  # died, or unavailable while it restarts
                logger.warning(
                    "grader %d died (attempt %d): %s; replacing it", index, attempt, error
                )
                # A crashed grader restarts by itself (max_restarts): stop that, or it would hold
                # its CPUs/GPUs next to its replacement for the rest of the sweep.
                ray.kill(self.workers[index], no_restart=True)
                self.workers[index] = self._start_grader()
                self.nodes[index] = None
                self.busy.replaced(index)
            finally:
                self.in_flight[index] -= 1
                self.busy.end(index)
                dashboard.grading_done(
                    target.task_id, time.monotonic() - started, self.queue_depth()
                )
                dashboard.set_grader_busy(self.busy.fractions())
        raise AutorlError(f"grading failed {_MAX_ATTEMPTS} times because graders kept dying")

    async def _learn_nodes(self) -> None:
        """Ask the graders whose node is not known yet (new or replaced ones) where they run."""
        unknown = [i for i, node in enumerate(self.nodes) if node is None]
        answers = await asyncio.gather(
            *(self.workers[i].node_id.remote() for i in unknown), return_exceptions=True
        )
        for i, answer in zip(unknown, answers, strict=True):
            if isinstance(answer, str):  # a grader that is down is asked again next time
                self.nodes[i] = answer

    async def baseline(
        self, target: EvalTarget, model_dir: ModelRef | str, weights_hash: str
    ) -> float:
        """The base model's score on ``target``, computed once per key and cached in the store (and,
        with ``grader.baseline_cache``, reused from an earlier sweep on this node that scored it
        with the same engine).

        Raises:
            BaselineError: if the base model cannot be scored (never recorded as 0).
        """
        key = "baseline:" + target.cache_key(weights_hash)
        async with self.key_locks.setdefault(key, asyncio.Lock()):
            cached = await self.recorder.get_baseline(key)
            if cached is not None:
                return float(cached)
            identity = await self._engine_identity() if self.cfg.baseline_cache else None
            earlier = self.baselines.get(key, identity) if identity is not None else None
            if earlier is not None:
                score, details = earlier
                reused = json.loads(details) | {"cross_sweep_cache": str(self.baselines.root)}
                await self.recorder.put_baseline(key, score, json.dumps(reused))
                return score
            outcome = await self._run_on_grader(target, model_dir)
            if outcome.error is not None or outcome.score is None:
                raise BaselineError(
                    f"baseline of {model_dir} on {target.task_id} failed: {outcome.error}"
                )
            details = json.dumps(asdict(outcome))
            await self.recorder.put_baseline(key, outcome.score, details)
            if identity is not None:
                self.baselines.put(key, identity, outcome.score, details)
            return outcome.score

    async def _engine_identity(self) -> dict[str, Any] | None:
        """What the graders score with (asked once); None when a grader cannot say, and then no
        baseline is
        reused or stored across sweeps (scoring the base reports the grader's own error)."""
        if self.identity is None:
            try:
                self.identity = await self.workers[0].engine_identity.remote()
            except Exception as error:  # noqa: BLE001 - any failure only costs the cache, scoring says why
                logger.warning(
                    "graders did not say what they score with (%s): baselines are scored anew",
                    error,
                )
        return self.identity

    async def score(
        self,
        target: EvalTarget,
        model_dir: ModelRef | str,
        weights_hash: str,
        base_dir: ModelRef | str | None = None,
    ) -> tuple[ScoreOutcome, bool]:
        """Score a submission; identical weights (from any cell) return the cached score.

        Args:
            target: What the submission is scored on.
            model_dir: The cell's copy of the submission: a :class:`ModelRef` (a grader on another
                node fetches it, :mod:`autorl.grading.transfer`) or a path every grader can read.
            weights_hash: Its dedupe key; for a LoRA adapter it covers the adapter and the base
                (:func:`autorl.grading.lora.adapter_digest`), so one adapter on two bases never
                shares a cached score.
            base_dir: The cell's base model, which a LoRA adapter is always applied to (required
                for adapters; a full model ignores it).

        Returns:
            The outcome and whether it came from the cache (a duplicate).
        """
        key = target.cache_key(weights_hash)
        async with self.key_locks.setdefault(key, asyncio.Lock()):
            cached = await self.recorder.get_cached_score(key)
            if cached is not None:
                score, details_json = cached
                details = json.loads(details_json)
                return ScoreOutcome(
                    score,
                    int(details.get("num_examples", 0)),
                    details.get("details", {}),
                    None,
                    0.0,
                ), True
            outcome = await self._run_on_grader(target, model_dir, base_dir)
            if outcome.error is None and outcome.score is not None:
                await self.recorder.put_cached_score(
                    key, outcome.score, json.dumps(asdict(outcome))
                )
            return outcome, False

    def graders(self) -> list[Any]:
        """Handles of the current graders (for operators and fault-injection tests)."""
        return list(self.workers)

    def busy_summary(self) -> dict[str, Any]:
        """Each grader's busy time and busy fraction while the queue was non-empty, so far
        (:meth:`autorl.tracking.busy.BusyClock.summary`, plus ``replicas``)."""
        return {"replicas": len(self.workers), **self.busy.summary()}

    def queue_depth(self) -> int:
        """Requests being scored or waiting for a grader right now."""
        return sum(self.in_flight)

    async def ready(self) -> int:
        """Wait until every grader is up; returns their count.

        The scheduler waits for this before placing cells, so cells can never take the CPUs a
        grader needs (with every CPU reserved by cells, a grader would wait forever).
        """
        await asyncio.gather(*(worker.ping.remote() for worker in self.workers))
        return len(self.workers)

    def ping(self) -> bool:
        """Liveness check."""
        return True
