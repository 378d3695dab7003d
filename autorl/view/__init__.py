"""The live viewer of a sweep: ``python -m autorl.view outputs/<sweep_id>`` (see ``__main__``).

A local web app over the sweep folder's record store, opened read-only: the cells grouped by
task × agent × driver, each cell's submissions, driver calls, code revisions and agent log, kept
up to date by server-sent events while the sweep runs. Its routes are in docs/threat-model.md §7.
"""

from __future__ import annotations

import shlex
from pathlib import Path


def view_command(sweep_dir: Path) -> str:
    """The command line that watches ``sweep_dir`` live (for the sweep to print when it starts).

    >>> view_command(Path("outputs/my sweep"))
    "python -m autorl.view 'outputs/my sweep'"
    """
    return f"python -m autorl.view {shlex.quote(str(sweep_dir))}"
