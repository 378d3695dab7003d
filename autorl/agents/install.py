"""``python -m autorl.agents.install <agent> [...]``: install agent CLIs at their pinned versions.

Each CLI gets a folder of its own, ``<agents_dir>/<agent>/`` (an npm prefix, or a venv for pip
CLIs; see :mod:`autorl.agents.cli`), so installing one never removes another. A CLI already
installed there at its pinned version is left as it is (``--force`` reinstalls it);
``--print`` shows the commands without running them. A pip CLI's venv is made with its
``install.python``, found on ``PATH`` or among pyenv's and uv's Pythons
(:func:`autorl.agents.cli.resolve_python`); ``--python`` names another interpreter.

Examples:
    python -m autorl.agents.install codex gemini-cli
    python -m autorl.agents.install openhands --print
    python -m autorl.agents.install openhands --python /opt/python3.12/bin/python3.12
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys

from autorl.agent_schema import CliAgentConfig, InstallManager
from autorl.agents.cli import (
    install_commands,
    install_dir,
    installed_path,
    installed_version,
    resolve_python,
)
from autorl.config import compose
from autorl.errors import AutorlError
from autorl.registry import check_names


def main(argv: list[str] | None = None) -> int:
    """Install (or print how to install) the named agents' CLIs; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m autorl.agents.install", description=__doc__.splitlines()[0]
    )
    parser.add_argument("agents", nargs="+", help="agent names (python -m autorl.ls agents)")
    parser.add_argument(
        "--print", action="store_true", dest="dry", help="print the commands, run nothing"
    )
    parser.add_argument(
        "--force", action="store_true", help="reinstall even when the pinned version is installed"
    )
    parser.add_argument(
        "--python",
        help="pip CLIs: the interpreter their venv is made with (default: install.python)",
    )
    args = parser.parse_args(argv)
    try:
        check_names("agent", args.agents)
        configs = [compose([f"agent={name}"]).agent for name in args.agents]
    except AutorlError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for cfg in configs:
        if not isinstance(cfg, CliAgentConfig):
            print(f"{cfg.name}: built in, nothing to install")
            continue
        if args.python and cfg.install.manager == InstallManager.pip:
            cfg = dataclasses.replace(
                cfg, install=dataclasses.replace(cfg.install, python=args.python)
            )
        pinned = cfg.install.version
        if not (args.dry or args.force) and installed_version(cfg) == pinned:
            print(f"{cfg.name} {pinned}: already installed ({installed_path(cfg)})")
            continue
        try:
            python = resolve_python(cfg) if cfg.install.manager == InstallManager.pip else None
            commands = install_commands(cfg, python)
        except AutorlError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        install_dir(cfg).parent.mkdir(parents=True, exist_ok=True)
        for command in commands:
            print("+", " ".join(command), flush=True)
            if not args.dry and subprocess.run(command).returncode != 0:
                print(f"error: installing {cfg.name} failed", file=sys.stderr)
                return 1
        if not args.dry and installed_version(cfg) != pinned:
            print(
                f"error: {cfg.name} {pinned} is not at {installed_path(cfg)} after installing it",
                file=sys.stderr,
            )
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
