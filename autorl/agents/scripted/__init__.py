"""The built-in scripted agent's adapter: a fixed SFT → GRPO recipe, run as a separate process.

The adapter (:class:`ScriptedAgent`) only builds the command line; the agent itself
(``python -m agent_kit.scripted``, in :mod:`agent_kit.scripted`) knows nothing but its environment
variables and the grading API, like any CLI agent. It runs with ``LaunchContext.python`` (the agent's
toolchain in a sealed cell, where autorl is not importable) and finds ``agent_kit`` beside the task's
agent package: :func:`autorl.workspace.layout.copy_agent_code` puts both in one folder, which the
adapter prepends to ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import sys

from autorl.agent_schema import ScriptedAgentConfig
from autorl.agents.base import AgentLaunch, LaunchContext
from autorl.errors import ConfigError


class ScriptedAgent:
    """Adapter for the scripted agent."""

    def stream_parser(self) -> None:
        """None: the scripted agent logs plain text, no event stream."""
        return None

    def launch(self, ctx: LaunchContext) -> AgentLaunch:
        """Run the recipe with the SFT and GRPO settings of the agent config."""
        agent = ctx.agent_cfg
        if not isinstance(agent, ScriptedAgentConfig):
            raise ConfigError(
                f"agent {agent.name!r} runs the scripted agent: "
                "its conf/agent file must start with `defaults: [_scripted, _self_]`"
            )
        sft, grpo, online = agent.sft, agent.grpo, agent.online_grpo
        if ctx.task_agent_dir is None:
            raise ConfigError("the scripted agent needs the task's agent-side folder (LaunchContext.task_agent_dir)")
        # Its parent goes on PYTHONPATH (and into a sealed cell): it must be the copy, never tasks/<id> itself.
        code_root = ctx.task_agent_dir.parent
        if not (code_root / "agent_kit" / "__init__.py").is_file():
            raise ConfigError(f"LaunchContext.task_agent_dir {ctx.task_agent_dir} is not a copy made by "
                              "autorl.workspace.layout.copy_agent_code (no agent_kit/ beside it)")
        command = [
            ctx.python or sys.executable, "-m", "agent_kit.scripted",
            "--recipe-dir", str(ctx.task_agent_dir), "--recipe", ctx.task_recipe or "recipe:run",
            "--sft-steps", str(sft.steps), "--sft-batch-size", str(sft.batch_size),
            "--sft-lr", str(sft.learning_rate), "--sft-max-length", str(sft.max_length),
            "--grpo-steps", str(grpo.steps), "--grpo-batch-size", str(grpo.batch_size),
            "--grpo-generations", str(grpo.num_generations), "--grpo-lr", str(grpo.learning_rate),
            "--grpo-max-completion", str(grpo.max_completion_length),
            "--online-grpo-batches", str(online.batches), "--online-grpo-batch-size", str(online.batch_size),
            "--online-grpo-generations", str(online.num_generations), "--online-grpo-lr", str(online.learning_rate),
            "--online-grpo-iterations", str(online.num_iterations), "--online-grpo-epsilon", str(online.epsilon),
            "--online-grpo-temperature", str(online.temperature), "--online-grpo-episodes", str(online.episodes),
            "--online-grpo-sft-mix", str(online.sft_mix), "--online-grpo-sft-mix-weight", str(online.sft_mix_weight),
            "--online-grpo-probe", str(online.probe),
            "--seed", str(ctx.seed),
        ]
        # copy_agent_code lays agent_kit/ beside the task's package: their common folder makes both importable.
        path = ctx.env.get("PYTHONPATH")
        env = dict(ctx.env) | {"PYTHONPATH": str(code_root) + (os.pathsep + path if path else "")}
        return AgentLaunch(command, env, read_only=(code_root,))
