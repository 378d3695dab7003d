"""OpenHands CLI (``openhands`` on PyPI): ``openhands --headless --json`` speaking OpenAI chat
completions through its bundled LiteLLM.

The LLM settings come from the environment (``--override-with-envs``): ``LLM_MODEL``
``openai/<driver model>`` (LiteLLM's name for an OpenAI-compatible endpoint), ``LLM_BASE_URL`` the
gateway's ``/v1`` and ``LLM_API_KEY`` the gateway token. Its state lives in the cell's HOME
(``~/.openhands``). OpenHands needs Python >= 3.12, so it is installed into a venv of its own. Its
terminal tool never cuts a command (a quiet one returns to the model, still running), so the
launch's ``tool_timeout_s`` has nothing to set here. A resumed agent (``agent.reprompt``) runs
``--resume --last`` with the continuation prompt as its task.
"""

from __future__ import annotations

from pathlib import Path

from autorl.agents.base import LaunchContext
from autorl.agents.cli import CLIAgent, CliCommand, cli_config, home_dir
from autorl.agents.streams import OpenHandsStream


class OpenHandsAgent(CLIAgent):
    """Adapter for OpenHands."""

    parser = OpenHandsStream

    def command(self, binary: str, prompt: str, ctx: LaunchContext, home: Path) -> CliCommand:
        """``openhands --headless --json`` with its LLM pointed at the gateway."""
        url, token = self.gateway(ctx)
        home_dir(home, ".openhands")
        env = {
            "LLM_MODEL": f"openai/{ctx.driver_cfg.model}",
            "LLM_BASE_URL": f"{url}/v1",
            "LLM_API_KEY": token,
            # The bundled LiteLLM would fetch its price map from GitHub at start.
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "OPENHANDS_SUPPRESS_BANNER": "1",
        }
        # A resumed agent continues the newest conversation (kept in ~/.openhands) with the new task
        # text.
        resume = ["--resume", "--last"] if ctx.continuation_prompt is not None else []
        command = [
            binary,
            "--headless",
            "--json",
            "--override-with-envs",
            *resume,
            *cli_config(ctx).extra_args,
            "--task",
            ctx.continuation_prompt or prompt,
        ]
        return CliCommand(command, env)
