"""The command agent (``agent=command``): runs a given command line in the workspace, no LLM.

For probes, tests and hand-written agents: ``agent.command`` is the command line (run with the
workspace as its current folder, like every agent), and ``agent.files`` are host files copied into
the agent's HOME before it starts, so that a sealed agent, which sees nothing of the host, can run
them. In an argument, ``{home}`` is the agent's HOME, ``{workspace}`` the workspace and ``{python}``
the interpreter for agent-side Python (a sealed cell's toolchain):

    python -m autorl.sweep agent=command "agent.files=[/abs/probe.py]" \
        "agent.command=[python3,-I,'{home}/probe.py']"
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from autorl.agent_schema import CommandAgentConfig
from autorl.agents.base import AgentLaunch, LaunchContext
from autorl.errors import ConfigError

_EXAMPLE = "agent.command=[python3,-I,'{home}/probe.py'] agent.files=[/abs/path/probe.py]"


class CommandAgent:
    """Adapter for ``agent=command``."""

    def stream_parser(self) -> None:
        """None: a given command line writes no stream of a known format."""
        return None

    def launch(self, ctx: LaunchContext) -> AgentLaunch:
        """Copy ``agent.files`` into the agent's HOME and return ``agent.command`` with its
        placeholders filled.

        Raises:
            ConfigError: if the config is not a command agent's, the command is empty, or a file
                to copy is not an absolute path to an existing file.
        """
        agent = ctx.agent_cfg
        if not isinstance(agent, CommandAgentConfig):
            raise ConfigError(
                f"agent {agent.name!r} uses the command adapter: its conf/agent file must start "
                "with "
                "`defaults: [_command, _self_]`"
            )
        if not agent.command:
            raise ConfigError(
                "agent.command is empty: give the command line to run as the agent, e.g. "
                f"{_EXAMPLE}"
            )
        home = Path(ctx.env.get("HOME") or ctx.workspace)
        for raw in agent.files:
            source = Path(raw)
            if not source.is_absolute():
                raise ConfigError(
                    f"agent.files: {raw!r} is not an absolute path; give host paths, e.g. "
                    f"{_EXAMPLE}"
                )
            if not source.is_file():
                raise ConfigError(f"agent.files: {raw} is not an existing file on this node")
            # Readable by the agent whatever uid it runs as; it owns HOME, not these copies.
            dest = home / source.name
            shutil.copyfile(source, dest)
            dest.chmod(0o644)
        places = {
            "{home}": str(home),
            "{workspace}": str(ctx.workspace),
            "{python}": ctx.python or sys.executable,
        }
        command = []
        for arg in agent.command:
            for placeholder, value in places.items():
                arg = arg.replace(placeholder, value)
            command.append(arg)
        return AgentLaunch(command, dict(ctx.env))
