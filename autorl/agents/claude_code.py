"""Anthropic Claude Code (``@anthropic-ai/claude-code``): ``claude --print --output-format
stream-json`` speaking the Anthropic Messages API.

``ANTHROPIC_BASE_URL`` points at the gateway and ``ANTHROPIC_API_KEY`` holds the gateway token;
every model alias (the small/fast background model included) is the driver's model, so no call
goes elsewhere. Its config lives in the cell's HOME (``CLAUDE_CONFIG_DIR``). Claude Code refuses
``--dangerously-skip-permissions`` as root unless ``IS_SANDBOX=1``: the cell is the sandbox.
A resumed agent (``agent.reprompt``) runs ``--continue`` with the continuation prompt.
"""

from __future__ import annotations

from pathlib import Path

from autorl.agent_schema import ClaudeCodeAgentConfig
from autorl.agents.base import LaunchContext
from autorl.agents.cli import CLIAgent, home_dir
from autorl.errors import ConfigError


class ClaudeCodeAgent(CLIAgent):
    """Adapter for Claude Code."""

    stream_format = "claude-code"

    def command(self, binary: str, prompt: str, ctx: LaunchContext, home: Path) -> tuple[list[str], dict[str, str]]:
        """``claude --print`` with the gateway as its Anthropic endpoint."""
        url, token = self.gateway(ctx)
        agent = ctx.agent_cfg
        if not isinstance(agent, ClaudeCodeAgentConfig):
            raise ConfigError(
                f"agent {agent.name!r} runs Claude Code: its conf/agent file must start with `defaults: [_claude_code, _self_]`"
            )
        model = str(ctx.driver_cfg.model)
        config_dir = home_dir(home, ".claude")
        # Long training commands must not be cut at Claude Code's default 2-minute bash timeout.
        bash_ms = str(int(agent.bash_timeout_s * 1000))
        env = {
            "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": token, "ANTHROPIC_MODEL": model,
            "ANTHROPIC_SMALL_FAST_MODEL": model, "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": model, "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
            "CLAUDE_CONFIG_DIR": str(config_dir), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1", "IS_SANDBOX": "1",
            "BASH_DEFAULT_TIMEOUT_MS": bash_ms, "BASH_MAX_TIMEOUT_MS": bash_ms,
        }
        # A resumed agent continues its last conversation in this workspace (kept in CLAUDE_CONFIG_DIR).
        resume = ["--continue"] if ctx.continuation_prompt is not None else []
        command = [
            binary, "--print", "--verbose", "--output-format", "stream-json", "--dangerously-skip-permissions",
            *resume, "--model", model, *agent.extra_args, ctx.continuation_prompt or prompt,
        ]
        return command, env
