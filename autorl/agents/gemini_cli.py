"""Google Gemini CLI (``@google/gemini-cli``): ``gemini -p --output-format stream-json`` speaking
the Gemini API.

``GOOGLE_GEMINI_BASE_URL`` points at the gateway and ``GEMINI_API_KEY`` holds the gateway token;
``$HOME/.gemini/settings.json`` selects API-key auth and turns telemetry, usage statistics and
update checks off. The workspace is trusted (``GEMINI_CLI_TRUST_WORKSPACE``), else ``--yolo`` is
downgraded to asking for approval, which nobody would give.
"""

from __future__ import annotations

import json
from pathlib import Path

from autorl.agents.base import LaunchContext
from autorl.agents.cli import CLIAgent, cli_config


class GeminiCliAgent(CLIAgent):
    """Adapter for the Gemini CLI."""

    stream_format = "gemini-cli"

    def command(self, binary: str, prompt: str, ctx: LaunchContext, home: Path) -> tuple[list[str], dict[str, str]]:
        """``gemini --yolo -p`` with the gateway as its Gemini endpoint."""
        url, token = self.gateway(ctx)
        settings_dir = home / ".gemini"
        settings_dir.mkdir(parents=True, exist_ok=True)
        settings = {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        }
        (settings_dir / "settings.json").write_text(json.dumps(settings, indent=2))
        env = {"GEMINI_API_KEY": token, "GOOGLE_GEMINI_BASE_URL": url, "GEMINI_SANDBOX": "false",
               "GEMINI_CLI_TRUST_WORKSPACE": "true"}
        command = [
            binary, "--yolo", "--model", str(ctx.driver_cfg.model), "--output-format", "stream-json",
            *cli_config(ctx).extra_args, "--prompt", prompt,
        ]
        return command, env
