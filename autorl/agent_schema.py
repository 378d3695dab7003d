"""The typed schema of the ``agent`` group: what every agent option has, and each kind's own blocks
(the scripted agent's training stages, a CLI's pinned install, a command line).

Registered with Hydra's ConfigStore by :func:`autorl.schema.register_schemas` (``agent/_scripted``,
``agent/_cli``, ``agent/_command``); see :mod:`autorl.schema` for how the
schema and ``conf/`` divide the work.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from agent_kit.scripted.settings import GrpoSettings, OnlineGrpoSettings, SftSettings
from autorl.schema_fields import setting


class ApiProtocol(StrEnum):
    """A wire protocol of the driver gateway (each on its own route; see
    :mod:`autorl.gateway.app`).
    """

    chat = "chat"
    responses = "responses"
    messages = "messages"
    gemini = "gemini"


class AgentMode(StrEnum):
    """The paper's operating modes, given to a CLI agent as prompt variants
    (:mod:`autorl.agents.prompt`).
    """

    free = "free"
    sft_only = "sft_only"
    rl_oriented = "rl_oriented"


class InstallManager(StrEnum):
    """How an agent CLI is installed into its own folder."""

    npm = "npm"
    pip = "pip"


@dataclass
class RepromptConfig:
    """Resuming an agent that stops before its budget is spent (PostTrainBench's re-prompt loop).

    It changes what is measured (the agent is told to go on), so it is part of the cell's config.
    """

    max: int = setting("resumes per cell at most; 0: off (the agent runs once)")
    min_remaining_s: float = setting(
        "resume only while more than this many seconds of the budget are left"
    )

    def check(self) -> None:
        """Refuse settings that cannot mean anything (called when a sweep is planned).

        Raises:
            ConfigError: a negative ``agent.reprompt.max`` or ``agent.reprompt.min_remaining_s``.
        """
        from autorl.errors import ConfigError

        if self.max < 0:
            raise ConfigError(
                "agent.reprompt.max must be 0 (off) or a positive number of resumes, got "
                f"{self.max}"
            )
        if self.min_remaining_s < 0:
            raise ConfigError(
                "agent.reprompt.min_remaining_s must be at least 0 seconds, got "
                f"{self.min_remaining_s}"
            )


@dataclass
class AgentConfig:
    """What every agent option has (``conf/agent/<name>.yaml``)."""

    name: str = setting("the option's name; equals the file name")
    description: str = setting("one line for `python -m autorl.ls agents`")
    adapter: str = setting("the adapter class, 'module:Class' (autorl.agents.base.AgentAdapter)")
    needs_driver: bool = setting("true: the agent calls a driver LLM through the cell's gateway")
    in_grid: bool = setting(
        "false: `agent=all` leaves it out (probes and test agents); it runs only when named",
        default=True,
    )
    protocol: ApiProtocol | None = setting(
        "the driver API the agent speaks (the gateway translates it if the provider does not); "
        "null for agents without a driver",
        default=None,
    )
    reprompt: RepromptConfig = setting(
        "resume an agent that exits early, in the same workspace (off: max 0)"
    )


@dataclass
class ScriptedAgentConfig(AgentConfig):
    """The built-in scripted agent (``agent=scripted``): SFT, then GRPO, submitting after each."""

    # The agent's own settings types (agent_kit.scripted.settings), TRL's field names where TRL has
    # one: the adapter writes these blocks as the agent's settings file, unrenamed.
    sft: SftSettings = setting("the SFT stage")
    grpo: GrpoSettings = setting("the GRPO stage of single-turn tasks")
    online_grpo: OnlineGrpoSettings = setting(
        "the GRPO stage of interactive tasks, on env-endpoint rollouts"
    )


@dataclass
class InstallConfig:
    """Where a CLI comes from, pinned (``python -m autorl.agents.install <agent>``)."""

    manager: InstallManager = setting("npm (a prefix of its own) or pip (a venv of its own)")
    package: str = setting("the registry's package name")
    version: str = setting("the pinned version")
    bin: str = setting("the executable's name")
    python: str | None = setting("pip CLIs: the interpreter their venv is made with", default=None)


@dataclass
class CliAgentConfig(AgentConfig):
    """A coding-agent CLI run headless against the cell's driver gateway."""

    install: InstallConfig = setting("the pinned CLI")
    mode: AgentMode = setting("the operating mode given in the prompt")
    binary: str | None = setting(
        "path to the CLI; null: the project-local install (agents_dir), then PATH"
    )
    agents_dir: str | None = setting(
        "where CLIs are installed; null: $AUTORL_AGENTS_DIR, else <repo>/.cache/agents"
    )
    extra_args: list[str] = setting("appended to the CLI's command line before the prompt")
    tool_timeout_s: float | None = setting(
        "one shell command may run this long; null: the cell's budget "
        "(LaunchContext.tool_timeout_s)",
        default=None,
    )


@dataclass
class CommandAgentConfig(AgentConfig):
    """A given command line run as the agent (``agent=command``; autorl/agents/command.py)."""

    command: list[str] = setting(
        "the command line, run in the workspace; in an argument '{home}' is the agent's HOME, "
        "'{workspace}' the workspace, '{python}' the agent-side interpreter"
    )
    files: list[str] = setting("absolute host paths copied into the agent's HOME before it starts")
