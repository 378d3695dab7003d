"""The package that task folders are imported under: ``tasks/<id>/`` is ``autorl.task_code.<id>``.

``tasks/`` is not an installed package (a top-level ``tasks`` could collide with anything), so this
package's search path points at it instead. A task folder's files then import each other with
relative imports (``from .agent.protocol import extract_answer``), its manifest names entry points
relative to it (``evaluate:evaluate``), and the same names resolve in every process that can import
autorl, Ray workers included. Nothing here names a task.

Plugin folders (:mod:`autorl.plugins`) add their ``tasks/`` to the search path: the ones named by
``AUTORL_PLUGIN_PATH`` when this package is imported, so that a Ray worker that unpickles a
reference to ``autorl.task_code.<plugin task>`` finds it before anything else runs, and the ones
:func:`autorl.plugins.activate` adds later.
"""

from __future__ import annotations

import os
from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"
# Plugin folders, joined with os.pathsep; defined here rather than in autorl.plugins (which
# re-exports it) because that module builds on this one.
PLUGIN_PATH_ENV = "AUTORL_PLUGIN_PATH"

# Extended (never replaced) by whoever adds task folders, so that imported task modules stay valid.
__path__ = [str(TASKS_DIR)]


def add_tasks_dir(folder: Path) -> None:
    """Make the task folders under ``folder`` importable as ``autorl.task_code.<id>`` (idempotent).

    Earlier folders win when two hold the same task id; :func:`autorl.tasks.discover_tasks`
    refuses such duplicates before anything is imported.
    """
    path = str(Path(folder).resolve())
    if path not in __path__:
        __path__.append(path)


def env_plugin_dirs() -> list[Path]:
    """The folders ``AUTORL_PLUGIN_PATH`` names, unchecked (:func:`autorl.plugins.plugin_dirs`
    checks them)."""
    return [
        Path(raw).expanduser()
        for raw in os.environ.get(PLUGIN_PATH_ENV, "").split(os.pathsep)
        if raw
    ]


# A missing or malformed plugin folder is reported by whoever discovers the tasks, with its cause;
# here it only adds nothing.
for _plugin in env_plugin_dirs():
    if (_plugin / "tasks").is_dir():
        add_tasks_dir(_plugin / "tasks")
