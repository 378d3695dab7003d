"""A sweep's grid: which agent × driver pairs it holds, and its cells composed once per part.

Composing a cell with Hydra takes a fraction of a second; a paper-sized grid has hundreds of cells
but only a few dozen distinct parts: each agent's, driver's, task's and model's settings do not
depend on the other axes (their option files hold no ``@package`` outside their group, and
interpolations stay inside it). So each axis value is composed once, on the first cell's other
values, and a cell is the first cell's config with its four parts and seed put in. A part that
does change settings outside its own group (a plugin's ``@package _global_`` option, an override
that interpolates across groups) makes the grid compose every cell in full instead, so the result
is the same as composing each cell by itself; ``tests/unit/test_grid.py`` checks that on a grid.

The pairs ``all`` would make that cannot run (a CLI agent without an LLM, an agent with no use for
the LLM it was given, a CLI whose API the driver does not serve and the gateway cannot translate)
are left out of the grid and listed; the same pair named explicitly is refused.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from autorl.agent_schema import AgentConfig
from autorl.errors import ConfigError
from autorl.gateway.settings import TRANSLATABLE
from autorl.registry import AXES
from autorl.schema import DriverConfig, Provider, RunConfig

Composer = Callable[[Sequence[str]], RunConfig]
# The axes whose value selects a config group; ``seed`` is one top-level number.
PART_AXES = ("agent", "driver", "task", "model")


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
    config: RunConfig = field(repr=False, hash=False, compare=False)

    @property
    def budget_s(self) -> float:
        """The agent's wall-clock budget in seconds: ``budget.seconds``, else the task's
        ``budget_s``."""
        seconds = self.config.budget.seconds
        return float(self.config.task.budget_s if seconds is None else seconds)


@dataclass(frozen=True)
class LeftOut:
    """An agent × driver pair that ``all`` would have made but that cannot run, and why."""

    agent: str
    driver: str
    reason: str


def cell_id_for(agent: str, driver: str, task: str, model: str, seed: int) -> str:
    """A readable, deterministic cell id (also the folder name under ``cells/``).

    >>> cell_id_for("scripted", "none", "gsm8k", "tiny", 0)
    'gsm8k.scripted.none.tiny.s0'
    """
    return f"{task}.{agent}.{driver}.{model}.s{seed}"


def pair_problem(agent: AgentConfig, driver: DriverConfig) -> str | None:
    """Why ``agent`` cannot run with ``driver`` (None when it can): it needs an LLM and got none,
    names no protocol, or speaks an API the driver does not serve and the gateway cannot
    translate."""
    if not agent.needs_driver:
        return None
    if driver.provider == Provider.none:
        return (
            f"agent {agent.name!r} needs a driver LLM, but driver={driver.name} was given; "
            "choose one with driver=<name> (python -m autorl.ls drivers), e.g. driver=gpt-5"
        )
    if agent.protocol is None:
        return (
            f"agent {agent.name!r} needs a driver but names no protocol: set agent.protocol in "
            "its conf/agent file"
        )
    if agent.protocol not in TRANSLATABLE and agent.protocol not in driver.protocols:
        return (
            f"agent {agent.name!r} speaks the {agent.protocol} API, which driver {driver.name!r} "
            f"does not serve (it serves {', '.join(driver.protocols) or 'nothing'}); use a "
            "driver that does, e.g. driver=gemini-2.5-flash"
        )
    return None


def _unused_driver(agent: AgentConfig, driver: DriverConfig) -> str | None:
    """Why a grid pair would waste its driver: an agent that calls no LLM, given one."""
    if not agent.needs_driver and driver.provider != Provider.none:
        return f"agent {agent.name!r} calls no driver LLM (driver={driver.name} would be unused)"
    return None


def _swapped(config: RunConfig, axis: str, part: RunConfig) -> RunConfig:
    """``config`` with the settings of ``axis`` taken from ``part``."""
    return dataclasses.replace(config, **{axis: getattr(part, axis)})


def compose_parts(
    compose: Composer,
    grid: dict[str, list[str]],
    base_overrides: list[str],
    passthrough: list[str],
    base: RunConfig,
) -> dict[str, dict[str, RunConfig]] | None:
    """Each axis value's composition on the first cell's other values (the first is ``base``).

    Returns None when a part changes settings outside its own group, so splicing would not give
    what composing each cell gives.

    Raises:
        ConfigError: An axis value's composition is refused (named as ``axis=value``).
    """
    if any("${" in override for override in passthrough):  # may reach across groups
        return None
    parts: dict[str, dict[str, RunConfig]] = {}
    for axis in PART_AXES:
        parts[axis] = {grid[axis][0]: base}
        for value in grid[axis][1:]:
            part = _compose_named(compose, axis, value, base_overrides)
            if _swapped(part, axis, base) != base:
                return None
            parts[axis][value] = part
    return parts


def runnable_pairs(
    parts: dict[str, dict[str, RunConfig]], explicit: set[str]
) -> tuple[list[tuple[str, str]], list[LeftOut]]:
    """The agent × driver pairs of the grid that can run, and those left out.

    A pair whose agent and driver were both named (not from ``all``) is refused when it cannot
    run, and kept when it only leaves its driver unused (a probe that calls the gateway itself).

    Raises:
        ConfigError: A named pair cannot run.
    """
    kept: list[tuple[str, str]] = []
    left_out: list[LeftOut] = []
    for agent_name, agent_part in parts["agent"].items():
        for driver_name, driver_part in parts["driver"].items():
            agent, driver = agent_part.agent, driver_part.driver
            problem = pair_problem(agent, driver)
            named = {"agent", "driver"} <= explicit
            if problem and named:
                raise ConfigError(problem)
            reason = problem or (None if named else _unused_driver(agent, driver))
            if reason:
                left_out.append(LeftOut(agent_name, driver_name, reason))
            else:
                kept.append((agent_name, driver_name))
    return kept, left_out


def grid_cells(
    compose: Composer,
    grid: dict[str, list[str]],
    explicit: set[str],
    base_overrides: list[str],
    passthrough: list[str],
    base: RunConfig,
    sweep_id: str,
) -> tuple[list[CellSpec], list[LeftOut]]:
    """The grid's cells in axis order (agent, driver, task, model, seed), and the pairs left out.

    Raises:
        ConfigError: A named pair cannot run, or a composition is refused (naming the cell or the
            axis value).
    """
    parts = compose_parts(compose, grid, base_overrides, passthrough, base)
    if parts is None:  # compose the agent and driver parts in full for the pair rules only
        parts = {
            axis: {
                value: _compose_named(compose, axis, value, base_overrides) for value in grid[axis]
            }
            for axis in ("agent", "driver")
        }
        spliced = False
    else:
        spliced = True
    pairs, left_out = runnable_pairs(parts, explicit)
    cells = []
    for (agent, driver), task, model, seed in itertools.product(
        pairs, grid["task"], grid["model"], grid["seed"]
    ):
        cell_id = cell_id_for(agent, driver, task, model, int(seed))
        if spliced:
            config = dataclasses.replace(
                base,
                agent=copy.deepcopy(parts["agent"][agent].agent),
                driver=copy.deepcopy(parts["driver"][driver].driver),
                task=copy.deepcopy(parts["task"][task].task),
                model=copy.deepcopy(parts["model"][model].model),
                seed=int(seed),
            )
        else:
            values = dict(zip(AXES, (agent, driver, task, model, seed), strict=True))
            overrides = [f"{axis}={values[axis]}" for axis in AXES] + passthrough
            try:
                config = compose(overrides)
            except ConfigError as error:
                raise ConfigError(f"cell {cell_id}: {error}") from error
        config = dataclasses.replace(config, sweep_id=sweep_id)
        cells.append(CellSpec(sweep_id, cell_id, agent, driver, task, model, int(seed), config))
    return cells, left_out


def _compose_named(
    compose: Composer, axis: str, value: str, base_overrides: list[str]
) -> RunConfig:
    """The first cell's composition with ``axis=value``."""
    overrides = [f"{axis}={value}" if o.startswith(f"{axis}=") else o for o in base_overrides]
    try:
        return compose(overrides)
    except ConfigError as error:  # e.g. agent.sft.max_steps=3 suits scripted, not codex
        raise ConfigError(f"{axis}={value}: {error}") from error
