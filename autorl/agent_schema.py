"""The typed schema of the ``agent`` group: what every agent option has, and each kind's own blocks
(the scripted agent's training stages, a CLI's pinned install, a command line).

Registered with Hydra's ConfigStore by :func:`autorl.schema.register_schemas` (``agent/_scripted``,
``agent/_cli``, ``agent/_command``); see :mod:`autorl.schema` for how the
schema and ``conf/`` divide the work.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from autorl.schema_fields import setting


class ApiProtocol(StrEnum):
    """A wire protocol of the driver gateway (each on its own route; see :mod:`autorl.gateway.app`)."""

    chat = "chat"
    responses = "responses"
    messages = "messages"
    gemini = "gemini"


class AgentMode(StrEnum):
    """The paper's operating modes, given to a CLI agent as prompt variants (:mod:`autorl.agents.prompt`)."""

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
    min_remaining_s: float = setting("resume only while more than this many seconds of the budget are left")

    def check(self) -> None:
        """Refuse settings that cannot mean anything (called when a sweep is planned).

        Raises:
            ConfigError: a negative ``agent.reprompt.max`` or ``agent.reprompt.min_remaining_s``.
        """
        from autorl.errors import ConfigError

        if self.max < 0:
            raise ConfigError(f"agent.reprompt.max must be 0 (off) or a positive number of resumes, got {self.max}")
        if self.min_remaining_s < 0:
            raise ConfigError(f"agent.reprompt.min_remaining_s must be at least 0 seconds, got {self.min_remaining_s}")


@dataclass
class AgentConfig:
    """What every agent option has (``conf/agent/<name>.yaml``)."""

    name: str = setting("the option's name; equals the file name")
    description: str = setting("one line for `python -m autorl.ls agents`")
    adapter: str = setting("the adapter class, 'module:Class' (autorl.agents.base.AgentAdapter)")
    needs_driver: bool = setting("true: the agent calls a driver LLM through the cell's gateway")
    protocol: ApiProtocol | None = setting(
        "the driver API the agent speaks (the gateway translates it if the provider does not); "
        "null for agents without a driver", default=None,
    )
    reprompt: RepromptConfig = setting("resume an agent that exits early, in the same workspace (off: max 0)")


@dataclass
class SftConfig:
    """The scripted agent's supervised fine-tuning stage."""

    steps: int = setting("optimizer steps")
    batch_size: int = setting("examples per step")
    learning_rate: float = setting("AdamW learning rate")
    max_length: int = setting("tokens per example (prompt + answer), longer ones are cut")


@dataclass
class GrpoConfig:
    """The scripted agent's GRPO stage on single-turn tasks (TRL's GRPOTrainer on the task's rule reward)."""

    steps: int = setting("optimizer steps")
    batch_size: int = setting("completions per step")
    num_generations: int = setting("completions per prompt; must divide batch_size")
    learning_rate: float = setting("AdamW learning rate")
    max_completion_length: int = setting("tokens per sampled completion")


@dataclass
class OnlineGrpoConfig:
    """The scripted agent's RL stage on interactive tasks: GRPO on rollouts played through the grading
    API's env endpoints (``agent_kit/scripted/interactive.py``). Fields named as TRL's GRPOConfig's mean what
    they mean there."""

    batches: int = setting("rollout batches played; each is trained on num_iterations times")
    batch_size: int = setting("rollouts per batch")
    num_generations: int = setting("rollouts of each training episode in a batch (the group of the group baseline)")
    learning_rate: float = setting("AdamW learning rate (one optimizer for the whole stage)")
    num_iterations: int = setting("optimizer steps per batch; after the first, PPO-clipped (TRL's num_iterations)")
    epsilon: float = setting("the clip range of the probability ratio (TRL's epsilon)")
    temperature: float = setting("sampling temperature of the rollouts; the update scores tokens at the same one")
    episodes: int = setting("training episodes the batches replay, a batch's worth at a time (a fixed draw by the "
                            "cell's seed, outside the expert's when enough are left); 0: a fresh draw every batch")
    sft_mix: int = setting("SFT's expert sequences added to each update, keeping the policy near SFT's (0: none)")
    sft_mix_weight: float = setting("the weight of each mixed SFT sequence (a rollout's is its advantage)")
    probe: int = setting("batches' worth of rollouts of the first batch's episodes, played before RL and again after it "
                         "with the same sampling noise, so the two rewards differ by what RL changed (0: no probe)")

    def check(self) -> None:
        """Refuse a replayed pool, an SFT mix or a probe that cannot mean anything (called when a sweep is planned).

        Raises:
            ConfigError: a negative ``episodes``, ``sft_mix``, ``sft_mix_weight`` or ``probe``.
        """
        from autorl.errors import ConfigError

        zero_means = {"episodes": "a fresh draw every batch", "sft_mix": "no SFT sequences mixed in",
                      "sft_mix_weight": "no SFT sequences mixed in", "probe": "no probe"}
        for name, meaning in zero_means.items():
            if (value := getattr(self, name)) < 0:
                raise ConfigError(f"agent.online_grpo.{name} must be at least 0 (0: {meaning}), got {value}")


@dataclass
class ScriptedAgentConfig(AgentConfig):
    """The built-in scripted agent (``agent=scripted``): SFT, then GRPO, submitting after each."""

    sft: SftConfig = setting("the SFT stage")
    grpo: GrpoConfig = setting("the GRPO stage of single-turn tasks")
    online_grpo: OnlineGrpoConfig = setting("the GRPO stage of interactive tasks, on env-endpoint rollouts")


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
    binary: str | None = setting("path to the CLI; null: the project-local install (agents_dir), then PATH")
    agents_dir: str | None = setting("where CLIs are installed; null: $AUTORL_AGENTS_DIR, else <repo>/.cache/agents")
    extra_args: list[str] = setting("appended to the CLI's command line before the prompt")
    tool_timeout_s: float | None = setting(
        "one shell command may run this long; null: the cell's budget (LaunchContext.tool_timeout_s)",
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
