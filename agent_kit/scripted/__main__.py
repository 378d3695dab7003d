"""The scripted agent process: run the task's recipe (SFT, then RL, submitting each stage).

Started as ``python -m agent_kit.scripted`` with the agent's toolchain (sealed cells) or the project's
interpreter (``sandbox.mode=none``). It uses only what any agent gets: the environment variables
(``TASK``, ``MODEL_PATH``, ``DATA_PATH``, ``OUTPUT_DIR``, ``GRADING_SERVER_URL``, ``GRADING_TOKEN``), the
workspace's files and the grading API, plus the task's agent-side code: ``--recipe-dir`` is a copy of
``tasks/<id>/agent/`` (the only task code an agent may import), imported as the package
``task_agent`` so that it can never reach the task's grader side; ``--recipe`` names its
``run(args) -> int`` as ``module:attr`` inside that package. Where autorl is importable (``sandbox.mode=none``)
the process also refuses to import any grader-side module of it (:data:`GRADER_SIDE`); in the toolchain
there is none to refuse."""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import json
import os
import sys
from pathlib import Path

from agent_kit.scripted.common import log

AGENT_PACKAGE = "task_agent"
# What only the grader may import: task folders (builders, fixture generators, evaluators; ``tasks``
# is how a plugin folder's task folders import when that folder is on the path), the task loader that
# reaches them, and the grading and judging code. The scripted agent refuses them all.
GRADER_SIDE = ("autorl.tasks", "autorl.task_code", "autorl.grading", "autorl.judge", "tasks")


class GraderSideBlocker(importlib.abc.MetaPathFinder):
    """Refuses every import of :data:`GRADER_SIDE` in this process (the agent's own is unaffected)."""

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
        raise RuntimeError(f"grader-side modules already imported by the agent process: {', '.join(loaded)}")
    sys.meta_path.insert(0, GraderSideBlocker())


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The recipe's knobs (set from conf/agent/scripted.yaml by the adapter)."""
    parser = argparse.ArgumentParser(prog="python -m agent_kit.scripted")
    parser.add_argument("--recipe-dir", type=Path, required=True, help="the task's agent-side package (tasks/<id>/agent)")
    parser.add_argument("--recipe", default="recipe:run", help="the recipe's 'module:attr' inside that package")
    for name, kind in [("sft-steps", int), ("sft-batch-size", int), ("sft-lr", float), ("sft-max-length", int),
                       ("grpo-steps", int), ("grpo-batch-size", int), ("grpo-generations", int), ("grpo-lr", float),
                       ("grpo-max-completion", int), ("online-grpo-batches", int), ("online-grpo-batch-size", int),
                       ("online-grpo-generations", int), ("online-grpo-lr", float), ("online-grpo-iterations", int),
                       ("online-grpo-epsilon", float), ("online-grpo-temperature", float), ("online-grpo-episodes", int),
                       ("online-grpo-sft-mix", int), ("online-grpo-sft-mix-weight", float), ("online-grpo-probe", int)]:
        parser.add_argument(f"--{name}", type=kind, required=True)
    parser.add_argument("--seed", type=int, default=0, help="the cell's seed: data order and sampling vary with it")
    return parser.parse_args(argv)


def import_agent_package(folder: Path) -> None:
    """Import ``folder`` as the package :data:`AGENT_PACKAGE` (its modules import each other relatively).

    Raises:
        FileNotFoundError: ``folder`` has no ``__init__.py``.
    """
    init = folder / "__init__.py"
    if not init.is_file():
        raise FileNotFoundError(f"{folder} is not a task's agent package (no __init__.py)")
    spec = importlib.util.spec_from_file_location(AGENT_PACKAGE, init, submodule_search_locations=[str(folder)])
    assert spec is not None and spec.loader is not None  # a file location always gives a loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[AGENT_PACKAGE] = module
    spec.loader.exec_module(module)


def main(argv: list[str]) -> int:
    """Run the recipe; the exit code is the recipe's (3: the task has no recipe)."""
    args = parse_args(argv)
    block_grader_side()
    import torch

    torch.manual_seed(args.seed)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    task = os.environ["TASK"]
    recipe_file = args.recipe_dir / (args.recipe.partition(":")[0].replace(".", "/") + ".py")
    if not recipe_file.is_file():
        log(f"no recipe for task {task!r} ({recipe_file} does not exist); exiting without a submission")
        return 3
    Path("code").mkdir(exist_ok=True)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    (Path("code") / "recipe.json").write_text(json.dumps({"task": task, **settings}, indent=2))
    import_agent_package(args.recipe_dir)
    module_name, _, attr = args.recipe.partition(":")
    run = getattr(importlib.import_module(f"{AGENT_PACKAGE}.{module_name}"), attr)
    return int(run(args))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
