"""The package that task folders are imported under: ``tasks/<id>/`` is ``autorl.task_code.<id>``.

``tasks/`` is not an installed package (a top-level ``tasks`` could collide with anything), so this
package's search path points at it instead. A task folder's files then import each other with
relative imports (``from .agent.protocol import extract_answer``), its manifest names entry points
relative to it (``evaluate:evaluate``), and the same names resolve in every process that can import
autorl, Ray workers included. Nothing here names a task.
"""

from __future__ import annotations

from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"

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
