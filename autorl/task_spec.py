"""Task folders and their manifests: what a task is, and where the tasks are.

A task is one folder, ``tasks/<id>/`` (or a plugin's ``tasks/<id>/``), imported as the package
``autorl.task_code.<id>``; its ``task.yaml`` names every entry point as a ``module:attr`` string
relative to that package (see :mod:`autorl.tasks` for the whole contract). Reading manifests
imports no task code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from autorl.errors import TaskError
from autorl.plugins import task_dirs
from autorl.task_code import add_tasks_dir

PACKAGE = "autorl.task_code"
AGENT_SUBPACKAGE = "agent"
LEVELS = ("L1", "L2", "L3")
KINDS = ("static", "interactive")
REQUIRED_KEYS = ("id", "name", "version", "level", "kind", "description", "sources", "entry_points")
ENTRY_POINTS = ("evaluate", "env", "recipe")


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
        fixed_sources: The sources whose data does not depend on the build seed (``fixed_sources`` in
            ``task.yaml``, e.g. ``[hub]``): they have no dev split for ``grading.feedback=dev``.
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
    fixed_sources: tuple[str, ...] = ()

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


def _entry_map(path: Path, raw: dict[str, Any], key: str) -> dict[str, str]:
    value = raw[key]
    if not isinstance(value, dict) or not value or not all(
            isinstance(k, str) and isinstance(v, str) and ":" in v for k, v in value.items()):
        raise TaskError(f"{path}: '{key}' must map names to 'module:attr' strings, e.g. "
                        "{fixture: 'fixture:build'} or {evaluate: 'evaluate:evaluate'}")
    return {str(k): str(v) for k, v in value.items()}


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """The YAML mapping in ``path`` (a manifest or a task's run-knob file).

    Raises:
        TaskError: Not valid YAML, or not a mapping; the message names the file.
    """
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise TaskError(f"{path}: not valid YAML ({exc})") from exc
    if not isinstance(raw, dict):
        raise TaskError(f"{path}: expected a mapping of keys, got {type(raw).__name__}")
    return raw


def parse_manifest(path: Path) -> TaskSpec:
    """Read and check one ``task.yaml``.

    Raises:
        TaskError: Naming the file and what is wrong in it.
    """
    raw = read_yaml_mapping(path)
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
    fixed = raw.get("fixed_sources", [])
    if not isinstance(fixed, list) or not set(fixed) <= set(builders):
        raise TaskError(f"{path}: 'fixed_sources' must list some of the sources ({', '.join(builders)}), got {fixed!r}")
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
        fixed_sources=tuple(str(f) for f in fixed),
    )


def discover_tasks(tasks_dir: Path | None = None) -> dict[str, TaskSpec]:
    """Read every ``<folder>/*/task.yaml`` of autorl's ``tasks/`` and each active plugin's ``tasks/``.

    Args:
        tasks_dir: Read only this folder instead (one sub-folder per task), e.g. in tests.

    Returns:
        Task id to spec, sorted by id.

    Raises:
        TaskError: A manifest is malformed (the message names the file and the problem), or two
            folders hold the same task id (it names both).
        ConfigError: A folder in ``AUTORL_PLUGIN_PATH`` is not a plugin folder.
    """
    folders = [Path(tasks_dir)] if tasks_dir is not None else task_dirs()
    tasks: dict[str, TaskSpec] = {}
    for folder in folders:
        for manifest in sorted(folder.glob("*/task.yaml")):
            spec = parse_manifest(manifest)
            if spec.id in tasks:
                raise TaskError(
                    f"task id '{spec.id}' is in two folders: {tasks[spec.id].folder} and {spec.folder}; "
                    "task ids must be unique across autorl's tasks/ and the plugins' (AUTORL_PLUGIN_PATH, "
                    "plugins=[...]): rename one folder and the id in its task.yaml"
                )
            tasks[spec.id] = spec
        add_tasks_dir(folder)
    return dict(sorted(tasks.items()))


def get_task(task_id: str, tasks_dir: Path | None = None) -> TaskSpec:
    """Return one task's spec (from :func:`discover_tasks`).

    Raises:
        TaskError: No such task; the message lists the valid ids.
    """
    tasks = discover_tasks(tasks_dir)
    if task_id not in tasks:
        raise TaskError(f"unknown task '{task_id}'; valid tasks: {', '.join(tasks) or '(none)'}")
    return tasks[task_id]
