"""Benchmark: planning the paper's grid, spliced from parts vs one composition per cell.

Plans ``agent=all driver=all task=all seed=0,1,2`` (a dry run's work without printing: the cells of
the grid, composed and checked) with :func:`autorl.config.plan_sweep`, which composes each axis
value once and splices the cells from those parts; then, in the same run, composes a sample of the
same cells one by one with :func:`autorl.config.compose` (what a per-cell planner does) and
extrapolates that to the whole grid. Prints both, their ratio, and the pre-flight plan's own time.

    python bench/plan_speed.py
    python bench/plan_speed.py --sample 60 --json plan.json

Driver keys are set to placeholders for the run (planning reads no key; a real run checks them).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autorl.config import compose, plan_sweep  # noqa: E402
from autorl.preflight_plan import make_plan  # noqa: E402
from autorl.registry import AXES  # noqa: E402

GRID = ["agent=all", "driver=all", "task=all", "seed=0,1,2"]


def main() -> int:
    """Run the benchmark; exit 0 when the grid plans within the issue's 10 s."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=40, help="cells composed one by one")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        os.environ.setdefault(key, "placeholder")
    compose([])  # Hydra's and the task registry's first-use cost, out of both timings

    started = time.perf_counter()
    plan = plan_sweep(GRID)
    spliced_s = time.perf_counter() - started
    started = time.perf_counter()
    make_plan(plan.cells, [])
    preflight_s = time.perf_counter() - started

    sample = random.Random(0).sample(plan.cells, min(args.sample, len(plan.cells)))
    started = time.perf_counter()
    for cell in sample:
        values = (cell.agent, cell.driver, cell.task, cell.model, cell.seed)
        compose([f"{axis}={value}" for axis, value in zip(AXES, values, strict=True)])
    per_cell_s = (time.perf_counter() - started) / len(sample)
    one_by_one_s = per_cell_s * len(plan.cells)

    figures = {
        "cells": len(plan.cells),
        "left_out_pairs": len(plan.left_out),
        "spliced_plan_s": round(spliced_s, 2),
        "preflight_plan_s": round(preflight_s, 3),
        "one_by_one_per_cell_s": round(per_cell_s, 3),
        "one_by_one_estimate_s": round(one_by_one_s, 1),
        "ratio": round(one_by_one_s / spliced_s, 1),
    }
    print(
        f"{figures['cells']} cells ({figures['left_out_pairs']} pairs left out): planned in "
        f"{spliced_s:.1f} s spliced (pre-flight plan {preflight_s:.2f} s); one composition per "
        f"cell takes {per_cell_s:.3f} s ({len(sample)} sampled), {one_by_one_s:.0f} s for the "
        f"grid: {figures['ratio']}x"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0 if spliced_s + preflight_s <= 10 else 1


if __name__ == "__main__":
    sys.exit(main())
