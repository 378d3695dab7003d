"""The scripted agent process: run the task's recipe (SFT, then RL, submitting each stage).

Started as ``python -m agent_kit.scripted`` with the agent's toolchain (sealed cells) or the
project's interpreter (``sandbox.mode=none``). It uses only what any agent gets: the environment
variables (``TASK``, ``MODEL_PATH``, ``DATA_PATH``, ``OUTPUT_DIR``, ``GRADING_SERVER_URL``,
``GRADING_TOKEN``), the workspace's files and the grading API, plus the task's agent-side code.
``--settings`` names its settings file (:class:`agent_kit.scripted.settings.ScriptedSettings`,
written by the adapter): its ``recipe_dir`` is a copy of ``tasks/<id>/agent/`` (the only task code
an agent may import), imported as the package ``task_agent`` so that it can never reach the task's
grader side; its ``recipe`` names the recipe's ``run(settings) -> int`` as ``module:attr`` inside
that package. Where autorl is importable (``sandbox.mode=none``) the process also refuses to import
any grader-side module of it (:data:`GRADER_SIDE`); in the toolchain
there is none to refuse.

``--resume`` (the adapter passes it when the cell resumes the agent) makes the run go on from the
stages recorded in the workspace's :data:`agent_kit.scripted.progress.PROGRESS_FILE` instead of
starting over (:mod:`agent_kit.scripted.progress`)."""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import json
import os
import sys
from pathlib import Path

from agent_kit.scripted.common import log
from agent_kit.scripted.progress import PROGRESS, PROGRESS_FILE, RESUME_FLAG
from agent_kit.scripted.settings import SETTINGS_FILE, ScriptedSettings

AGENT_PACKAGE = "task_agent"
# What only the grader may import: task folders (builders, fixture generators, evaluators; ``tasks``
# is how a plugin folder's task folders import when that folder is on the path), the task loader
# that reaches them, and the grading and judging code. The scripted agent refuses them all.
GRADER_SIDE = ("autorl.tasks", "autorl.task_code", "autorl.grading", "autorl.judge", "tasks")


class GraderSideBlocker(importlib.abc.MetaPathFinder):
    """Refuses every import of :data:`GRADER_SIDE` in this process (the agent's own is
    unaffected)."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        """Raise for grader-side modules; ``None`` lets the other finders handle everything else."""
        if any(fullname == name or fullname.startswith(name + ".") for name in GRADER_SIDE):
            raise ImportError(f"{fullname} is grader-side code; an agent process may not import it")
        return None


def block_grader_side() -> None:
    """Install :class:`GraderSideBlocker` first on ``sys.meta_path``.

    Raises:
        RuntimeError: Grader-side code was imported before the blocker went in.
    """
    loaded = sorted(name for name in sys.modules if name.startswith(GRADER_SIDE))
    if loaded:
        raise RuntimeError(
            f"grader-side modules already imported by the agent process: {', '.join(loaded)}"
        )
    sys.meta_path.insert(0, GraderSideBlocker())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agent_kit.scripted")
    parser.add_argument(
        "--settings",
        type=Path,
        required=True,
        help=f"the settings file (JSON, e.g. the workspace's {SETTINGS_FILE})",
    )
    parser.add_argument(
        RESUME_FLAG,
        action="store_true",
        help=f"go on from the stages recorded in {PROGRESS_FILE} (a resumed cell)",
    )
    return parser


def parse_args(argv: list[str]) -> ScriptedSettings:
    """The settings named by ``--settings`` (written from conf/agent/scripted.yaml by the adapter).

    Raises:
        SystemExit: No ``--settings``, or the file holds no valid settings (the message says why).
    """
    parser = _parser()
    path = parser.parse_args(argv).settings
    try:
        return ScriptedSettings.load(path)
    except (OSError, ValueError) as error:
        parser.error(str(error))


def resume_requested(argv: list[str]) -> bool:
    """Whether ``argv`` asks to go on from the recorded stages (:data:`RESUME_FLAG`)."""
    return bool(_parser().parse_known_args(argv)[0].resume)


def import_agent_package(folder: Path) -> None:
    """Import ``folder`` as the package :data:`AGENT_PACKAGE` (its modules import each other
    relatively).

    Raises:
        FileNotFoundError: ``folder`` has no ``__init__.py``.
    """
    init = folder / "__init__.py"
    if not init.is_file():
        raise FileNotFoundError(f"{folder} is not a task's agent package (no __init__.py)")
    spec = importlib.util.spec_from_file_location(
        AGENT_PACKAGE, init, submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None  # a file location always gives a loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[AGENT_PACKAGE] = module
    spec.loader.exec_module(module)


def main(argv: list[str]) -> int:
    """Run the recipe; the exit code is the recipe's (3: the task has no recipe)."""
    settings = parse_args(argv)
    block_grader_side()
    return run_settings(settings, resume=resume_requested(argv))


def run_settings(settings: ScriptedSettings, *, resume: bool) -> int:
    """Everything after the import guard: seed, record, import and run the task's recipe, with
    the stages' progress recorded in :data:`PROGRESS_FILE` (read back first when ``resume``)."""
    import torch

    torch.manual_seed(settings.seed)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    task = os.environ["TASK"]
    recipe_dir = Path(settings.recipe_dir)
    recipe_file = recipe_dir / (settings.recipe.partition(":")[0].replace(".", "/") + ".py")
    if not recipe_file.is_file():
        log(
            f"no recipe for task {task!r} ({recipe_file} does not exist); exiting without a "
            "submission"
        )
        return 3
    Path("code").mkdir(exist_ok=True)
    # The agent's own record of what it ran, kept with its code revisions.
    recorded = {"task": task, **settings.flat()}
    (Path("code") / "recipe.json").write_text(json.dumps(recorded, indent=2))
    # A resume keeps the record of a run with the same settings; where the agent code was copied
    # to may differ on the replacement node, so it is no part of them.
    same_run = {k: v for k, v in recorded.items() if k != "recipe_dir"}
    PROGRESS.start(PROGRESS_FILE, same_run, resume=resume, log=log)
    import_agent_package(recipe_dir)
    module_name, _, attr = settings.recipe.partition(":")
    run = getattr(importlib.import_module(f"{AGENT_PACKAGE}.{module_name}"), attr)
    return int(run(settings))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
