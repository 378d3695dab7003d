"""Benchmark: interactive evaluation with all episodes concurrent vs one at a time (the reference's way).

Plays the same eval episodes of an interactive task twice with the same model (greedy, HF engine):
once with every episode live together (one batched engine call per step for all of them) and once
one episode at a time with one generate call per step. Checks that both give the same score and the
same actions, and prints the wall-clock speed ratio.

    python bench/interactive_eval.py --task alfworld --episodes 36
    python bench/interactive_eval.py --task webshop --episodes 48 --max-steps 10

Uses the tiny model and the task's fixture data (built into --cache-dir on first use); episodes run
in-process (no Ray), so the ratio measures batching of generation, not env parallelism.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _run(task: str, engine: Any, private_dir: Path, overrides: dict[str, Any]) -> tuple[Any, float]:
    """Evaluate with the task's fixture eval options (conf/task/<task>.yaml) and ``overrides`` over them."""
    from autorl.tasks import EvalContext, get_task, load_evaluator

    spec = get_task(task)
    started = time.perf_counter()
    result = load_evaluator(spec)(engine, EvalContext.for_task(spec, "fixture", private_dir, overrides))
    return result, time.perf_counter() - started


def main(argv: list[str]) -> int:
    """Run the benchmark; exit code 1 when the two runs disagree."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    from autorl.tasks import discover_tasks

    interactive = sorted(t for t, spec in discover_tasks().items() if spec.kind == "interactive")
    parser.add_argument("--task", default="alfworld", choices=interactive)
    parser.add_argument("--episodes", type=int, default=36)
    parser.add_argument("--max-steps", type=int, default=None, help="default: the task's fixture setting")
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "autorl"))
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    import torch

    from autorl.engine.hf import HFEngine
    from autorl.models.tiny import ensure_tiny_model
    from autorl.tasks import build_task_data, get_task, task_options

    torch.set_num_threads(args.threads)
    cache = Path(args.cache_dir)
    spec = get_task(args.task)
    defaults = task_options(spec, "fixture")
    build = {"eval_size": max(int(defaults.build["eval_size"]), args.episodes)}
    data = build_task_data(spec, "fixture", cache / "tasks", seed=0, options=build)
    options: dict[str, Any] = {"limit": args.episodes}
    if args.max_steps is not None:
        options["max_steps"] = args.max_steps
    engine = HFEngine(ensure_tiny_model(cache / "models"), batch_size=max(64, args.episodes))
    print(f"task={args.task} episodes={args.episodes} eval option overrides={options}", flush=True)

    together, t_together = _run(args.task, engine, data.private_dir, options | {"concurrency": args.episodes})
    print(f"concurrent: score {together.score:.2f}  {t_together:.1f} s  engine calls {together.details['engine_calls']}", flush=True)
    alone, t_alone = _run(args.task, engine, data.private_dir, options | {"concurrency": 1})
    print(f"one at a time: score {alone.score:.2f}  {t_alone:.1f} s  engine calls {alone.details['engine_calls']}", flush=True)

    same = together.score == alone.score and together.details["samples"] == alone.details["samples"]
    print(f"scores identical: {same}   speed-up (one at a time / concurrent): {t_alone / t_together:.1f}x")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
