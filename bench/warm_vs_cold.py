"""Benchmark: submission -> score latency of a warm grader vs a cold one, and grader throughput.

Scores the same submissions on a fixture task twice: cold, building a new engine for every
submission (the reference's grader), and warm, one :class:`autorl.engine.warm.WarmEngines` whose
engine was loaded for the cell's base (the baseline score) and takes each submission by swapping its
weights in. The submissions are saved variants of the tiny model with perturbed weights and one LoRA
adapter on it (applied to the base, as the grader does). Checks that both give the same scores and
details, prints the latencies and their ratio, and writes JSON.

``--cells N`` adds the throughput case: N cells submit at once (N threads, each submitting every
submission in its own order) to one grader, which scores one submission at a time as a Grader actor
does; measured warm and cold, as submissions per minute and the latency each cell sees (queueing
included).

    python bench/warm_vs_cold.py                      # HF engine, gsm8k fixture
    python bench/warm_vs_cold.py --engine vllm --json vllm.json
    python bench/warm_vs_cold.py --cells 3

Light imports (no Ray); engine-agnostic: ``--engine`` is any name in ``autorl.engine.ENGINES``, with
the options of its ``conf/engine/<name>.yaml``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def make_submissions(base: Path, work: Path, count: int, lora: bool) -> list[Path]:
    """``count`` copies of ``base`` with noise added to every weight, and one LoRA adapter on
    ``base``.
    """
    import torch
    from safetensors.torch import load_file, save_file

    found = []
    for seed in range(count):
        dest = work / f"perturbed-{seed}"
        shutil.copytree(base, dest)
        state = load_file(str(dest / "model.safetensors"))
        generator = torch.Generator().manual_seed(seed)
        noisy = {
            k: v + 0.02 * v.std() * torch.randn(v.shape, generator=generator)
            for k, v in state.items()
        }
        save_file(noisy, str(dest / "model.safetensors"), metadata={"format": "pt"})
        found.append(dest)
    if lora:
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        dest = work / "lora"
        config = LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False
        )
        get_peft_model(AutoModelForCausalLM.from_pretrained(base), config).save_pretrained(dest)
        AutoTokenizer.from_pretrained(base).save_pretrained(dest)
        found.append(dest)
    return found


def engine_options(name: str) -> dict[str, Any]:
    """The ``options`` of ``conf/engine/<name>.yaml`` (empty when the file has none)."""
    import yaml

    path = ROOT / "conf" / "engine" / f"{name}.yaml"
    return (
        dict((yaml.safe_load(path.read_text()) or {}).get("options") or {})
        if path.is_file()
        else {}
    )


def _outcome(outcome: Any) -> dict[str, Any]:
    return {"score": outcome.score, "error": outcome.error, "num_examples": outcome.num_examples}


def latency_run(
    target: Any,
    base: Path,
    submissions: list[Path],
    cache: Path,
    args: argparse.Namespace,
    name: str,
    options: dict[str, Any],
) -> dict[str, Any]:
    """Score every submission cold, then warm; latencies and outcomes of each."""
    from autorl.engine.warm import WarmEngines
    from autorl.grading.scoring import score_model

    kwargs: dict[str, Any] = {"batch_size": args.batch_size, "base_dir": base, "engine": name}
    cold, cold_s = [], []
    for model in submissions:
        started = time.perf_counter()
        cold.append(score_model(target, model, cache, engine_options=options, **kwargs))
        cold_s.append(time.perf_counter() - started)
    warm = WarmEngines({name: options})
    try:
        started = time.perf_counter()
        baseline = score_model(
            target, base, cache, warm=warm, **kwargs
        )  # the grader scores the base first
        baseline_s = time.perf_counter() - started
        hot, hot_s = [], []
        for model in submissions:
            started = time.perf_counter()
            hot.append(score_model(target, model, cache, warm=warm, **kwargs))
            hot_s.append(time.perf_counter() - started)
        builds, swaps = warm.builds, warm.swaps
    finally:
        warm.close()
    same = [
        _outcome(c) == _outcome(h) and c.details == h.details
        for c, h in zip(cold, hot, strict=True)
    ]
    return {
        "submissions": [p.name for p in submissions],
        "cold_s": cold_s,
        "warm_s": hot_s,
        "baseline_load_and_score_s": baseline_s,
        "baseline": _outcome(baseline),
        "cold": [_outcome(o) for o in cold],
        "warm": [_outcome(o) for o in hot],
        "same": same,
        "cold_total_s": sum(cold_s),
        "warm_total_s": sum(hot_s),
        "ratio": sum(cold_s) / max(sum(hot_s), 1e-9),
        "warm_builds": builds,
        "warm_swaps": swaps,
    }


def throughput_run(
    target: Any,
    base: Path,
    submissions: list[Path],
    cache: Path,
    args: argparse.Namespace,
    name: str,
    options: dict[str, Any],
    warm_mode: bool,
) -> dict[str, Any]:
    """``args.cells`` threads submit every submission at once to one grader that scores one at a
    time.
    """
    from autorl.engine.warm import WarmEngines
    from autorl.grading.scoring import score_model

    warm = WarmEngines({name: options}) if warm_mode else None
    grader_lock = (
        warm.lock if warm is not None else threading.Lock()
    )  # a Grader actor runs one score at a time
    kwargs: dict[str, Any] = {"batch_size": args.batch_size, "base_dir": base, "engine": name}
    latencies: list[float] = []
    errors: list[BaseException] = []

    def cell(index: int) -> None:
        order = submissions[index % len(submissions) :] + submissions[: index % len(submissions)]
        for model in order:
            submitted = time.perf_counter()
            try:
                with grader_lock:
                    score_model(target, model, cache, warm=warm, engine_options=options, **kwargs)
            except BaseException as error:  # noqa: BLE001 - reported after the threads end
                errors.append(error)
            latencies.append(time.perf_counter() - submitted)

    if warm is not None:
        with warm.lock:
            score_model(
                target, base, cache, warm=warm, **kwargs
            )  # loaded for the baseline before cells submit
    started = time.perf_counter()
    threads = [threading.Thread(target=cell, args=(i,)) for i in range(args.cells)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    if warm is not None:
        warm.close()
    if errors:
        raise errors[0]
    return {
        "cells": args.cells,
        "scored": len(latencies),
        "wall_s": wall,
        "submissions_per_min": 60 * len(latencies) / wall,
        "latency_p50_s": statistics.median(latencies),
        "latency_max_s": max(latencies),
    }


def main(argv: list[str]) -> int:
    """Run the benchmark; exit code 1 when a warm score differs from its cold score."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--engine", default="hf", help="an engine of autorl.engine.ENGINES (hf, vllm)"
    )
    parser.add_argument("--task", default="gsm8k", help="a task with a fixture source")
    parser.add_argument(
        "--eval-size", type=int, default=32, help="fixture eval problems scored per submission"
    )
    parser.add_argument(
        "--submissions", type=int, default=6, help="perturbed full models (plus one LoRA adapter)"
    )
    parser.add_argument("--no-lora", action="store_true")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--engine-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override an option of conf/engine/<engine>.yaml (YAML value), e.g. lora_mode=request",
    )
    parser.add_argument(
        "--cells",
        type=int,
        default=0,
        help="also measure throughput with this many cells submitting",
    )
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "autorl"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args(argv)

    import torch
    import yaml

    from autorl.engine import resolve_engine
    from autorl.grading.scoring import EvalTarget
    from autorl.models.tiny import ensure_tiny_model
    from autorl.tasks import build_options, build_task_data, get_task

    torch.set_num_threads(args.threads)
    name = resolve_engine(args.engine)
    options = engine_options(name)
    for item in args.engine_option:
        key, sep, value = item.partition("=")
        if not sep or key not in options:
            parser.error(
                f"--engine-option {item!r}: expected KEY=VALUE with KEY one of "
                f"{', '.join(sorted(options))}"
            )
        options[key] = yaml.safe_load(value)
    cache = Path(args.cache_dir)
    spec = get_task(args.task)
    build = build_options(spec, "fixture", {"eval_size": args.eval_size})
    target = EvalTarget(args.task, spec.version, "fixture", 0, build, {})
    build_task_data(
        spec, "fixture", cache / "tasks", seed=0, options=build
    )  # built once, outside the timings
    base = ensure_tiny_model(cache / "models")
    work = Path(tempfile.mkdtemp(prefix="warm-vs-cold-"))
    try:
        submissions = make_submissions(base, work, args.submissions, lora=not args.no_lora)
        print(
            f"engine={name} options={options} task={args.task} eval_size={args.eval_size} "
            f"submissions={len(submissions)} threads={args.threads}",
            flush=True,
        )
        latency = latency_run(target, base, submissions, cache, args, name, options)
        for sub, c, w, same in zip(
            latency["submissions"],
            latency["cold_s"],
            latency["warm_s"],
            latency["same"],
            strict=True,
        ):
            print(f"  {sub:<14} cold {c:6.2f} s   warm {w:6.2f} s   same score: {same}", flush=True)
        print(
            f"latency, all submissions: cold {latency['cold_total_s']:.1f} s  warm "
            f"{latency['warm_total_s']:.1f} s  ratio {latency['ratio']:.1f}x  (warm engine built "
            f"{latency['warm_builds']}x, swapped {latency['warm_swaps']}x)  scores identical: "
            f"{all(latency['same'])}",
            flush=True,
        )
        payload: dict[str, Any] = {
            "engine": name,
            "options": options,
            "task": args.task,
            "eval_size": args.eval_size,
            "threads": args.threads,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "latency": latency,
        }
        if args.cells:
            for mode in ("cold", "warm"):
                result = throughput_run(
                    target, base, submissions, cache, args, name, options, mode == "warm"
                )
                payload[f"throughput_{mode}"] = result
                print(
                    f"throughput, {args.cells} cells at once, {mode}: "
                    f"{result['submissions_per_min']:.1f} submissions/min  latency p50 "
                    f"{result['latency_p50_s']:.1f} s  max {result['latency_max_s']:.1f} s",
                    flush=True,
                )
        if args.json:
            Path(args.json).write_text(json.dumps(payload, indent=2, default=str))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(latency["same"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
