"""The scripted agent process: run the recipe of ``$TASK`` (SFT, then RL, submitting each stage).

It uses only what any agent gets: the environment variables (``TASK``, ``MODEL_PATH``,
``DATA_PATH``, ``OUTPUT_DIR``, ``GRADING_SERVER_URL``, ``GRADING_TOKEN``), the workspace's files
and the grading API. Each task's recipe is a module ``autorl.agents.scripted.<task>`` with a
``run(args) -> int`` function.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

from autorl.agents.scripted.common import log

# task id -> recipe module; a task without an entry gets no submission (exit code 3).
RECIPES = {"gsm8k": "autorl.agents.scripted.gsm8k",
           "humaneval": "autorl.agents.scripted.humaneval",
           "alpacaeval": "autorl.agents.scripted.alpacaeval",
           "alfworld": "autorl.agents.scripted.alfworld",
           "webshop": "autorl.agents.scripted.webshop",
           "deepsearchqa": "autorl.agents.scripted.deepsearchqa"}


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The recipe's knobs (set from conf/agent/scripted.yaml by the adapter)."""
    parser = argparse.ArgumentParser(prog="python -m autorl.agents.scripted")
    for name, kind in [("sft-steps", int), ("sft-batch-size", int), ("sft-lr", float), ("sft-max-length", int),
                       ("grpo-steps", int), ("grpo-batch-size", int), ("grpo-generations", int), ("grpo-lr", float),
                       ("grpo-max-completion", int)]:
        parser.add_argument(f"--{name}", type=kind, required=True)
    parser.add_argument("--seed", type=int, default=0, help="the cell's seed: data order and sampling vary with it")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    """Run the recipe of ``$TASK``; the exit code is the recipe's."""
    args = parse_args(argv)
    import torch

    torch.manual_seed(args.seed)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    task = os.environ["TASK"]
    if task not in RECIPES:
        log(f"no recipe for task {task!r} (recipes: {', '.join(RECIPES)}); exiting without a submission")
        return 3
    Path("code").mkdir(exist_ok=True)
    (Path("code") / "recipe.json").write_text(json.dumps({"task": task, "recipe": RECIPES[task], **vars(args)}, indent=2))
    recipe = importlib.import_module(RECIPES[task])
    return int(recipe.run(args))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
