"""The agent adapter interface and its lookup from a config's ``adapter: module:Class`` string."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from autorl.agent_schema import AgentConfig
from autorl.registry import load_object
from autorl.schema import DriverConfig


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
    # Set when the agent is resumed (agent.reprompt): what it is told instead of the task prompt
    # (autorl.agents.reprompt.continuation_prompt); a CLI then continues its last session.
    continuation_prompt: str | None = None
    resume_index: int = 0  # 0 for the first launch, then 1, 2, ... for each resume
    python: str | None = None  # the interpreter for agent-side Python (the toolchain's); None: sys.executable
    # The cell's time budget from its config. Never read back from the workspace's run_meta.json:
    # the agent can rewrite that file (or put a FIFO in its place) before a resume reads it.
    budget_s: float | None = None


@dataclass(frozen=True)
class AgentLaunch:
    """The agent's command line, its full environment, and the host paths it needs to read.

    ``read_only`` lists what a sealed cell must bind read-only for ``command`` to run (a CLI's
    install folder); the workspace, HOME, base model, toolchain and task agent code are bound anyway.
    """

    command: list[str]
    env: dict[str, str]
    read_only: tuple[Path, ...] = ()


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
