"""Benchmark: the grader's scoring path vs the bare engine on the same prompts (issue #44 item 7).

For each static task, scores one submission (a saved copy of the tiny base model) through
:func:`autorl.grading.scoring.score_model` with a warm :class:`autorl.engine.warm.WarmEngines`
(loaded and warmed by scoring the base first), recording every ``generate_text`` call the evaluator
makes (prompts and settings). Then, in the same run, the bare engine generates all those prompts in
one batched call with the same settings (max_new_tokens, stops, greedy) and the outputs are compared
with the grader's. Prints grader / bare-engine per task: the grader's time without its judge
(HumanEval's test execution, AlpacaEval's LLM judge, timed separately) over the bare call.
Target: <= 1.2x on gsm8k, humaneval and alpacaeval.

    python bench/grader_overhead.py
    python bench/grader_overhead.py --tasks gsm8k --limit 32 --json out.json
    python bench/grader_overhead.py --check      # exit 1 when a task misses the 1.2x target

Model ``tiny`` (built offline), engine ``hf``, CPU, fixture task data.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET = 1.2


class Recorder:
    """Records the engine's ``generate_text`` calls and times them and the judges' calls."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.generate_s = 0.0
        self.judge_s = 0.0
        self.render_s = 0.0
        self.active = False

    def wrap_generate(self, original: Callable[..., list[str]]) -> Callable[..., list[str]]:
        """``generate_text`` that records its prompts, settings and outputs while active."""
        recorder = self

        def generate_text(self: Any, prompts: list[str], **kwargs: Any) -> list[str]:
            started = time.perf_counter()
            outputs = original(self, prompts, **kwargs)
            if recorder.active:
                recorder.generate_s += time.perf_counter() - started
                recorder.calls.append(
                    {"prompts": list(prompts), "kwargs": dict(kwargs), "outputs": list(outputs)}
                )
            return outputs

        return generate_text

    def wrap_render(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``render_chat`` (the chat template, in its render child) timed while active."""
        recorder = self

        def render_chat(self: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                if recorder.active:
                    recorder.render_s += time.perf_counter() - started

        return render_chat

    def wrap_judge(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """A judge method whose time counts as judge time while active."""
        recorder = self

        def judged(self: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                if recorder.active:
                    recorder.judge_s += time.perf_counter() - started

        return judged


def install(recorder: Recorder) -> None:
    """Patch (in this process only) the HF engine's generate and the judges' calls: HumanEval's
    FunctionJudge (start, sandbox check, test execution, close) and AlpacaEval's JudgeClient
    requests and local judge server start and stop.
    """
    from agent_kit.function_judge import FunctionJudge
    from autorl.engine.hf import HFEngine
    from autorl.judge.client import JudgeClient

    HFEngine.render_chat = recorder.wrap_render(HFEngine.render_chat)  # type: ignore[method-assign]
    HFEngine.generate_text = recorder.wrap_generate(HFEngine.generate_text)  # type: ignore[method-assign]
    for name in ("__init__", "check", "judge_many", "close"):  # its sandbox start, check, tests
        setattr(FunctionJudge, name, recorder.wrap_judge(getattr(FunctionJudge, name)))
    JudgeClient.complete_many = recorder.wrap_judge(JudgeClient.complete_many)  # type: ignore[method-assign]
    from autorl.tasks import get_task

    alpaca = importlib.import_module(f"{get_task('alpacaeval').package}.evaluate")

    original_spec = alpaca.judge_spec

    @contextmanager
    def judge_spec(options: Any) -> Iterator[Any]:
        """The local judge server's start and stop count as judge time."""
        started = time.perf_counter()
        with original_spec(options) as spec:
            if recorder.active:
                recorder.judge_s += time.perf_counter() - started
            yield spec
            started = time.perf_counter()
        if recorder.active:
            recorder.judge_s += time.perf_counter() - started

    alpaca.judge_spec = judge_spec  # type: ignore[assignment]


def measure_task(
    task: str,
    base: Path,
    submission: Path,
    cache: Path,
    args: argparse.Namespace,
    recorder: Recorder,
) -> dict[str, Any]:
    """Warm scoring of ``submission`` on ``task``, then the bare engine on the recorded prompts,
    ``args.repeats`` times; ``cache`` is a scratch cache root (its ``eval`` folder is cleared).
    """
    from autorl.engine.warm import WarmEngines
    from autorl.grading.scoring import EvalTarget, score_model
    from autorl.tasks import build_options, build_task_data, get_task

    spec = get_task(task)
    build = build_options(spec, "fixture", {"eval_size": args.limit})
    eval_options: dict[str, Any] = {"limit": args.limit}
    if task == "humaneval" and args.sandbox_mode:
        eval_options["sandbox_mode"] = args.sandbox_mode
    target = EvalTarget(task, spec.version, "fixture", 0, build, eval_options)
    build_task_data(spec, "fixture", cache / "tasks", seed=0, options=build)
    kwargs: dict[str, Any] = {"batch_size": args.batch_size, "base_dir": base, "engine": "hf"}
    warm = WarmEngines({"hf": {}})
    try:
        with warm.lock:
            baseline = score_model(target, base, cache, warm=warm, **kwargs)  # load + warm up
            runs = [_timed_run(target, submission, base, cache, args, recorder, warm, kwargs)]
            for _ in range(args.repeats - 1):
                runs.append(
                    _timed_run(target, submission, base, cache, args, recorder, warm, kwargs)
                )
    finally:
        recorder.active = False
        warm.close()
    run = min(runs, key=lambda r: r["grader_s"])  # the least disturbed run of each
    bare_s = min(r["bare_s"] for r in runs)
    without_judge = run["grader_s"] - run["judge_s"]
    ratio = without_judge / max(bare_s, 1e-9)
    return {
        "task": task,
        "baseline_score": baseline.score,
        **{key: value for key, value in run.items() if key != "bare_s"},
        "grader_without_judge_s": without_judge,
        "harness_s": without_judge - run["grader_generate_s"],
        "bare_s": bare_s,
        "ratio": ratio,
        "target_met": ratio <= TARGET,
        "same_outputs": all(r["same_outputs"] for r in runs),
        "runs": [{key: r[key] for key in ("grader_s", "judge_s", "bare_s")} for r in runs],
    }


def _timed_run(
    target: Any,
    submission: Path,
    base: Path,
    cache: Path,
    args: argparse.Namespace,
    recorder: Recorder,
    warm: Any,
    kwargs: dict[str, Any],
) -> dict[str, Any]:
    """One timed warm scoring of ``submission``, then the bare engine on its recorded prompts."""
    from autorl.grading.scoring import score_model

    # The judge's answer cache holds the base's answers by now; a new submission misses it.
    shutil.rmtree(cache / "eval", ignore_errors=True)
    recorder.calls, recorder.generate_s, recorder.judge_s, recorder.render_s = [], 0.0, 0.0, 0.0
    recorder.active = True
    try:
        started = time.perf_counter()
        outcome = score_model(target, submission, cache, warm=warm, **kwargs)
        grader_s = time.perf_counter() - started
    finally:
        recorder.active = False
    engine = warm.get("hf", submission, base, args.batch_size)
    calls = recorder.calls
    settings = {json.dumps(c["kwargs"], sort_keys=True) for c in calls}
    expected = [o for c in calls for o in c["outputs"]]
    bare: list[str] = []
    bare_s = 0.0
    if len(settings) == 1:  # one batched call with the evaluator's settings
        started = time.perf_counter()
        bare = engine.generate_text([p for c in calls for p in c["prompts"]], **calls[0]["kwargs"])
        bare_s = time.perf_counter() - started
    else:  # no call, or differing settings: one batched call per call
        for call in calls:
            started = time.perf_counter()
            bare += engine.generate_text(call["prompts"], **call["kwargs"])
            bare_s += time.perf_counter() - started
    return {
        "items": len(expected),
        "generate_calls": len(calls),
        "settings": [json.loads(s) for s in sorted(settings)],
        "score": outcome.score,
        "error": outcome.error,
        "grader_s": grader_s,
        "grader_generate_s": recorder.generate_s,
        "judge_s": recorder.judge_s,
        "render_s": recorder.render_s,
        "bare_s": bare_s,
        "same_outputs": bare == expected,
    }


def main(argv: list[str]) -> int:
    """Run the benchmark; exit 0 when it ran (with ``--check``: 1 when a task misses 1.2x)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tasks", default="gsm8k,humaneval,alpacaeval")
    parser.add_argument("--limit", type=int, default=32, help="eval items per task")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed runs per task (the fastest is reported)"
    )
    parser.add_argument(
        "--sandbox-mode", default=None, help="humaneval judge isolation (e.g. rlimits)"
    )
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "autorl"))
    parser.add_argument("--json", default=None, help="write the figures to this file")
    parser.add_argument("--check", action="store_true", help="exit 1 when a task misses 1.2x")
    args = parser.parse_args(argv)

    import torch

    from autorl.models.tiny import ensure_tiny_model

    torch.set_num_threads(args.threads)
    cache = Path(args.cache_dir)
    base = ensure_tiny_model(cache / "models")
    recorder = Recorder()
    install(recorder)
    work = Path(tempfile.mkdtemp(prefix="grader-overhead-"))
    results: list[dict[str, Any]] = []
    try:
        submission = work / "submission"
        shutil.copytree(base, submission)
        print(f"model=tiny engine=hf limit={args.limit} threads={args.threads}", flush=True)
        print(
            f"{'task':<11} {'items':>5} {'grader':>8} {'generate':>9} {'harness':>8} "
            f"{'render':>7} {'judge':>7} {'bare':>7} {'ratio':>6}  target<=1.2x  same outputs",
            flush=True,
        )
        for task in [t.strip() for t in args.tasks.split(",") if t.strip()]:
            # Task data and eval caches live in the temporary folder: each timed run clears its
            # judge cache, never the user's.
            r = measure_task(task, base, submission, work / "cache", args, recorder)
            results.append(r)
            print(
                f"{task:<11} {r['items']:>5} {r['grader_s']:7.2f}s {r['grader_generate_s']:8.2f}s "
                f"{r['harness_s']:7.2f}s {r['render_s']:6.2f}s {r['judge_s']:6.2f}s "
                f"{r['bare_s']:6.2f}s "
                f"{r['ratio']:5.2f}x  {'met' if r['target_met'] else 'MISSED':<12}  "
                f"{r['same_outputs']}" + (f"  error: {r['error']}" if r["error"] else ""),
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        "ratio = (grader - judge) / bare engine; harness = grader - judge - generate "
        "(render, the chat template in its child process, is part of harness)",
        flush=True,
    )
    if args.json:
        payload = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "limit": args.limit}
        Path(args.json).write_text(json.dumps({**payload, "tasks": results}, indent=2))
    return 1 if args.check and not all(r["target_met"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
