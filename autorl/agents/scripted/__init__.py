"""The built-in scripted agent's adapter: a fixed SFT → GRPO recipe, run as a separate process.

The adapter (:class:`ScriptedAgent`) writes the agent's settings file (the ``sft``, ``grpo`` and
``online_grpo`` blocks of the agent config, with the cell's recipe and seed:
:class:`agent_kit.scripted.settings.ScriptedSettings`) into the workspace and builds the command
line; the agent itself (``python -m agent_kit.scripted --settings <file>``, in
:mod:`agent_kit.scripted`) knows nothing but that file, its environment variables and the grading
API, like any CLI agent (on a resumed launch, ``--resume``: it goes on from its recorded stages,
:mod:`agent_kit.scripted.progress`). It runs with ``LaunchContext.python`` (the agent's
toolchain in a sealed cell, where autorl is not importable) and finds ``agent_kit`` beside the
task's agent package: :func:`autorl.workspace.layout.copy_agent_code` puts both in one folder, which
the adapter prepends to ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import sys

from agent_kit.scripted.progress import RESUME_FLAG
from agent_kit.scripted.settings import SETTINGS_FILE, ScriptedSettings
from autorl.agent_schema import ScriptedAgentConfig
from autorl.agents.base import AgentLaunch, LaunchContext
from autorl.errors import ConfigError


class ScriptedAgent:
    """Adapter for the scripted agent."""

    def stream_parser(self) -> None:
        """None: the scripted agent logs plain text, no event stream."""
        return None

    def launch(self, ctx: LaunchContext) -> AgentLaunch:
        """Write the settings file into the workspace; run the recipe with it."""
        agent = ctx.agent_cfg
        if not isinstance(agent, ScriptedAgentConfig):
            raise ConfigError(
                f"agent {agent.name!r} runs the scripted agent: "
                "its conf/agent file must start with `defaults: [_scripted, _self_]`"
            )
        if ctx.task_agent_dir is None:
            raise ConfigError(
                "the scripted agent needs the task's agent-side folder "
                "(LaunchContext.task_agent_dir)"
            )
        # Its parent goes on PYTHONPATH (and into a sealed cell): it must be the copy, never
        # tasks/<id> itself.
        code_root = ctx.task_agent_dir.parent
        if not (code_root / "agent_kit" / "__init__.py").is_file():
            raise ConfigError(
                f"LaunchContext.task_agent_dir {ctx.task_agent_dir} is not a copy made by "
                "autorl.workspace.layout.copy_agent_code (no agent_kit/ beside it)"
            )
        settings = ScriptedSettings(
            recipe_dir=str(ctx.task_agent_dir),
            recipe=ctx.task_recipe or "recipe:run",
            seed=ctx.seed,
            sft=agent.sft,
            grpo=agent.grpo,
            online_grpo=agent.online_grpo,
        )
        # In the workspace: the one folder a sealed agent reads at the same path as here. Rewritten
        # on each (re)launch, from the config, whatever the agent did to it.
        settings_file = ctx.workspace / SETTINGS_FILE
        settings.write(settings_file)
        command = [
            ctx.python or sys.executable,
            "-m",
            "agent_kit.scripted",
            "--settings",
            str(settings_file),
        ]
        # A resumed cell (a replaced node, agent.reprompt): where a CLI continues its session, the
        # scripted agent goes on from the stages it recorded in its workspace.
        if ctx.resume_index > 0 or ctx.continuation_prompt is not None:
            command.append(RESUME_FLAG)
        # copy_agent_code lays agent_kit/ beside the task's package: their common folder makes both
        # importable.
        path = ctx.env.get("PYTHONPATH")
        env = dict(ctx.env) | {"PYTHONPATH": str(code_root) + (os.pathsep + path if path else "")}
        return AgentLaunch(command, env, read_only=(code_root,))
