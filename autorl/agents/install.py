"""``python -m autorl.agents.install <agent> [...]``: install agent CLIs at their pinned versions.

npm CLIs go to ``<agents_dir>/node_modules`` and pip CLIs to a venv ``<agents_dir>/<agent>-venv``
(see :mod:`autorl.agents.cli`); ``--print`` shows the commands without running them.

Examples:
    python -m autorl.agents.install codex opencode
    python -m autorl.agents.install openhands --print
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from autorl.agents.cli import agents_dir, install_commands
from autorl.config import compose
from autorl.errors import AutorlError
from autorl.registry import check_names


def main(argv: list[str] | None = None) -> int:
    """Install (or print how to install) the named agents' CLIs; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m autorl.agents.install", description=__doc__.splitlines()[0])
    parser.add_argument("agents", nargs="+", help="agent names (python -m autorl.ls agents)")
    parser.add_argument("--print", action="store_true", dest="dry", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    try:
        check_names("agent", args.agents)
        configs = [compose([f"agent={name}"])["agent"] for name in args.agents]
    except AutorlError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for cfg in configs:
        if "install" not in cfg:
            print(f"{cfg['name']}: built in, nothing to install")
            continue
        agents_dir(cfg).mkdir(parents=True, exist_ok=True)
        for command in install_commands(cfg):
            print("+", " ".join(command), flush=True)
            if not args.dry and subprocess.run(command).returncode != 0:
                print(f"error: installing {cfg['name']} failed", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
