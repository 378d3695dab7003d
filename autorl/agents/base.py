"""The agent adapter interface and its lookup from a config's ``adapter: module:Class`` string."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from autorl.registry import load_object
from autorl.schema import AgentConfig, DriverConfig


@dataclass(frozen=True)
class LaunchContext:
    """What an adapter may use to build the agent's command line."""

    workspace: Path
    agent_cfg: AgentConfig
    driver_cfg: DriverConfig
    env: dict[str, str]
    cell_dir: Path | None = None  # the cell folder (outside the workspace), for files the agent must not see
    seed: int = 0  # the cell's seed: agents that take one (the scripted agent) vary their runs by it
    task_agent_dir: Path | None = None  # a copy of the task's agent-side package (tasks/<id>/agent)
    task_recipe: str | None = None  # the task's scripted recipe, "module:attr" inside that package


@dataclass(frozen=True)
class AgentLaunch:
    """The agent's command line and full environment."""

    command: list[str]
    env: dict[str, str]


class AgentAdapter(Protocol):
    """Builds the non-interactive launch of one kind of agent."""

    def launch(self, ctx: LaunchContext) -> AgentLaunch:
        """Return the command and environment that start the agent in ``ctx.workspace``."""
        ...


def load_adapter(agent_cfg: AgentConfig) -> AgentAdapter:
    """Instantiate the adapter named by ``agent_cfg.adapter`` (``module:Class``).

    Raises:
        ConfigError: if the string is malformed or names nothing importable.
    """
    factory = load_object(agent_cfg.adapter, what=f"agent {agent_cfg.name!r} adapter")
    adapter: AgentAdapter = factory()
    return adapter
