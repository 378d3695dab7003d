"""``python -m autorl.ls tasks|agents|drivers|models|clusters|engines|sandboxes``: list what is
registered.

Lists autorl's own options and those of the plugin folders (:mod:`autorl.plugins`) named by
``AUTORL_PLUGIN_PATH`` or ``--plugins``; a plugin's option says which folder it comes from.
``--names`` prints the names alone, one a line; ``agents --cli`` only the coding-agent CLIs
(what the Makefile installs for the tests). Imports nothing heavy (no torch, no Ray): it reads
YAML files, and for ``--cli`` the agents' adapter modules.

Examples:
    $ python -m autorl.ls tasks
    $ python -m autorl.ls agents --names --cli
    $ python -m autorl.ls tasks --plugins ~/my_plugin
"""

from __future__ import annotations

import argparse
import sys

from autorl.errors import ConfigError
from autorl.plugins import PLUGIN_PATH_ENV, activate, plugin_dirs
from autorl.registry import list_options

_KINDS = {
    "tasks": "task",
    "agents": "agent",
    "drivers": "driver",
    "models": "model",
    "clusters": "cluster",
    "engines": "engine",
    "sandboxes": "sandbox",
}


def _parser() -> argparse.ArgumentParser:
    """The command line of ``python -m autorl.ls``."""
    parser = argparse.ArgumentParser(
        prog="python -m autorl.ls",
        description="List the registered tasks, agents, drivers, models, clusters, engines or "
        "sandbox backends, "
        "autorl's and the plugins'.",
        epilog="examples:\n  python -m autorl.ls tasks\n"
        "  python -m autorl.ls agents --names --cli\n"
        "  python -m autorl.ls tasks --plugins ~/my_plugin",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("kind", choices=sorted(_KINDS))
    parser.add_argument(
        "--plugins",
        action="append",
        default=[],
        metavar="DIR",
        help=f"a plugin folder (repeatable), added to those in ${PLUGIN_PATH_ENV}",
    )
    parser.add_argument("--names", action="store_true", help="print only the names, one a line")
    parser.add_argument(
        "--cli",
        action="store_true",
        help="agents: only the coding-agent CLIs (adapters built on CLIAgent)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Print one line per registered option of the requested kind; return the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.cli and args.kind != "agents":
        parser.error("--cli lists agents only: python -m autorl.ls agents --cli")
    try:
        activate(plugin_dirs(args.plugins))
        options = list_options(_KINDS[args.kind])
        if args.cli:
            from autorl.agents.cli import cli_agent_names

            clis = set(cli_agent_names())
            options = [option for option in options if option.name in clis]
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.names:
        for option in options:
            print(option.name)
        return 0
    width = max((len(option.name) for option in options), default=0)
    for option in options:
        origin = f"  (plugin {option.plugin})" if option.plugin else ""
        print(f"{option.name:<{width}}  {option.description}{origin}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
