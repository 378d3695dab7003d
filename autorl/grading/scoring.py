"""Scoring one model on one task's private eval split (what a grader does, without Ray)."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from autorl.engine.warm import WarmEngines
from autorl.grading.public_errors import (
    CHAT_TEMPLATE,
    CHAT_TEMPLATE_FILES,
    EVALUATION,
    MODEL_LOAD,
    PublicError,
    fixed,
    mentioned_file,
)
from autorl.schema import RunConfig
from autorl.tasks import (
    EvalContext,
    TaskSpec,
    build_options,
    build_task_data,
    get_task,
    load_evaluator,
    plain,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalTarget:
    """What a model is scored on: a task version, its data source and its eval options."""

    task_id: str
    task_version: int
    source: str
    seed: int
    build_options: dict[str, Any] = field(default_factory=dict, hash=False)
    eval_options: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def eval_digest(self) -> str:
        """Digest of everything besides the model that decides a score."""
        payload = {
            "build": self.build_options,
            "eval": self.eval_options,
            "source": self.source,
            "seed": self.seed,
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]

    def cache_key(self, weights_hash: str) -> str:
        """Key of a score (baseline or submission) of the model with ``weights_hash`` on this
        target.

        >>> key = EvalTarget("gsm8k", 1, "fixture", 0).cache_key("abc")
        >>> key.startswith("gsm8k:v1:fixture:"), key.endswith(":abc")
        (True, True)
        """
        return (
            f"{self.task_id}:v{self.task_version}:{self.source}:{self.eval_digest}:{weights_hash}"
        )


@dataclass(frozen=True)
class ScoreOutcome:
    """The result of scoring one model: a score, or the error that made the model invalid.

    ``error`` is the full text (exception included) for the records and the report; ``public_error``
    is what the agent may be told of it (:mod:`autorl.grading.public_errors`).
    """

    score: float | None
    num_examples: int
    details: dict[str, Any]
    error: str | None
    elapsed_s: float
    public_error: PublicError | None = None


def target_from_config(config: RunConfig, task_version: int) -> EvalTarget:
    """The eval target of a cell's config (its task's source was checked when the sweep was
    planned).
    """
    task = config.task
    return EvalTarget(
        task_id=task.name,
        task_version=task_version,
        source=task.source,
        seed=0,  # the eval split is the same for every seed of a cell, so scores are comparable
        build_options=dict(task.build[task.source]),
        eval_options=dict(task.eval[task.source]),
    )


def eval_context(
    spec: TaskSpec, target: EvalTarget, private_dir: Path, cache_root: Path, envs: Any = None
) -> EvalContext:
    """The evaluator's context for ``target``: its private data, complete eval options (the target's
    over the task's conf defaults) and answer cache; for an interactive task, ``envs`` (the sweep's
    EnvPool client, or in-process environments when ``None``) bound to the target's data and the
    same eval options.

    Raises:
        TaskError: The target names an option the task's conf does not list.
    """
    ctx = EvalContext.for_task(
        spec,
        target.source,
        private_dir,
        target.eval_options,
        cache_dir=cache_root / "eval" / target.task_id,
    )
    if spec.kind != "interactive":
        return ctx
    from autorl.envs.base import EnvSource
    from autorl.envs.host import EpisodeClient, LocalEnvClient, cache_resolver

    client = envs if envs is not None else LocalEnvClient(spec.env, cache_resolver(cache_root))
    build = build_options(spec, target.source, target.build_options)
    source = EnvSource(target.task_id, target.source, target.seed, build, plain(ctx.options))
    return replace(ctx, envs=EpisodeClient(client, source))


def score_model(
    target: EvalTarget,
    model_dir: Path,
    cache_root: Path,
    *,
    batch_size: int,
    envs: Any = None,
    base_dir: Path | None = None,
    engine: str = "hf",
    warm: WarmEngines | None = None,
    engine_options: dict[str, Any] | None = None,
) -> ScoreOutcome:
    """Load ``model_dir`` (the grader's copy of a submission) and evaluate it on ``target``'s
    private split.

    A model that cannot be loaded or generated with is an agent outcome: it comes back as an outcome
    with ``error`` set, never as an exception. Errors of the task itself (its data cannot be built,
    its environments or its judge fail) are infrastructure failures and raise. ``envs`` is the env
    client (an EnvPool) that interactive tasks play their episodes in; ``None``: in-process.
    ``base_dir`` is the grader's copy of the cell's base model: a LoRA adapter is always applied to
    it, whatever base the adapter's config names. ``engine`` is ``grader.engine`` (``auto``, ``hf``,
    ``vllm``); with ``warm`` (the grader's :class:`WarmEngines`, whose lock the caller holds) the
    submission is swapped into the grader's loaded engine, without it a new engine is built and
    closed again (the cold way, kept as the benchmarks' baseline) with ``engine_options``.

    Raises:
        AdapterBaseMissing: ``model_dir`` is an adapter and no (existing) ``base_dir`` was given.
        ConfigError: ``engine`` is unknown or its package is not installed.
    """
    from autorl.engine import ENGINES, resolve_engine
    from autorl.engine.chat_render import ChatRenderUnavailable, ChatTemplateFailed
    from autorl.engine.hf import AdapterBaseMissing
    from autorl.envs.base import EnvError
    from autorl.judge.client import JudgeError

    spec = get_task(target.task_id)
    data = build_task_data(
        spec, target.source, cache_root / "tasks", seed=target.seed, options=target.build_options
    )
    evaluate = load_evaluator(spec)
    ctx = eval_context(
        spec, target, data.private_dir, cache_root, envs
    )  # a bad option is the sweep's error, not the model's
    started = time.monotonic()
    name = resolve_engine(engine)  # a bad name is the sweep's error, not the model's
    try:
        if warm is not None:
            loaded = warm.get(name, model_dir, base_dir, batch_size)
        else:
            loaded = ENGINES.get(name)(
                model_dir, batch_size=batch_size, base_dir=base_dir, **(engine_options or {})
            )
    except AdapterBaseMissing:
        raise  # the grader was not wired with the cell's base: not the agent's failure
    except Exception as error:  # noqa: BLE001 - any load failure makes the submission invalid
        logger.info("model %s failed to load: %s", model_dir, error)
        # The agent is told the class and, at most, which of its files the error names.
        public = fixed(MODEL_LOAD, mentioned_file(str(error), _file_names(model_dir)))
        text = f"model failed to load: {type(error).__name__}: {error}"
        return ScoreOutcome(None, 0, {}, text, 0.0, public)
    try:
        result = evaluate(loaded, ctx)
    except (EnvError, JudgeError, ChatRenderUnavailable):
        raise  # the environments, the judge or the render process failed: infrastructure
    except ChatTemplateFailed as error:  # its text can hold the rendered eval prompts: records only
        logger.info("the chat template of %s failed: %s", model_dir, error.reason)
        public = fixed(CHAT_TEMPLATE, _template_file(model_dir))
        elapsed = time.monotonic() - started
        return ScoreOutcome(None, 0, {}, f"evaluation failed: {error}", elapsed, public)
    except Exception as error:  # noqa: BLE001 - e.g. generation with broken weights
        logger.info("evaluation of %s failed: %s", model_dir, error)
        return ScoreOutcome(
            None,
            0,
            {},
            f"evaluation failed: {type(error).__name__}: {error}",
            time.monotonic() - started,
            fixed(EVALUATION),
        )
    finally:
        if warm is None:
            loaded.close()
    return ScoreOutcome(
        float(result.score),
        result.num_examples,
        dict(result.details),
        None,
        time.monotonic() - started,
    )


def _file_names(model_dir: Path) -> list[str]:
    """The names of the files in ``model_dir`` (the submitted folder's copy)."""
    try:
        return [path.name for path in model_dir.iterdir() if path.is_file()]
    except OSError:
        return []


def _template_file(model_dir: Path) -> str:
    """The file the chat template came from: the first of :data:`CHAT_TEMPLATE_FILES` there."""
    names = set(_file_names(model_dir))
    return next((name for name in CHAT_TEMPLATE_FILES if name in names), "tokenizer_config.json")
