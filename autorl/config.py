"""From command-line overrides to the grid of cells: axis parsing, expansion and Hydra composition.

``autorl.sweep`` is not a ``@hydra.main`` app (a group missing from the defaults list cannot be
overridden there; house-style.md C1). It parses argv with Hydra's override grammar, expands the
axes ``agent, driver, task, model, seed`` itself and composes each cell with the Compose API.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autorl.errors import ConfigError
from autorl.gateway.settings import TRANSLATABLE
from autorl.registry import AXES, CONF_DIR, check_names, option_names

# Pass-through keys that change where or how a sweep is shown, not what its cells compute:
# they are left out of the sweep id, so re-running with them still resumes the same sweep.
_PRESENTATION_KEYS = ("out_dir", "dry_run", "progress", "sweep_id", "cache_dir", "cluster", "scheduler", "hydra", "tracking")


@dataclass(frozen=True)
class CellSpec:
    """One cell of a sweep: an agent × driver × task × model × seed with its composed config."""

    sweep_id: str
    cell_id: str
    agent: str
    driver: str
    task: str
    model: str
    seed: int
    config: dict[str, Any] = field(repr=False, hash=False, compare=False)

    @property
    def budget_s(self) -> float:
        """The agent's wall-clock budget in seconds."""
        return float(self.config["budget"]["seconds"])


@dataclass(frozen=True)
class SweepPlan:
    """Everything the sweep command decided before starting anything."""

    sweep_id: str
    sweep_dir: Path
    cells: list[CellSpec]
    base_config: dict[str, Any]


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
            passthrough.append(override.input_line)
    return axes, passthrough


def expand_axes(axes: dict[str, list[str]], defaults: dict[str, Any]) -> dict[str, list[str]]:
    """Resolve ``all`` and defaults for every axis and validate every name.

    Raises:
        ConfigError: on an unknown name (with "did you mean" and the valid names) or a bad seed.
    """
    resolved: dict[str, list[str]] = {}
    for axis in AXES:
        values = axes.get(axis, [str(defaults[axis])])
        if axis == "seed":
            for value in values:
                if not value.lstrip("-").isdigit():
                    raise ConfigError(f"seed must be an integer or a comma list of integers, got {value!r}")
            resolved[axis] = list(dict.fromkeys(values))
            continue
        if values == ["all"]:
            values = option_names(axis)
        check_names(axis, values)
        resolved[axis] = list(dict.fromkeys(values))
    return resolved


def compose(overrides: list[str]) -> dict[str, Any]:
    """Compose ``conf/config.yaml`` with ``overrides`` and return it as a plain, resolved dict.

    Raises:
        ConfigError: if Hydra rejects an override (unknown key, wrong type, ...).
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=overrides)
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(f"invalid override in {overrides}: {error}") from error


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
    relevant = sorted(o for o in passthrough if o.lstrip("+~").split("=")[0].split(".")[0] not in _PRESENTATION_KEYS)
    if not relevant:
        return "default"
    return "default-" + hashlib.sha256(json.dumps(relevant).encode()).hexdigest()[:8]


def cell_id_for(agent: str, driver: str, task: str, model: str, seed: int) -> str:
    """A readable, deterministic cell id (also the folder name under ``cells/``).

    >>> cell_id_for("scripted", "none", "gsm8k", "tiny", 0)
    'gsm8k.scripted.none.tiny.s0'
    """
    return f"{task}.{agent}.{driver}.{model}.s{seed}"


def resolve_cache_dir(configured: str | None) -> Path:
    """The cache folder for built models and task data."""
    raw = configured or os.environ.get("AUTORL_CACHE_DIR") or "~/.cache/autorl"
    return Path(raw).expanduser().resolve()


def check_combinations(cells: Iterable[CellSpec]) -> None:
    """Refuse agent × driver pairs that cannot work (every plan, dry runs included).

    An agent that needs a driver is not paired with ``driver=none``, and a CLI whose protocol the
    gateway cannot translate (the Gemini CLI's Gemini API) gets a driver that speaks it.

    Raises:
        ConfigError: naming the pair and what to change.
    """
    for cell in cells:
        agent, driver = cell.config["agent"], cell.config["driver"]
        if not agent["needs_driver"]:
            continue
        if driver["provider"] == "none":
            raise ConfigError(
                f"agent {agent['name']!r} needs a driver LLM, but driver=none was given (cell {cell.cell_id}); "
                "choose one with driver=<name> (python -m autorl.ls drivers), e.g. driver=gpt-5"
            )
        protocol = agent["protocol"]
        if protocol not in TRANSLATABLE and protocol not in (driver["protocols"] or {}):
            raise ConfigError(
                f"agent {agent['name']!r} speaks the {protocol} API, which driver {driver['name']!r} does not serve "
                f"(it serves {', '.join(driver['protocols'])}); use a driver that does, e.g. driver=gemini-2.5-flash"
            )


def plan_sweep(argv: list[str]) -> SweepPlan:
    """Parse, validate and expand ``argv`` into the sweep's cells. Starts nothing.

    Raises:
        ConfigError: on any invalid name or override, before anything starts.
    """
    axes, passthrough = parse_argv(argv)
    base = compose(passthrough)
    defaults = {axis: base[axis]["name"] for axis in AXES if axis != "seed"} | {"seed": base["seed"]}
    grid = expand_axes(axes, defaults)
    sweep_id = sweep_id_for(base["sweep_id"], passthrough)
    sweep_dir = Path(base["out_dir"]).expanduser().resolve() / sweep_id
    cells = []
    for agent, driver, task, model, seed in itertools.product(*(grid[axis] for axis in AXES)):
        overrides = [f"agent={agent}", f"driver={driver}", f"task={task}", f"model={model}", f"seed={seed}"]
        config = compose(overrides + passthrough)
        config["sweep_id"] = sweep_id
        cell_id = cell_id_for(agent, driver, task, model, int(seed))
        cells.append(CellSpec(sweep_id, cell_id, agent, driver, task, model, int(seed), config))
    check_combinations(cells)  # e.g. an agent that needs a driver with driver=none
    return SweepPlan(sweep_id, sweep_dir, cells, base)
