"""The task contract: discover task folders, build their data, and load their entry points.

A task is one folder, ``tasks/<id>/``, imported as the package ``autorl.task_code.<id>`` (see
:mod:`autorl.task_code`). Its manifest ``task.yaml`` names every entry point as a ``module:attr``
string relative to that package, so nothing in autorl lists tasks by hand::

    sources:                       # data source -> builder(public, private, *, seed, options)
      fixture: fixture:build
      hub: build:build_hub
    entry_points:
      evaluate: evaluate:evaluate  # Evaluator: (engine, EvalContext) -> EvalResult
      env: env:MyEnv                # interactive tasks: a factory of fresh Env instances
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
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

import yaml
from filelock import FileLock

from autorl.errors import AutorlError, ConfigError, TaskError
from autorl.registry import load_object
from autorl.task_code import TASKS_DIR, add_tasks_dir

if TYPE_CHECKING:
    from autorl.engine.base import GenerationEngine

PACKAGE = "autorl.task_code"
AGENT_SUBPACKAGE = "agent"
LEVELS = ("L1", "L2", "L3")
KINDS = ("static", "interactive")
REQUIRED_KEYS = ("id", "name", "version", "level", "kind", "description", "sources", "entry_points")
ENTRY_POINTS = ("evaluate", "env", "recipe")
_MARKER = "COMPLETE.json"


@dataclass(frozen=True)
class TaskSpec:
    """A task's manifest (``task.yaml``) plus where its folder is.

    Attributes:
        id: Snake-case task id; equals the folder name.
        name: Human-readable name.
        version: Bumped on any change to data or evaluation; part of every cache key.
        level: ``"L1"``, ``"L2"`` or ``"L3"``.
        kind: ``"static"`` or ``"interactive"``.
        description: One-line summary (the agent's full instructions are ``description.md``).
        folder: The task folder.
        builders: Data source (``"fixture"``, ``"hub"``) to its builder's ``module:attr``.
        entry_points: ``evaluate`` (required), ``env`` (interactive tasks), ``recipe`` (the scripted
            agent's, relative to ``agent/``), each a ``module:attr``.
    """

    id: str
    name: str
    version: int
    level: str
    kind: str
    description: str
    folder: Path
    builders: dict[str, str] = field(default_factory=dict, hash=False)
    entry_points: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def sources(self) -> tuple[str, ...]:
        """The data sources the task can be built from, e.g. ``("fixture", "hub")``."""
        return tuple(self.builders)

    @property
    def env(self) -> str:
        """The environment kind of an interactive task (its id), ``"none"`` for a static one."""
        return self.id if "env" in self.entry_points else "none"

    @property
    def package(self) -> str:
        """The package the task folder is imported as."""
        return f"{PACKAGE}.{self.id}"

    @property
    def description_md(self) -> Path:
        """The agent-facing task description."""
        return self.folder / "description.md"

    @property
    def agent_dir(self) -> Path:
        """The agent-side subfolder: the only task code an agent process may import."""
        return self.folder / AGENT_SUBPACKAGE


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
    """The environments an interactive task's evaluator plays its episodes through, bound to its data.

    In a sweep this is an :class:`autorl.envs.host.EpisodeClient` over the EnvPool (or in-process
    environments); :func:`autorl.envs.rollout.play` takes the same shape. Declared here rather than
    imported so that the task contract does not depend on ``autorl.envs`` (which depends on it).
    Each result is an :class:`autorl.envs.base.StepResult`.
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
        options: The task's eval options (``conf/task/<id>.yaml`` ``eval.<source>``).
        cache_dir: A folder the task may keep answers in across scorings (judge verdicts).
        envs: Interactive tasks: the client their episodes are played through (an EnvPool or
            in-process environments), bound to this data; ``None`` for static tasks.
    """

    private_dir: Path
    options: dict[str, Any] = field(default_factory=dict)
    cache_dir: Path | None = None
    envs: EpisodeEnvs | None = None


class Evaluator(Protocol):
    """A task's evaluator: score one model (behind a generation engine) on the private split."""

    def __call__(self, engine: GenerationEngine, ctx: EvalContext) -> EvalResult:
        """Return the score; a model that cannot be evaluated raises (the caller records why)."""
        ...


class Builder(Protocol):
    """A task's builder for one data source: fill ``public`` (agent) and ``private`` (grader)."""

    def __call__(self, public: Path, private: Path, *, seed: int, options: dict[str, Any]) -> None:
        """Write the data; raise with a message naming what is missing when it cannot."""
        ...


def _entry_map(path: Path, raw: dict[str, Any], key: str) -> dict[str, str]:
    value = raw[key]
    if not isinstance(value, dict) or not value or not all(
            isinstance(k, str) and isinstance(v, str) and ":" in v for k, v in value.items()):
        raise TaskError(f"{path}: '{key}' must map names to 'module:attr' strings, e.g. "
                        "{fixture: 'fixture:build'} or {evaluate: 'evaluate:evaluate'}")
    return {str(k): str(v) for k, v in value.items()}


def _parse_manifest(path: Path) -> TaskSpec:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise TaskError(f"{path}: not valid YAML ({exc})") from exc
    if not isinstance(raw, dict):
        raise TaskError(f"{path}: expected a mapping of keys, got {type(raw).__name__}")
    for key in REQUIRED_KEYS:
        if key not in raw:
            raise TaskError(f"{path}: missing required key '{key}' (required: {', '.join(REQUIRED_KEYS)})")
    folder = path.parent
    if raw["id"] != folder.name:
        raise TaskError(f"{path}: id '{raw['id']}' must equal the folder name '{folder.name}'")
    if not isinstance(raw["version"], int) or isinstance(raw["version"], bool):
        raise TaskError(f"{path}: 'version' must be an integer, got {raw['version']!r}")
    if raw["level"] not in LEVELS:
        raise TaskError(f"{path}: 'level' must be one of {LEVELS}, got {raw['level']!r}")
    if raw["kind"] not in KINDS:
        raise TaskError(f"{path}: 'kind' must be one of {KINDS}, got {raw['kind']!r}")
    description = raw["description"]
    if not isinstance(description, str) or not description.strip() or "\n" in description.strip():
        raise TaskError(f"{path}: 'description' must be one non-empty line")
    builders = _entry_map(path, raw, "sources")
    entry_points = _entry_map(path, raw, "entry_points")
    unknown = sorted(set(entry_points) - set(ENTRY_POINTS))
    if unknown:
        raise TaskError(f"{path}: unknown entry point(s) {', '.join(unknown)}; valid: {', '.join(ENTRY_POINTS)}")
    if "evaluate" not in entry_points:
        raise TaskError(f"{path}: entry_points needs 'evaluate' (e.g. evaluate: 'evaluate:evaluate')")
    if (raw["kind"] == "interactive") != ("env" in entry_points):
        raise TaskError(f"{path}: an interactive task names an 'env' entry point and a static one does not")
    return TaskSpec(
        id=str(raw["id"]),
        name=str(raw["name"]),
        version=raw["version"],
        level=raw["level"],
        kind=raw["kind"],
        description=description.strip(),
        folder=folder,
        builders=builders,
        entry_points=entry_points,
    )


def discover_tasks(tasks_dir: Path = TASKS_DIR) -> dict[str, TaskSpec]:
    """Read every ``<tasks_dir>/*/task.yaml``.

    Args:
        tasks_dir: The folder holding one sub-folder per task.

    Returns:
        Task id to spec, sorted by id.

    Raises:
        TaskError: A manifest is malformed; the message names the file and the problem.
    """
    tasks = {p.parent.name: _parse_manifest(p) for p in sorted(Path(tasks_dir).glob("*/task.yaml"))}
    add_tasks_dir(Path(tasks_dir))
    return tasks


def get_task(task_id: str, tasks_dir: Path = TASKS_DIR) -> TaskSpec:
    """Return one task's spec.

    Raises:
        TaskError: No such task; the message lists the valid ids.
    """
    tasks = discover_tasks(tasks_dir)
    if task_id not in tasks:
        raise TaskError(f"unknown task '{task_id}'; valid tasks: {', '.join(tasks) or '(none)'}")
    return tasks[task_id]


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
        raise TaskError(f"task id '{spec.id}' is taken by {', '.join(map(str, locations))}; "
                        f"rename the folder {spec.folder} (task ids must be unique)")


def load_entry_point(spec: TaskSpec, name: str) -> Any:
    """The object the manifest names as entry point ``name`` (``evaluate``, ``env``, ``recipe``).

    Raises:
        TaskError: The task has no such entry point, or its target does not import.
    """
    if name not in spec.entry_points:
        raise TaskError(f"task '{spec.id}' names no '{name}' entry point in {spec.folder / 'task.yaml'}")
    package = f"{spec.package}.{AGENT_SUBPACKAGE}" if name == "recipe" else spec.package
    _check_package(spec)
    try:
        return load_object(spec.entry_points[name], package=package, what=f"task '{spec.id}' {name}")
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


def _run_builder(spec: TaskSpec, source: str, folder: Path, seed: int, options: dict[str, Any]) -> None:
    """Call the manifest's builder for ``source``; a builder's own failure becomes a :class:`TaskError`."""
    _check_package(spec)
    try:
        build: Builder = load_object(spec.builders[source], package=spec.package, what=f"task '{spec.id}' {source} builder")
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
    options: dict[str, Any] | None = None,
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
        options: Builder options (e.g. ``train_size``); part of the cache key.

    Returns:
        Where the data is, with its source and digest.

    Raises:
        TaskError: Unknown source, or the builder failed.
    """
    if source not in spec.sources:
        raise TaskError(f"task '{spec.id}' has no source '{source}'; valid sources: {', '.join(spec.sources)}")
    opts = dict(options or {})
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
            _run_builder(spec, source, tmp, seed, opts)
            digest = _tree_digest(tmp)
            meta = {"task": spec.id, "version": spec.version, "source": source, "seed": seed,
                    "options": opts, "digest": digest}
            (tmp / _MARKER).write_text(json.dumps(meta, sort_keys=True, default=str), encoding="utf-8")
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
        raise TaskError(f"task '{spec.id}': entry point 'evaluate' ({spec.entry_points['evaluate']}) is not callable")
    evaluator: Evaluator = evaluate
    return evaluator
