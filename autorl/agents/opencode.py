"""OpenCode (``opencode-ai``): ``opencode run --format json`` speaking OpenAI chat completions.

``$XDG_CONFIG_HOME/opencode/opencode.json`` (in the cell's HOME) defines a provider ``autorl``
(``@ai-sdk/openai-compatible``) at the gateway's ``/v1`` with the gateway token, makes the driver's
model both the main and the small model, allows every tool without asking, and turns sharing and
auto-update off. OpenCode fetches the provider package from the npm registry into the cell's HOME on
first use. The shell tool's default timeout (2 minutes;
``OPENCODE_EXPERIMENTAL_BASH_DEFAULT_TIMEOUT_MS``) is the launch's ``tool_timeout_s``. A resumed
agent (``agent.reprompt``) runs ``run --continue`` with the continuation prompt.
"""

from __future__ import annotations

import json
from pathlib import Path

from autorl.agents.base import LaunchContext
from autorl.agents.cli import CLIAgent, CliCommand, cli_config, home_dir, write_home_file
from autorl.agents.streams import OpenCodeStream
from autorl.gateway.settings import GATEWAY_TOKEN_ENV


class OpenCodeAgent(CLIAgent):
    """Adapter for OpenCode."""

    parser = OpenCodeStream

    def command(self, binary: str, prompt: str, ctx: LaunchContext, home: Path) -> CliCommand:
        """``opencode run`` with a per-cell config pointing at the gateway."""
        url, _ = self.gateway(ctx)
        model = str(ctx.driver_cfg.model)
        config_home = home_dir(home, ".config")
        home_dir(config_home, "opencode")
        config = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                "autorl": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "autorl driver gateway",
                    "options": {"baseURL": f"{url}/v1", "apiKey": f"{{env:{GATEWAY_TOKEN_ENV}}}"},
                    "models": {model: {"name": model, "tool_call": True}},
                }
            },
            "model": f"autorl/{model}",
            "small_model": f"autorl/{model}",
            "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
            "autoupdate": False,
            "share": "disabled",
        }
        write_home_file(config_home / "opencode" / "opencode.json", json.dumps(config, indent=2))
        env = {
            "XDG_CONFIG_HOME": str(config_home),
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            # The shell tool's default timeout (2 minutes) would cut a training run.
            "OPENCODE_EXPERIMENTAL_BASH_DEFAULT_TIMEOUT_MS": str(ctx.tool_timeout_s * 1000),
        }
        # A resumed agent continues the last session of this workspace (kept under
        # ~/.local/share/opencode).
        resume = ["--continue"] if ctx.continuation_prompt is not None else []
        command = [
            binary,
            "run",
            "--format",
            "json",
            *resume,
            "--model",
            f"autorl/{model}",
            *cli_config(ctx).extra_args,
            ctx.continuation_prompt or prompt,
        ]
        return CliCommand(command, env)
