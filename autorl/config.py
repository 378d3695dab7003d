"""From command-line overrides to the grid of typed cells: axis parsing, expansion and Hydra
composition.

``autorl.sweep`` is not a ``@hydra.main`` app: there, a group missing from the defaults list cannot
be overridden, and a sweep's axes are groups (docs/design.md#commands). It parses argv with Hydra's
override grammar, expands the axes ``agent, driver, task, model, seed`` itself and composes each
cell with the Compose API against the schema of :mod:`autorl.schema`: an unknown key or a value of
the wrong type is refused here, before anything starts, as a :class:`ConfigError` that names the
key and the likely fix (:mod:`autorl.config_errors`). Each cell carries the typed
:class:`autorl.schema.RunConfig`.

The ``task`` group has no files: each task folder's run defaults and typed options are stored in
Hydra's ConfigStore before every composition (:func:`autorl.task_options.register_task_configs`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
import types
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autorl.agent_schema import CommandAgentConfig, ScriptedAgentConfig
from autorl.config_errors import config_error
from autorl.errors import ConfigError
from autorl.grid import CellSpec, LeftOut, grid_cells, pair_problem
from autorl.registry import AXES, CONF_DIR, GROUPS, check_names, grid_names
from autorl.schema import DriverConfig, ModelKind, RunConfig, register_schemas
from autorl.task_options import plain, register_task_configs

if TYPE_CHECKING:
    from omegaconf import DictConfig

# Pass-through keys that change where or how a sweep is shown, not what its cells compute:
# they are left out of the sweep id, so re-running with them still resumes the same sweep.
# (``plugins`` says where task and option files are found; the cells name what they run.)
_PRESENTATION_KEYS = (
    "out_dir",
    "dry_run",
    "progress",
    "sweep_id",
    "cache_dir",
    "cluster",
    "scheduler",
    "hydra",
    "tracking",
    "plugins",
)
# Hydra's Compose API keeps global state: one composition at a time in a process (the judges of a
# grader and the report's summariser load drivers from threads).
_COMPOSE_LOCK = threading.Lock()


@dataclass(frozen=True)
class SweepPlan:
    """Everything the sweep command decided before starting anything."""

    sweep_id: str
    sweep_dir: Path
    cells: list[CellSpec]
    base_config: RunConfig
    left_out: list[LeftOut] = field(default_factory=list)


def parse_argv(argv: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """Split overrides into sweep axes (name → values) and pass-through overrides.

    Raises:
        ConfigError: on malformed overrides, or a comma list on a key that is not an axis.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        overrides = OverridesParser.create().parse_overrides(argv)
    except OverrideParseException as error:
        raise ConfigError(f"cannot parse the overrides {argv}: {error}") from error
    axes: dict[str, list[str]] = {}
    passthrough: list[str] = []
    for override in overrides:
        key = override.get_key_element()
        if key in AXES:
            if override.is_sweep_override():
                values = list(override.sweep_string_iterator())
            else:
                values = [str(override.get_value_element_as_str())]
            axes[key] = values
        elif override.is_sweep_override():
            raise ConfigError(
                f"{override.input_line!r}: only the axes {', '.join(AXES)} take comma lists; "
                f"run one sweep per value of {key!r}, or make it an axis"
            )
        else:
            passthrough.append(str(override.input_line))  # set for every override parsed from text
    return axes, passthrough


def expand_axes(axes: dict[str, list[str]], defaults: dict[str, str]) -> dict[str, list[str]]:
    """Resolve ``all`` and defaults for every axis and validate every name.

    ``all`` is the options that do not set ``in_grid: false``: the benchmark's agents and LLM
    drivers, without probes, ``driver=none`` and ``driver=local``, which run only when named.

    Raises:
        ConfigError: on an unknown name (with "did you mean" and the valid names) or a bad seed.
    """
    resolved: dict[str, list[str]] = {}
    for axis in AXES:
        values = axes.get(axis, [str(defaults[axis])])
        if axis == "seed":
            for value in values:
                if not value.lstrip("-").isdigit():
                    raise ConfigError(
                        f"seed must be an integer or a comma list of integers, got {value!r}"
                    )
            resolved[axis] = list(dict.fromkeys(values))
            continue
        if values == ["all"]:
            values = grid_names(axis)
        check_names(axis, values)
        resolved[axis] = list(dict.fromkeys(values))
    return resolved


def _compose_dict(overrides: Sequence[str]) -> DictConfig:
    """Hydra's composition of ``conf/config.yaml`` with ``overrides`` (the caller holds the
    lock)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    register_schemas()
    register_task_configs()  # the task group: one option per task folder, autorl's and the plugins'
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        try:
            return hydra_compose(config_name="config", overrides=list(overrides))
        except AttributeError:
            # OmegaConf 2.3 cannot merge a mapping into a typed setting that is null
            # (driver.price_per_mtok is null, then driver.price_per_mtok={input: 1.0, output: 4.0}):
            # compose without such overrides, then assign them whole (the schema still checks them).
            plain, mappings = _split_mapping_overrides(overrides)
            if not mappings:
                raise
            config = hydra_compose(config_name="config", overrides=plain)
            for key, value in mappings:
                schema = _settings_class(key)
                OmegaConf.update(
                    config,
                    key,
                    OmegaConf.merge(OmegaConf.structured(schema), value) if schema else value,
                    merge=False,
                )
            return config


def _settings_class(key: str) -> type | None:
    """The dataclass the schema declares at ``key`` (``driver.price_per_mtok`` -> PricePerMtok), if
    one.

    >>> _settings_class("driver.price_per_mtok").__name__, _settings_class("seed")
    ('PricePerMtok', None)
    """
    kind: Any = RunConfig
    for part in key.split("."):
        if not dataclasses.is_dataclass(kind):
            return None
        kind = typing.get_type_hints(kind).get(part)
        if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:  # X | None
            kind = next((arg for arg in typing.get_args(kind) if arg is not type(None)), None)
    return kind if isinstance(kind, type) and dataclasses.is_dataclass(kind) else None


def _split_mapping_overrides(
    overrides: Sequence[str],
) -> tuple[list[str], list[tuple[str, dict[str, Any]]]]:
    """Split off the ``key={...}`` overrides (a mapping value, no ``+``/``~`` prefix) from the
    others."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType

    plain: list[str] = []
    mappings: list[tuple[str, dict[str, Any]]] = []
    for line, override in zip(
        overrides, OverridesParser.create().parse_overrides(list(overrides)), strict=True
    ):
        value = override.value()
        if override.type == OverrideType.CHANGE and isinstance(value, dict):
            mappings.append((override.get_key_element(), value))
        else:
            plain.append(line)
    return plain, mappings


def _search_path_overrides() -> list[str]:
    """``hydra.searchpath=[...]`` for the active plugins' ``conf/`` folders; ``[]`` without
    plugins."""
    from autorl.plugins import searchpath_overrides

    return searchpath_overrides()


def compose(overrides: Sequence[str]) -> RunConfig:
    """Compose ``conf/config.yaml`` with ``overrides`` into the typed, resolved config of one cell.

    The active plugins' option folders are on the search path (:mod:`autorl.plugins`).

    Raises:
        ConfigError: Hydra or the schema refuses an override or a config file (unknown key, wrong
            type, a value given for a group of settings, a missing value); the message names the
            full key and, where one is close, the right one.
    """
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    user = list(overrides)
    search_path = _search_path_overrides()
    with _COMPOSE_LOCK:
        try:
            composed = _compose_dict([*search_path, *user])
            _check_task_options(composed)
            config = OmegaConf.to_object(composed)
        except (HydraException, OmegaConfBaseException) as error:
            raise config_error(
                error, user, skeleton=lambda kept: _compose_dict([*search_path, *kept])
            ) from error
        except (
            AssertionError
        ) as error:  # OmegaConf asserts when a key is forced under a null setting
            raise ConfigError(
                f"invalid overrides {user}: one sets a key under a setting that is null in this "
                "config "
                "(e.g. ++task.env_pool.actors=1 for a task without an env_pool); set it only for "
                "cells that have it"
            ) from error
    if not isinstance(
        config, RunConfig
    ):  # conf/config.yaml's defaults list must start with run_schema
        raise ConfigError(
            f"{CONF_DIR / 'config.yaml'} did not compose to a RunConfig: its defaults list must "
            "start with run_schema"
        )
    # The options travel as plain dicts (records, score cache keys, Ray); builders and evaluators
    # get them typed again from the task's classes.
    task = config.task
    task.build = {source: plain(options) for source, options in task.build.items()}
    task.eval = {source: plain(options) for source, options in task.eval.items()}
    return config


def _check_task_options(composed: DictConfig) -> None:
    """Refuse task options that a ``+key=...`` override added to a task's typed options, which
    OmegaConf would drop in silence when it builds the dataclass.

    Raises:
        ConfigError: Naming the key, "did you mean" and the valid keys.
    """
    from omegaconf import OmegaConf

    from autorl.errors import TaskError
    from autorl.task_options import typed_options

    for kind in ("build", "eval"):
        for source, node in (OmegaConf.select(composed, f"task.{kind}") or {}).items():
            cls = OmegaConf.get_type(node)
            if not dataclasses.is_dataclass(cls):
                continue
            try:
                typed_options(cls, OmegaConf.to_container(node), what=f"task.{kind}.{source}")
            except TaskError as error:
                raise ConfigError(f"invalid override: {error}") from error


def load_driver_config(name: str) -> DriverConfig:
    """The driver ``name`` (``conf/driver/<name>.yaml`` on ``_base.yaml``, or a plugin's), typed
    and resolved.

    The one way drivers are read: the cell's gateway gets its driver from the cell's config, and
    the judges and the report's summariser load theirs by name here.

    Raises:
        ConfigError: No such driver ("did you mean" and the valid names), or its file is invalid.
    """
    check_names("driver", [name])
    return compose([f"driver={name}"]).driver


def sweep_id_for(explicit: str | None, passthrough: list[str]) -> str:
    """The sweep id: the explicit one, else ``default`` plus a digest of what changes the cells.

    The same command always maps to the same id, so running it again resumes the sweep, and
    adding axis values grows it.

    >>> sweep_id_for(None, [])
    'default'
    >>> sweep_id_for(None, ["out_dir=/tmp/x", "progress=false"])
    'default'
    >>> sweep_id_for("mine", ["budget.seconds=60"])
    'mine'
    """
    if explicit:
        return explicit
    relevant = sorted(
        o
        for o in passthrough
        if o.lstrip("+~").split("=")[0].split(".")[0] not in _PRESENTATION_KEYS
    )
    if not relevant:
        return "default"
    return "default-" + hashlib.sha256(json.dumps(relevant).encode()).hexdigest()[:8]


def resolve_cache_dir(configured: str | None) -> Path:
    """The cache folder for built models and task data."""
    raw = configured or os.environ.get("AUTORL_CACHE_DIR") or "~/.cache/autorl"
    return Path(raw).expanduser().resolve()


def check_combinations(cells: Iterable[CellSpec]) -> None:
    """Refuse cells that cannot work (every plan, dry runs included).

    Its agent and driver can work together (:func:`autorl.grid.pair_problem`), the task's data
    source is one the task has, and an interactive task has its environment pool.

    Raises:
        ConfigError: naming the cell, the values and what to change.
    """
    from autorl.tasks import get_task

    for cell in cells:
        agent, driver, task = cell.config.agent, cell.config.driver, cell.config.task
        spec = get_task(task.name)
        if task.source not in spec.sources:
            raise ConfigError(
                f"task.source={task.source}: task {task.name!r} has the sources "
                f"{', '.join(spec.sources)} (cell {cell.cell_id})"
            )
        if spec.kind == "interactive" and task.env_pool is None:
            raise ConfigError(
                f"task {task.name!r} is interactive but has no env_pool (run.env_pool in "
                f"{spec.folder / 'task.yaml'}: "
                "actors, envs_per_actor, cpus_per_actor, memory_mb_per_actor, max_replays)"
            )
        if cell.config.grading.feedback == "dev" and task.source in spec.fixed_sources:
            seeded = next((s for s in spec.sources if s not in spec.fixed_sources), "fixture")
            raise ConfigError(
                f"grading.feedback=dev: task {task.name!r} has no dev split from its "
                f"{task.source!r} source, whose data "
                f"does not depend on the build seed (cell {cell.cell_id}); run it with "
                f"grading.feedback=test, or with task.source={seeded}"
            )
        if cell.budget_s <= 0:
            raise ConfigError(
                f"the agent's budget is {cell.budget_s:g} s (cell {cell.cell_id}): give "
                "budget.seconds > 0, or a "
                f"positive run.budget_s in {spec.folder / 'task.yaml'}"
            )
        agent.reprompt.check()
        if isinstance(agent, ScriptedAgentConfig):
            agent.online_grpo.check("agent.", ConfigError)
        cell.config.integrity.check()
        cell.config.grader.check()
        if isinstance(agent, CommandAgentConfig) and not agent.command:
            raise ConfigError(
                f"agent {agent.name!r} runs agent.command, which is empty (cell {cell.cell_id}): "
                "give the command "
                "line to run as the agent, e.g. agent.command=[python3,-I,'{home}/probe.py'] "
                "agent.files=[/abs/probe.py]"
            )
        if cell.config.model.kind == ModelKind.hub and not cell.config.model.hub_id:
            raise ConfigError(
                f"model {cell.config.model.name!r} has kind hub but no hub_id: set model.hub_id "
                f"(cell {cell.cell_id})"
            )
        problem = pair_problem(agent, driver)
        if problem:
            raise ConfigError(f"{problem} (cell {cell.cell_id})")


def _activate_plugins(argv: list[str]) -> None:
    """Make the plugin folders of ``AUTORL_PLUGIN_PATH`` and of a ``plugins=[...]`` override
    usable."""
    from autorl.plugins import activate, from_overrides

    activate(from_overrides(argv))


def plan_sweep(argv: list[str]) -> SweepPlan:
    """Parse, validate and expand ``argv`` into the sweep's cells. Starts nothing.

    Raises:
        ConfigError: on any invalid name, override or config file, before anything starts.
    """
    _activate_plugins(argv)
    axes, passthrough = parse_argv(argv)
    for (
        override
    ) in passthrough:  # a group that is not an axis (cluster=...): a name from its folder
        group, sep, name = override.partition("=")
        if sep and group in GROUPS:
            check_names(group, [name])
    unset = compose([])
    defaults = {
        "agent": unset.agent.name,
        "driver": unset.driver.name,
        "task": unset.task.name,
        "model": unset.model.name,
        "seed": str(unset.seed),
    }
    grid = expand_axes(axes, defaults)
    # The pass-through overrides are checked on the grid's first cell, not on the default task:
    # `++task.env_pool.actors=1` is valid for task=webshop although the default task has no pool.
    base_overrides = [f"{axis}={grid[axis][0]}" for axis in AXES] + passthrough
    base = compose(base_overrides)
    sweep_id = sweep_id_for(base.sweep_id, passthrough)
    sweep_dir = Path(base.out_dir).expanduser().resolve() / sweep_id
    explicit = {axis for axis in AXES if axes.get(axis) != ["all"]}
    cells, left_out = grid_cells(
        compose, grid, explicit, base_overrides, passthrough, base, sweep_id
    )
    if not cells:
        raise ConfigError(
            "the grid has no cell that can run: "
            + "; ".join(f"{o.agent} × {o.driver}: {o.reason}" for o in left_out)
        )
    check_combinations(cells)
    return SweepPlan(
        sweep_id, sweep_dir, cells, dataclasses.replace(base, sweep_id=sweep_id), left_out
    )
