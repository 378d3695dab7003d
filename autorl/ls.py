"""``python -m autorl.ls tasks|agents|drivers|models|clusters``: list what is registered.

Imports nothing heavy (no torch, no Ray): it only reads YAML files.

Examples:
    $ python -m autorl.ls tasks
    $ python -m autorl.ls agents
"""

from __future__ import annotations

import argparse
import sys

from autorl.errors import ConfigError
from autorl.registry import list_options

_KINDS = {"tasks": "task", "agents": "agent", "drivers": "driver", "models": "model", "clusters": "cluster"}


def main(argv: list[str] | None = None) -> int:
    """Print one line per registered option of the requested kind; return the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m autorl.ls",
        description="List the registered tasks, agents, drivers, models or clusters.",
        epilog="examples:\n  python -m autorl.ls tasks\n  python -m autorl.ls drivers",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("kind", choices=sorted(_KINDS))
    args = parser.parse_args(argv)
    try:
        options = list_options(_KINDS[args.kind])
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    width = max((len(option.name) for option in options), default=0)
    for option in options:
        print(f"{option.name:<{width}}  {option.description}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
