"""The task contract: discover task folders, build their data, and load their entry points.

A task is one folder, ``tasks/<id>/``, imported as the package ``autorl.task_code.<id>`` (see
:mod:`autorl.task_code`). Its manifest ``task.yaml`` names every entry point as a ``module:attr``
string relative to that package, so nothing in autorl lists tasks by hand::

    sources:                       # data source -> builder(public, private, *, seed, options)
      fixture: fixture:build
      hub: build:build_hub
    run: {source: fixture, budget_s: 480}  # a sweep's defaults (interactive tasks: an env_pool)
    entry_points:
      evaluate: evaluate:evaluate  # Evaluator: (engine, EvalContext) -> EvalResult
      options: options:OPTIONS     # the typed options of each source (autorl.task_options)
      env: env:MyEnv               # interactive tasks: a factory of fresh Env instances
      recipe: recipe:run           # the scripted agent's recipe, relative to the agent/ package

Grader-side code (builders, fixture generators, evaluators, judges, environments) sits in the
folder itself; ``tasks/<id>/agent/`` holds the only task code an agent process may import (the
scripted recipe, the prompt protocol, the reward) and never imports from its parent folder.
Importing this module is cheap (no torch, transformers, datasets or Ray).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from filelock import FileLock

from autorl.errors import AutorlError, ConfigError, TaskError
from autorl.registry import load_object
from autorl.task_options import (
    TaskOptions,
    build_options,
    eval_options,
    option,
    option_class,
    plain,
    task_options,
    typed_options,
)
from autorl.task_spec import (
    AGENT_SUBPACKAGE,
    PACKAGE,
    TaskSpec,
    discover_tasks,
    get_task,
    parse_manifest,
)

# The task API in one import: the manifest side (autorl.task_spec) and the options side
# (autorl.task_options) are re-exported here for callers of autorl.tasks.
__all__ = [
    "AGENT_SUBPACKAGE",
    "PACKAGE",
    "Builder",
    "EpisodeEnvs",
    "EvalContext",
    "EvalResult",
    "Evaluator",
    "TaskData",
    "TaskOptions",
    "TaskSpec",
    "build_options",
    "build_task_data",
    "discover_tasks",
    "eval_options",
    "get_task",
    "load_entry_point",
    "load_evaluator",
    "load_task_module",
    "option",
    "option_class",
    "parse_manifest",
    "plain",
    "task_options",
    "typed_options",
]

if TYPE_CHECKING:
    from autorl.engine.base import GenerationEngine

_MARKER = "COMPLETE.json"
T = TypeVar("T")


@dataclass(frozen=True)
class TaskData:
    """A built task data set.

    Attributes:
        public_dir: Data the agent may see (mounted into the workspace).
        private_dir: Data only the evaluator reads.
        source: The data source it was built from (``"fixture"``, ``"hub"``, ...).
        digest: sha256 over the built files' relative paths and bytes.
    """

    public_dir: Path
    private_dir: Path
    source: str
    digest: str


@dataclass(frozen=True)
class EvalResult:
    """What an evaluator returns.

    Attributes:
        score: The task's score, 0 to 100.
        num_examples: How many eval items were scored.
        details: Task-specific extras, e.g. ``{"correct": k, "samples": [...]}``.
    """

    score: float
    num_examples: int
    details: dict[str, Any]


class EpisodeEnvs(Protocol):
    """The environments an interactive task's evaluator plays its episodes through, bound to its
    data.

    In a sweep this is an :class:`autorl.envs.host.EpisodeClient` over the EnvPool (or in-process
    environments); :func:`agent_kit.rollout.play` takes the same shape. Declared here rather than
    imported so that the task contract does not depend on ``autorl.envs`` (which depends on it).
    Each result is an :class:`agent_kit.protocol.StepResult`.
    """

    def reset(self, episode_ids: list[str]) -> list[tuple[str, Any]]:
        """Start these episodes; returns a handle and the first observation of each."""
        ...

    def step(self, moves: list[tuple[str, str]]) -> list[Any]:
        """One action per ``(handle, action)``."""
        ...

    def close(self, handles: list[str]) -> None:
        """End episodes by handle."""
        ...


@dataclass(frozen=True)
class EvalContext:
    """Everything an evaluator gets besides the engine.

    Attributes:
        private_dir: The task's built private data (the eval split).
        options: The task's eval options: an instance of its source's eval class (``options.py``),
            as :meth:`for_task` makes it, or a complete mapping; the evaluator reads them with
            :meth:`options_as`.
        cache_dir: A folder the task may keep answers in across scorings (judge verdicts).
        envs: Interactive tasks: the client their episodes are played through (an EnvPool or
            in-process environments), bound to this data; ``None`` for static tasks.
    """

    private_dir: Path
    options: Any = field(default_factory=dict)
    cache_dir: Path | None = None
    envs: EpisodeEnvs | None = None

    def options_as(self, cls: type[T]) -> T:
        """The eval options as an instance of ``cls`` (the task's eval class, or a base of it).

        A mapping (a hand-made context) must name every option: a partial one would get the
        defaults of ``cls``, which may be another source's.

        Raises:
            TaskError: An unknown or missing option, or a value of the wrong type.
        """
        typed: T = typed_options(cls, self.options, what=f"{_task_of(cls)} eval", complete=True)
        return typed

    @classmethod
    def for_task(
        cls,
        spec: TaskSpec,
        source: str,
        private_dir: Path,
        overrides: Mapping[str, Any] | None = None,
        *,
        cache_dir: Path | None = None,
        envs: EpisodeEnvs | None = None,
    ) -> EvalContext:
        """A context with typed eval options: ``overrides`` over the defaults of the source's class.

        Args:
            spec: The task.
            source: The data source ``private_dir`` was built from.
            private_dir: The built private data.
            overrides: Eval options that differ from the defaults (``options.py``).
            cache_dir: Where the task may cache answers (``None``: no cache).
            envs: Interactive tasks: the episode client (``None``: in-process environments).

        Raises:
            TaskError: Unknown source, an override that is not an eval option of the task, or a
                value of the wrong type.
        """
        options: object = typed_options(
            option_class(spec, "eval", source), overrides, what=f"{spec.id} eval"
        )
        return cls(Path(private_dir), options, cache_dir, envs)


class Evaluator(Protocol):
    """A task's evaluator: score one model (behind a generation engine) on the private split."""

    def __call__(self, engine: GenerationEngine, ctx: EvalContext) -> EvalResult:
        """Return the score; a model that cannot be evaluated raises (the caller records why)."""
        ...


class Builder(Protocol):
    """A task's builder for one data source: fill ``public`` (agent) and ``private`` (grader).

    ``options`` is an instance of the source's build class (``options.py``).
    """

    def __call__(self, public: Path, private: Path, *, seed: int, options: Any) -> None:
        """Write the data; raise with a message naming what is missing when it cannot."""
        ...


def _task_of(cls: type) -> str:
    """The task id of an options class defined in a task folder (``autorl.task_code.<id>...``)."""
    parts = cls.__module__.split(".")
    return (
        parts[2]
        if cls.__module__.startswith(PACKAGE + ".") and len(parts) > 2
        else cls.__qualname__
    )


def load_task_module(spec: TaskSpec, filename: str) -> ModuleType:
    """Import one file of the task folder, e.g. ``"evaluate.py"`` or ``"agent/protocol.py"``.

    Raises:
        TaskError: The file is missing.
    """
    path = spec.folder / filename
    if not path.is_file():
        raise TaskError(f"task '{spec.id}' has no {filename} (expected {path})")
    parts = [part for part in Path(filename).with_suffix("").parts if part != "__init__"]
    _check_package(spec)
    return importlib.import_module(".".join([spec.package, *parts]))


def _check_package(spec: TaskSpec) -> None:
    """Fail when ``autorl.task_code.<id>`` resolves to another folder than ``spec.folder`` (two
    task folders with one id on the search path)."""
    package = importlib.import_module(spec.package)
    locations = [Path(p).resolve() for p in getattr(package, "__path__", [])]
    if spec.folder.resolve() not in locations:
        raise TaskError(
            f"task id '{spec.id}' is taken by {', '.join(map(str, locations))}; "
            f"rename the folder {spec.folder} (task ids must be unique)"
        )


def load_entry_point(spec: TaskSpec, name: str) -> Any:
    """The object the manifest names as entry point ``name`` (``evaluate``, ``env``, ``recipe``).

    Raises:
        TaskError: The task has no such entry point, or its target does not import.
    """
    if name not in spec.entry_points:
        raise TaskError(
            f"task '{spec.id}' names no '{name}' entry point in {spec.folder / 'task.yaml'}"
        )
    package = f"{spec.package}.{AGENT_SUBPACKAGE}" if name == "recipe" else spec.package
    _check_package(spec)
    try:
        return load_object(
            spec.entry_points[name], package=package, what=f"task '{spec.id}' {name}"
        )
    except ConfigError as error:
        raise TaskError(str(error)) from error


def _options_digest(options: dict[str, Any]) -> str:
    blob = json.dumps(options, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        h.update(rel.encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def _cached(final: Path, source: str) -> TaskData | None:
    marker = final / _MARKER
    if not marker.is_file():
        return None
    digest = json.loads(marker.read_text(encoding="utf-8"))["digest"]
    return TaskData(final / "public", final / "private", source, digest)


def _run_builder(spec: TaskSpec, source: str, folder: Path, seed: int, options: object) -> None:
    """Call the manifest's builder for ``source``; a builder's own failure becomes a
    :class:`TaskError`."""
    _check_package(spec)
    try:
        build: Builder = load_object(
            spec.builders[source], package=spec.package, what=f"task '{spec.id}' {source} builder"
        )
    except ConfigError as error:
        raise TaskError(str(error)) from error
    try:
        build(folder / "public", folder / "private", seed=seed, options=options)
    except AutorlError:
        raise
    except Exception as exc:
        raise TaskError(
            f"building task '{spec.id}' from source '{source}' failed: {type(exc).__name__}: {exc}"
        ) from exc


def build_task_data(
    spec: TaskSpec,
    source: str,
    cache_root: Path,
    *,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
) -> TaskData:
    """Build (or reuse) a task's public and private data.

    The data lands in ``cache_root/<id>/v<version>/<source>-seed<seed>-<options digest>/``.
    It is built into a temporary folder and renamed into place with a completion marker,
    under a file lock, so concurrent builders are safe and a crashed build is never reused.
    The source is never switched: a failing ``hub`` build raises instead of using the fixture.

    Args:
        spec: The task.
        source: One of ``spec.sources``.
        cache_root: Root of the data cache.
        seed: Seed for generated (fixture) data.
        options: Builder options that differ from the defaults of the source's build class
            (``options.py``); the builder gets an instance with these over the defaults, and the
            complete options are part of the cache key (so ``{}`` and the defaults spelled out
            share one build).

    Returns:
        Where the data is, with its source and digest.

    Raises:
        TaskError: Unknown source, an unknown option (the message lists the valid ones), a value
            of the wrong type, or the builder failed.
    """
    typed: object = typed_options(
        option_class(spec, "build", source), options, what=f"{spec.id} build"
    )
    opts = plain(typed)
    parent = Path(cache_root) / spec.id / f"v{spec.version}"
    final = parent / f"{source}-seed{seed}-{_options_digest(opts)}"
    if (done := _cached(final, source)) is not None:
        return done
    parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        if (done := _cached(final, source)) is not None:
            return done
        if final.exists():
            shutil.rmtree(final)  # left by a build that died after the rename; never trusted
        tmp = parent / f".tmp-{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            (tmp / "public").mkdir(parents=True)
            (tmp / "private").mkdir()
            _run_builder(spec, source, tmp, seed, typed)
            digest = _tree_digest(tmp)
            meta = {
                "task": spec.id,
                "version": spec.version,
                "source": source,
                "seed": seed,
                "options": opts,
                "digest": digest,
            }
            (tmp / _MARKER).write_text(
                json.dumps(meta, sort_keys=True, default=str), encoding="utf-8"
            )
            tmp.rename(final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return TaskData(final / "public", final / "private", source, digest)


def load_evaluator(spec: TaskSpec) -> Evaluator:
    """Return the task's :class:`Evaluator` (its ``evaluate`` entry point).

    Raises:
        TaskError: The entry point is missing or not callable.
    """
    evaluate = load_entry_point(spec, "evaluate")
    if not callable(evaluate):
        raise TaskError(
            f"task '{spec.id}': entry point 'evaluate' ({spec.entry_points['evaluate']}) is not "
            "callable"
        )
    evaluator: Evaluator = evaluate
    return evaluator
