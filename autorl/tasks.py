"""The task contract: discover task folders, build their data, and load their evaluators.

A task lives in ``tasks/<id>/`` with ``task.yaml``, ``description.md``, ``build.py`` and
``evaluate.py``. ``tasks/`` is not a package: ``build.py`` and ``evaluate.py`` are loaded by
path under private module names, so a top-level ``tasks`` import can never collide with
anything. Importing this module is cheap (no torch, transformers, datasets or Ray).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from filelock import FileLock

from autorl.errors import AutorlError, TaskError

REPO_ROOT = Path(__file__).resolve().parent.parent
TASKS_DIR = REPO_ROOT / "tasks"

LEVELS = ("L1", "L2", "L3")
KINDS = ("static", "interactive")
REQUIRED_KEYS = ("id", "name", "version", "level", "kind", "description", "sources")
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
        sources: Data sources the builder accepts, e.g. ``("fixture", "hub")``.
        env: Environment for interactive tasks (``"none"`` for static ones).
    """

    id: str
    name: str
    version: int
    level: str
    kind: str
    description: str
    folder: Path
    sources: tuple[str, ...]
    env: str = field(default="none")

    @property
    def description_md(self) -> Path:
        """The agent-facing task description."""
        return self.folder / "description.md"


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


Evaluator = Callable[..., EvalResult]


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
    sources = raw["sources"]
    if not isinstance(sources, list) or not sources or not all(isinstance(s, str) for s in sources):
        raise TaskError(f"{path}: 'sources' must be a non-empty list of names, e.g. [fixture, hub]")
    return TaskSpec(
        id=str(raw["id"]),
        name=str(raw["name"]),
        version=raw["version"],
        level=raw["level"],
        kind=raw["kind"],
        description=description.strip(),
        folder=folder,
        sources=tuple(sources),
        env=str(raw.get("env", "none")),
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
    return {p.parent.name: _parse_manifest(p) for p in sorted(tasks_dir.glob("*/task.yaml"))}


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
    """Load ``<task folder>/<filename>`` by path as module ``autorl_task_<id>_<stem>``.

    The module is loaded once and reused until the file changes, so classes and functions
    keep one identity across calls.

    Raises:
        TaskError: The file is missing or cannot be loaded as a module.
    """
    path = spec.folder / filename
    if not path.is_file():
        raise TaskError(f"task '{spec.id}' has no {filename} (expected {path})")
    name = f"autorl_task_{spec.id}_{path.stem}"
    stamp = (str(path), path.stat().st_mtime_ns)
    cached = sys.modules.get(name)
    if cached is not None and getattr(cached, "__autorl_stamp__", None) == stamp:
        return cached
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise TaskError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    setattr(module, "__autorl_stamp__", stamp)
    # Registered before exec so dataclasses and pickling inside the module can find it.
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


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
            build = getattr(load_task_module(spec, "build.py"), "build")
            try:
                build(source, tmp / "public", tmp / "private", seed=seed, options=opts)
            except AutorlError:
                raise
            except Exception as exc:
                raise TaskError(
                    f"building task '{spec.id}' from source '{source}' failed: {type(exc).__name__}: {exc}"
                ) from exc
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
    """Return the task's ``evaluate(engine, private_dir, *, options) -> EvalResult``.

    Raises:
        TaskError: ``evaluate.py`` is missing or defines no ``evaluate``.
    """
    module = load_task_module(spec, "evaluate.py")
    evaluate = getattr(module, "evaluate", None)
    if not callable(evaluate):
        raise TaskError(f"{spec.folder / 'evaluate.py'} defines no evaluate() function")
    return evaluate
