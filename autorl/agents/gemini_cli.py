"""Google Gemini CLI (``@google/gemini-cli``): ``gemini -p --output-format stream-json`` speaking
the Gemini API.

``GOOGLE_GEMINI_BASE_URL`` points at the gateway and ``GEMINI_API_KEY`` holds the gateway token;
``$HOME/.gemini/settings.json`` selects API-key auth and turns telemetry, usage statistics and
update checks off. The workspace is trusted (``GEMINI_CLI_TRUST_WORKSPACE``), else ``--yolo`` is
downgraded to asking for approval, which nobody would give. The shell tool's inactivity timeout
(``tools.shell.inactivityTimeout``, 300 s by default) is the launch's ``tool_timeout_s``. A resumed
agent (``agent.reprompt``) runs ``--resume latest`` with the continuation prompt.
"""

from __future__ import annotations

import json
from pathlib import Path

from autorl.agents.base import LaunchContext
from autorl.agents.cli import CLIAgent, CliCommand, cli_config, home_dir, write_home_file
from autorl.agents.streams import GeminiStream


class GeminiCliAgent(CLIAgent):
    """Adapter for the Gemini CLI."""

    parser = GeminiStream

    def command(self, binary: str, prompt: str, ctx: LaunchContext, home: Path) -> CliCommand:
        """``gemini --yolo -p`` with the gateway as its Gemini endpoint."""
        url, token = self.gateway(ctx)
        settings_dir = home_dir(home, ".gemini")
        settings = {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
            # A shell command is stopped after this many seconds without output (default 300): a
            # quiet training run may take the whole budget.
            "tools": {"shell": {"inactivityTimeout": ctx.tool_timeout_s}},
        }
        write_home_file(settings_dir / "settings.json", json.dumps(settings, indent=2))
        env = {
            "GEMINI_API_KEY": token,
            "GOOGLE_GEMINI_BASE_URL": url,
            "GEMINI_SANDBOX": "false",
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
        }
        # A resumed agent continues the newest session of this workspace (kept under ~/.gemini/tmp).
        resume = ["--resume", "latest"] if ctx.continuation_prompt is not None else []
        command = [
            binary,
            "--yolo",
            "--model",
            str(ctx.driver_cfg.model),
            "--output-format",
            "stream-json",
            *resume,
            *cli_config(ctx).extra_args,
            "--prompt",
            ctx.continuation_prompt or prompt,
        ]
        return CliCommand(command, env)
