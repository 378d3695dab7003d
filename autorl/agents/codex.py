"""OpenAI Codex CLI (``@openai/codex``): ``codex exec --json`` speaking the Responses API.

The cell's ``$HOME/.codex/config.toml`` (``CODEX_HOME``) defines a model provider ``autorl`` at
the gateway's ``/v1`` with the gateway token in ``AUTORL_DRIVER_TOKEN``; web search (a leakage
channel of the reference, which ran ``--search``), update checks and analytics are off.
The pinned Codex has no setting for its shell tool's timeout (the model gives one per command),
so the launch's ``tool_timeout_s`` has nothing to set here.
A resumed agent (``agent.reprompt``) runs ``codex exec resume --last`` with the continuation prompt.
"""

from __future__ import annotations

import json
from pathlib import Path

from autorl.agents.base import LaunchContext
from autorl.agents.cli import CLIAgent, CliCommand, cli_config, home_dir, write_home_file
from autorl.agents.streams import CodexStream
from autorl.gateway.settings import GATEWAY_TOKEN_ENV


def _toml(value: object) -> str:
    return json.dumps(value)  # a JSON string or number is valid TOML


class CodexAgent(CLIAgent):
    """Adapter for Codex."""

    parser = CodexStream

    def command(self, binary: str, prompt: str, ctx: LaunchContext, home: Path) -> CliCommand:
        """``codex exec --json`` with a per-cell CODEX_HOME pointing at the gateway."""
        url, _ = self.gateway(ctx)
        codex_home = home_dir(home, ".codex")
        model = str(ctx.driver_cfg.model)
        write_home_file(
            codex_home / "config.toml",
            f"model = {_toml(model)}\n"
            'model_provider = "autorl"\n'
            'approval_policy = "never"\n'
            'sandbox_mode = "danger-full-access"\n'
            'web_search = "disabled"\n'
            "check_for_update_on_startup = false\n\n"
            "[analytics]\nenabled = false\n\n"
            "[model_providers.autorl]\n"
            'name = "autorl driver gateway"\n'
            f"base_url = {_toml(url + '/v1')}\n"
            f"env_key = {_toml(GATEWAY_TOKEN_ENV)}\n"
            'wire_api = "responses"\n',
        )
        flags = ["--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
        if ctx.continuation_prompt is not None:
            # `exec resume --last` picks the newest session recorded in CODEX_HOME for the current
            # directory (the agent runs in the workspace; `resume` has no --cd).
            command = [
                binary,
                "exec",
                "resume",
                "--last",
                *flags,
                "--model",
                model,
                *cli_config(ctx).extra_args,
                ctx.continuation_prompt,
            ]
        else:
            command = [
                binary,
                "exec",
                *flags,
                "--cd",
                str(ctx.workspace),
                "--model",
                model,
                *cli_config(ctx).extra_args,
                prompt,
            ]
        return CliCommand(command, {"CODEX_HOME": str(codex_home)})
