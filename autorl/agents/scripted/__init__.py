"""The built-in scripted agent: a fixed SFT → GRPO recipe, run as a separate process.

The adapter (:class:`ScriptedAgent`) only builds the command line; the agent itself
(``python -m autorl.agents.scripted``) knows nothing but its environment variables and the
grading API, like any CLI agent.
"""

from __future__ import annotations

import sys

from autorl.agents.base import AgentLaunch, LaunchContext
from autorl.errors import ConfigError
from autorl.schema import ScriptedAgentConfig


class ScriptedAgent:
    """Adapter for the scripted agent."""

    def launch(self, ctx: LaunchContext) -> AgentLaunch:
        """Run the recipe with the SFT and GRPO settings of the agent config."""
        agent = ctx.agent_cfg
        if not isinstance(agent, ScriptedAgentConfig):
            raise ConfigError(
                f"agent {agent.name!r} runs the scripted agent: "
                "its conf/agent file must start with `defaults: [_scripted, _self_]`"
            )
        sft, grpo = agent.sft, agent.grpo
        if ctx.task_agent_dir is None:
            raise ConfigError("the scripted agent needs the task's agent-side folder (LaunchContext.task_agent_dir)")
        command = [
            sys.executable, "-m", "autorl.agents.scripted",
            "--recipe-dir", str(ctx.task_agent_dir), "--recipe", ctx.task_recipe or "recipe:run",
            "--sft-steps", str(sft.steps), "--sft-batch-size", str(sft.batch_size),
            "--sft-lr", str(sft.learning_rate), "--sft-max-length", str(sft.max_length),
            "--grpo-steps", str(grpo.steps), "--grpo-batch-size", str(grpo.batch_size),
            "--grpo-generations", str(grpo.num_generations), "--grpo-lr", str(grpo.learning_rate),
            "--grpo-max-completion", str(grpo.max_completion_length), "--seed", str(ctx.seed),
        ]
        return AgentLaunch(command, dict(ctx.env))
