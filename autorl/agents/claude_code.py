"""Anthropic Claude Code (``@anthropic-ai/claude-code``): ``claude --print --output-format
stream-json`` speaking the Anthropic Messages API.

``ANTHROPIC_BASE_URL`` points at the gateway and ``ANTHROPIC_API_KEY`` holds the gateway token;
every model alias (the small/fast background model included) is the driver's model, so no call
goes elsewhere. Its config lives in the cell's HOME (``CLAUDE_CONFIG_DIR``). Claude Code refuses
``--dangerously-skip-permissions`` as root unless ``IS_SANDBOX=1``: the cell is the sandbox.
The bash tool's default and maximum timeout (2 and 10 minutes otherwise) are the launch's
``tool_timeout_s``. A resumed agent (``agent.reprompt``) runs ``--continue`` with the
continuation prompt.
"""

from __future__ import annotations

from pathlib import Path

from autorl.agents.base import LaunchContext
from autorl.agents.cli import CLIAgent, CliCommand, cli_config, home_dir
from autorl.agents.streams import ClaudeCodeStream


class ClaudeCodeAgent(CLIAgent):
    """Adapter for Claude Code."""

    parser = ClaudeCodeStream

    def command(self, binary: str, prompt: str, ctx: LaunchContext, home: Path) -> CliCommand:
        """``claude --print`` with the gateway as its Anthropic endpoint."""
        url, token = self.gateway(ctx)
        model = str(ctx.driver_cfg.model)
        config_dir = home_dir(home, ".claude")
        bash_ms = str(ctx.tool_timeout_s * 1000)
        env = {
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_API_KEY": token,
            "ANTHROPIC_MODEL": model,
            "ANTHROPIC_SMALL_FAST_MODEL": model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
            "CLAUDE_CONFIG_DIR": str(config_dir),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "IS_SANDBOX": "1",
            "BASH_DEFAULT_TIMEOUT_MS": bash_ms,
            "BASH_MAX_TIMEOUT_MS": bash_ms,
        }
        # A resumed agent continues its last conversation in this workspace (in CLAUDE_CONFIG_DIR).
        resume = ["--continue"] if ctx.continuation_prompt is not None else []
        argv = [
            binary,
            "--print",
            "--verbose",
            "--output-format",
            "stream-json",
            "--dangerously-skip-permissions",
            *resume,
            "--model",
            model,
            *cli_config(ctx).extra_args,
            ctx.continuation_prompt or prompt,
        ]
        return CliCommand(argv, env)
