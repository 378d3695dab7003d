"""The agent adapter interface, its launch context and result, and the registry of agents.

Every agent is one option of the ``agent`` config group: ``conf/agent/<name>.yaml`` (autorl's or a
plugin folder's) names its adapter class (``adapter: module:Class``), and :data:`AGENTS` is built
from those files. An adapter builds the agent's launch (:meth:`AgentAdapter.launch`) and gives the
parser of the output stream it writes (:meth:`AgentAdapter.stream_parser`), so a new CLI is one
adapter module, one YAML file and, for its tests, one recorded stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from autorl.agent_schema import AgentConfig, CliAgentConfig
from autorl.agents.prompt import tool_timeout_s
from autorl.agents.streams import StreamParser
from autorl.errors import ConfigError
from autorl.registry import OptionRegistry, load_object
from autorl.schema import DriverConfig


@dataclass(frozen=True)
class LaunchContext:
    """What an adapter may use to build the agent's command line."""

    workspace: Path
    agent_cfg: AgentConfig
    driver_cfg: DriverConfig
    env: dict[str, str]
    # The cell folder (outside the workspace), for files the agent must not see.
    cell_dir: Path | None = None
    seed: int = (
        0  # the cell's seed: agents that take one (the scripted agent) vary their runs by it
    )
    task_agent_dir: Path | None = None  # a copy of the task's agent-side package (tasks/<id>/agent)
    task_recipe: str | None = None  # the task's scripted recipe, "module:attr" inside that package
    # Set when the agent is resumed (agent.reprompt): what it is told instead of the task prompt
    # (autorl.agents.reprompt.continuation_prompt); a CLI then continues its last session.
    continuation_prompt: str | None = None
    resume_index: int = 0  # 0 for the first launch, then 1, 2, ... for each resume
    # The interpreter for agent-side Python (the toolchain's); None: sys.executable.
    python: str | None = None
    # The cell's time budget from its config. Never read back from the workspace's run_meta.json:
    # the agent can rewrite that file (or put a FIFO in its place) before a resume reads it.
    budget_s: float | None = None

    @property
    def tool_timeout_s(self) -> int:
        """How long one shell command of the agent may run, in whole seconds.

        A CLI agent's ``agent.tool_timeout_s`` where set, else the cell's budget (the cell stops
        everything at its end anyway), else a 12-hour fallback; every CLI adapter hands this one
        value to its CLI's own setting, since each CLI's default (2 or 5 minutes) would cut a
        training run.
        """
        agent = self.agent_cfg
        if isinstance(agent, CliAgentConfig) and agent.tool_timeout_s is not None:
            return tool_timeout_s(agent.tool_timeout_s)
        return tool_timeout_s(self.budget_s)


@dataclass(frozen=True)
class AgentLaunch:
    """The agent's command line, its full environment, and the host paths it needs to read.

    ``read_only`` lists what a sealed cell must bind read-only for ``command`` to run (a CLI's
    install folder); the workspace, HOME, base model, toolchain and task agent code are bound
    anyway.
    """

    command: list[str]
    env: dict[str, str]
    read_only: tuple[Path, ...] = ()


class AgentAdapter(Protocol):
    """Builds the non-interactive launch of one kind of agent and parses what it writes."""

    def launch(self, ctx: LaunchContext) -> AgentLaunch:
        """Return the command and environment that start the agent in ``ctx.workspace``."""
        ...

    def stream_parser(self) -> StreamParser | None:
        """A fresh parser of the agent's output stream; None: it writes none to trace."""
        ...


# Agent name -> adapter class, from each agent option's ``adapter:`` (autorl's and the plugins').
AGENTS: OptionRegistry[type[AgentAdapter]] = OptionRegistry("agent", "agent", "adapter")


def load_adapter(agent_cfg: AgentConfig) -> AgentAdapter:
    """Instantiate the adapter named by ``agent_cfg.adapter`` (``module:Class``).

    Raises:
        ConfigError: if the string is malformed or names nothing importable.
    """
    factory = load_object(agent_cfg.adapter, what=f"agent {agent_cfg.name!r} adapter")
    adapter: AgentAdapter = factory()
    return adapter


def agent_stream_parser(agent: str) -> StreamParser:
    """A fresh parser of the output stream of the registered agent ``agent``.

    Raises:
        ConfigError: Unknown agent ("did you mean"), or one that writes no stream to parse.
    """
    parser = AGENTS.get(agent)().stream_parser()
    if parser is None:
        raise ConfigError(f"agent {agent!r} writes no output stream to parse")
    return parser
