"""Task folders and their manifests: what a task is, and where the tasks are.

A task is one folder, ``tasks/<id>/`` (or a plugin's ``tasks/<id>/``), imported as the package
``autorl.task_code.<id>``; its ``task.yaml`` names every entry point as a ``module:attr`` string
relative to that package (see :mod:`autorl.tasks` for the whole contract). Reading manifests
imports no task code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)

from autorl.errors import TaskError
from autorl.plugins import task_dirs
from autorl.task_code import add_tasks_dir

PACKAGE = "autorl.task_code"
AGENT_SUBPACKAGE = "agent"
LEVELS = ("L1", "L2", "L3")
KINDS = ("static", "interactive")
ENTRY_POINTS = ("evaluate", "options", "env", "recipe")
# A manifest's entry point: ``module:attr`` relative to the task package.
EntryPoint = Annotated[str, StringConstraints(pattern=r"^[\w.]+:[\w.]+$")]


class EnvPoolDefaults(BaseModel):
    """An interactive task's environment pool (the sweep's ``envpool:<id>``), as in
    ``task.yaml``."""

    model_config = ConfigDict(extra="forbid")

    actors: int = Field(description="Ray actors, each hosting up to envs_per_actor live episodes")
    envs_per_actor: int = Field(description="live episodes per actor")
    cpus_per_actor: float = Field(description="CPUs declared to Ray per actor")
    memory_mb_per_actor: int = Field(description="memory declared to Ray per actor, in MB")
    max_replays: int = Field(
        description="an episode is replayed on a replacement actor at most this often"
    )


class RunDefaults(BaseModel):
    """A task's run defaults (``run:`` in ``task.yaml``); ``task.<key>=...`` overrides each."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(description="the data source a sweep builds by default (a key of sources)")
    budget_s: float = Field(
        gt=0, description="the agent's default budget in seconds (budget.seconds overrides it)"
    )
    env_pool: EnvPoolDefaults | None = Field(
        None, description="interactive tasks: their environment pool"
    )


class Manifest(BaseModel):
    """The schema of ``task.yaml``; keys it does not name (``hub``, ``license``, ``url``) are
    notes."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    name: str
    version: int = Field(strict=True, description="bumped on any change to data or evaluation")
    level: Literal["L1", "L2", "L3"]
    kind: Literal["static", "interactive"]
    description: Annotated[
        str, StringConstraints(strip_whitespace=True, min_length=1, pattern=r"^[^\n]*$")
    ]
    sources: dict[str, EntryPoint] = Field(min_length=1)
    entry_points: dict[Literal["evaluate", "options", "env", "recipe"], EntryPoint]
    fixed_sources: list[str] = []
    run: RunDefaults

    @field_validator("entry_points")
    @classmethod
    def _required_entry_points(cls, value: dict[str, str]) -> dict[str, str]:
        missing = [name for name in ("evaluate", "options") if name not in value]
        if missing:
            raise ValueError(
                f"needs {' and '.join(missing)} (e.g. evaluate: 'evaluate:evaluate', "
                "options: 'options:OPTIONS')"
            )
        return value


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
        entry_points: ``evaluate`` and ``options`` (required), ``env`` (interactive tasks),
            ``recipe`` (the scripted agent's, relative to ``agent/``), each a ``module:attr``.
        fixed_sources: The sources whose data does not depend on the build seed (``fixed_sources``
            in ``task.yaml``, e.g. ``[hub]``): they have no dev split for ``grading.feedback=dev``.
        run: The run defaults a sweep starts from (source, budget, environment pool).
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
    run: RunDefaults = field(
        default_factory=lambda: RunDefaults(source="fixture", budget_s=480, env_pool=None),
        hash=False,
        compare=False,
    )

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


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """The YAML mapping in ``path`` (a manifest).

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


def _manifest_error(path: Path, error: ValidationError) -> TaskError:
    """pydantic's refusal of a manifest as one line per problem, each naming its key."""
    problems = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "(top level)"
        if item["type"] == "missing":
            problems.append(f"missing required key '{key}'")
        elif key.startswith(("sources", "entry_points")) and item["type"] in (
            "string_pattern_mismatch",
            "dict_type",
        ):
            top = key.split(".")[0]
            problems.append(
                f"'{top}' must map names to 'module:attr' strings, e.g. "
                "{fixture: 'fixture:build'} or {evaluate: 'evaluate:evaluate'} (at '{key}')"
            )
        elif item["type"] == "literal_error" and key.startswith("entry_points"):
            problems.append(
                f"unknown entry point {item.get('input')!r}; valid: {', '.join(ENTRY_POINTS)}"
            )
        elif item["type"] == "extra_forbidden":
            problems.append(f"unknown key '{key}'")
        else:
            problems.append(f"'{key}': {item['msg']} (got {item.get('input')!r})")
    return TaskError(f"{path}: " + "; ".join(problems))


def parse_manifest(path: Path) -> TaskSpec:
    """Read and check one ``task.yaml`` against :class:`Manifest`.

    Raises:
        TaskError: Naming the file, the key and what is wrong with it.
    """
    raw = read_yaml_mapping(path)
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as error:
        raise _manifest_error(path, error) from error
    folder = path.parent
    if manifest.id != folder.name:
        raise TaskError(f"{path}: id '{manifest.id}' must equal the folder name '{folder.name}'")
    if (manifest.kind == "interactive") != ("env" in manifest.entry_points):
        raise TaskError(
            f"{path}: an interactive task names an 'env' entry point and a static one does not"
        )
    if (manifest.kind == "interactive") != (manifest.run.env_pool is not None):
        raise TaskError(
            f"{path}: an interactive task has a run.env_pool block (actors, envs_per_actor, "
            "cpus_per_actor, memory_mb_per_actor, max_replays) and a static one does not"
        )
    if not set(manifest.fixed_sources) <= set(manifest.sources):
        raise TaskError(
            f"{path}: 'fixed_sources' must list some of the sources "
            f"({', '.join(manifest.sources)}), "
            f"got {manifest.fixed_sources!r}"
        )
    if manifest.run.source not in manifest.sources:
        raise TaskError(
            f"{path}: run.source '{manifest.run.source}' is not one of the sources "
            f"({', '.join(manifest.sources)})"
        )
    return TaskSpec(
        id=manifest.id,
        name=manifest.name,
        version=manifest.version,
        level=manifest.level,
        kind=manifest.kind,
        description=manifest.description,
        folder=folder,
        builders=dict(manifest.sources),
        entry_points={str(k): v for k, v in manifest.entry_points.items()},
        fixed_sources=tuple(manifest.fixed_sources),
        run=manifest.run,
    )


# Parsed manifests by path, with the file's identity when it was read: a sweep asks for its tasks'
# specs once per cell, and a manifest changed on disk is read again.
_MANIFESTS: dict[Path, tuple[tuple[int, int, int], TaskSpec]] = {}


def _read_manifest(path: Path) -> TaskSpec:
    """:func:`parse_manifest`, read again only when the file changed (inode, size, mtime)."""
    stat = path.stat()
    identity = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
    cached = _MANIFESTS.get(path)
    if cached is not None and cached[0] == identity:
        return cached[1]
    spec = parse_manifest(path)
    _MANIFESTS[path] = (identity, spec)
    return spec


def discover_tasks(tasks_dir: Path | None = None) -> dict[str, TaskSpec]:
    """Read every ``<folder>/*/task.yaml`` of autorl's ``tasks/`` and each active plugin's
    ``tasks/``.

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
            spec = _read_manifest(manifest)
            if spec.id in tasks:
                raise TaskError(
                    f"task id '{spec.id}' is in two folders: {tasks[spec.id].folder} and "
                    f"{spec.folder}; "
                    "task ids must be unique across autorl's tasks/ and the plugins' "
                    "(AUTORL_PLUGIN_PATH, "
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
