"""Benchmark: interactive evaluation, all episodes concurrent vs one at a time (the reference's
way).

Plays the same eval episodes of an interactive task twice with the same warm HF engine (greedy, stop
strings on, prompt-prefix reuse on): once one episode at a time with one generate call per step
(the baseline: the reference's way with today's engine), and once with every episode live together
(one batched engine call per step for all of them). Checks that both give the same score and the
same actions of every episode, and prints engine time, environment time and wall time of each, and
their ratios. ``--json`` writes the figures.

    python bench/interactive_eval.py --task alfworld --episodes 36
    python bench/interactive_eval.py --task webshop --episodes 48 --max-steps 10 --json webshop.json

Uses the tiny model and the task's fixture data (built into --cache-dir on first use); episodes run
in-process (no Ray); the concurrent run steps its environments in ``--env-workers`` forked processes
at once (what the sweep's EnvPool actors do), the baseline in this process. Engine time is the time
inside ``generate_*``, environment time the time inside the env client's reset/step/close; the rest
(prompt rendering, parsing) is wall minus both.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@dataclass
class Timer:
    """Seconds spent inside the wrapped calls, and how many calls."""

    seconds: float = 0.0
    calls: int = 0

    def run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - started
            self.calls += 1


@dataclass
class TimedEngine:
    """A generation engine whose calls are timed."""

    engine: Any
    timer: Timer = field(default_factory=Timer)

    def generate_chat(self, conversations: list[Any], **kwargs: Any) -> list[str]:
        return list(self.timer.run(self.engine.generate_chat, conversations, **kwargs))

    def generate_text(self, prompts: list[str], **kwargs: Any) -> list[str]:
        return list(self.timer.run(self.engine.generate_text, prompts, **kwargs))


@dataclass
class TimedEnvs:
    """An episode client whose calls are timed, recording every action sent to every episode."""

    envs: Any
    timer: Timer = field(default_factory=Timer)
    actions: dict[str, list[str]] = field(default_factory=dict)
    _episode_of: dict[str, str] = field(default_factory=dict)

    def reset(self, episode_ids: list[str]) -> Any:
        started = self.timer.run(self.envs.reset, episode_ids)
        for episode_id, (handle, _) in zip(episode_ids, started, strict=True):
            self._episode_of[handle] = episode_id
            self.actions[episode_id] = []
        return started

    def step(self, moves: list[tuple[str, str]]) -> Any:
        for handle, action in moves:
            self.actions[self._episode_of[handle]].append(action)
        return self.timer.run(self.envs.step, moves)

    def close(self, handles: list[str]) -> None:
        self.timer.run(self.envs.close, handles)


def _env_worker(conn: Any, kind: str, task: str, private_dir: str, options: dict[str, Any]) -> None:
    """A process hosting in-process environments; answers ``(method, argument)`` until ``None``."""
    from autorl.envs.host import local_episode_client

    client = local_episode_client(kind, task, Path(private_dir), options)
    while (message := conn.recv()) is not None:
        method, argument = message
        try:
            conn.send((True, getattr(client, method)(argument)))
        except Exception as error:  # noqa: BLE001 - sent back and raised in the parent
            conn.send((False, error))
    client.client.shutdown()


class ProcessEnvs:
    """Episodes spread over worker processes (forked, so imports and parser caches are inherited),
    each batch of steps sent to every worker at once: the EnvPool's parallel stepping, without Ray.
    """

    def __init__(
        self, workers: int, kind: str, task: str, private_dir: Path, options: dict[str, Any]
    ) -> None:
        import multiprocessing

        context = multiprocessing.get_context("fork")
        self.conns = []
        self.procs = []
        for _ in range(workers):
            parent, child = context.Pipe()
            proc = context.Process(
                target=_env_worker, args=(child, kind, task, str(private_dir), options), daemon=True
            )
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)
        self._next = 0

    def _call(self, batches: dict[int, list[Any]], method: str) -> dict[int, Any]:
        for worker, batch in batches.items():
            self.conns[worker].send((method, batch))
        answers = {}
        for worker in batches:
            ok, value = self.conns[worker].recv()
            if not ok:
                raise value
            answers[worker] = value
        return answers

    def reset(self, episode_ids: list[str]) -> list[tuple[str, Any]]:
        placed = []
        for episode_id in episode_ids:
            placed.append((self._next, episode_id))
            self._next = (self._next + 1) % len(self.conns)
        batches: dict[int, list[str]] = {}
        for worker, episode_id in placed:
            batches.setdefault(worker, []).append(episode_id)
        answers = {w: iter(a) for w, a in self._call(batches, "reset").items()}
        started = []
        for worker, _ in placed:
            handle, result = next(answers[worker])
            started.append((f"{worker}:{handle}", result))
        return started

    def step(self, moves: list[tuple[str, str]]) -> list[Any]:
        batches: dict[int, list[tuple[str, str]]] = {}
        for handle, action in moves:
            worker, local = handle.split(":", 1)
            batches.setdefault(int(worker), []).append((local, action))
        answers = {w: iter(a) for w, a in self._call(batches, "step").items()}
        return [next(answers[int(handle.split(":", 1)[0])]) for handle, _ in moves]

    def close(self, handles: list[str]) -> None:
        batches: dict[int, list[str]] = {}
        for handle in handles:
            worker, local = handle.split(":", 1)
            batches.setdefault(int(worker), []).append(local)
        self._call(batches, "close")

    def shutdown(self) -> None:
        for conn, proc in zip(self.conns, self.procs, strict=True):
            conn.send(None)
            proc.join(timeout=30)


def _run(
    task: str, engine: Any, private_dir: Path, overrides: dict[str, Any], env_workers: int = 1
) -> dict[str, Any]:
    """Evaluate with the task's fixture eval options (tasks/<task>/options.py) and ``overrides``
    over them; ``env_workers`` > 1 steps the environments in that many processes."""
    from autorl.envs.host import local_episode_client
    from autorl.tasks import EvalContext, get_task, load_evaluator, plain

    spec = get_task(task)
    ctx = EvalContext.for_task(spec, "fixture", private_dir, overrides)
    kind = spec.env or task
    client: Any = (
        ProcessEnvs(env_workers, kind, task, private_dir, plain(ctx.options))
        if env_workers > 1
        else local_episode_client(kind, task, private_dir, plain(ctx.options))
    )
    envs = TimedEnvs(client)
    timed = TimedEngine(engine)
    prefix = getattr(engine, "prefix", None)
    reused_before = prefix.reused_tokens if prefix is not None else 0
    encoded_before = prefix.encoded_tokens if prefix is not None else 0
    started = time.perf_counter()
    result = load_evaluator(spec)(timed, replace(ctx, envs=envs))
    wall = time.perf_counter() - started
    if isinstance(client, ProcessEnvs):
        client.shutdown()
    else:
        client.client.shutdown()
    return {
        "score": result.score,
        "details": result.details,
        "actions": envs.actions,
        "wall_s": wall,
        "engine_s": timed.timer.seconds,
        "engine_calls": timed.timer.calls,
        "env_s": envs.timer.seconds,
        "env_calls": envs.timer.calls,
        "other_s": wall - timed.timer.seconds - envs.timer.seconds,
        "prompt_tokens_reused": (prefix.reused_tokens - reused_before) if prefix is not None else 0,
        "prompt_tokens_encoded": (prefix.encoded_tokens - encoded_before)
        if prefix is not None
        else 0,
    }


def _line(name: str, run: dict[str, Any]) -> str:
    return (
        f"{name:<14} score {run['score']:6.2f}  wall {run['wall_s']:6.1f} s  engine "
        f"{run['engine_s']:6.1f} s ({run['engine_calls']} calls)  env {run['env_s']:5.1f} s  other "
        f"{run['other_s']:4.1f} s  prompt tokens encoded {run['prompt_tokens_encoded']}, reused "
        f"{run['prompt_tokens_reused']}"
    )


def main(argv: list[str]) -> int:
    """Run the benchmark; exit code 1 when the two runs disagree."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    from autorl.tasks import discover_tasks

    interactive = sorted(t for t, spec in discover_tasks().items() if spec.kind == "interactive")
    parser.add_argument("--task", default="alfworld", choices=interactive)
    parser.add_argument("--episodes", type=int, default=36)
    parser.add_argument(
        "--max-steps", type=int, default=None, help="default: the task's fixture setting"
    )
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "autorl"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--no-prefix-cache", action="store_true", help="engine without prompt-prefix reuse"
    )
    parser.add_argument(
        "--baseline-without-prefix-cache",
        action="store_true",
        help="the baseline engine without prompt-prefix reuse (the reference's engine plus stop "
        "strings)",
    )
    parser.add_argument(
        "--env-workers",
        type=int,
        default=1,
        help="processes stepping the concurrent run's environments (the EnvPool's parallelism); "
        "1: in-process",
    )
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args(argv)

    import torch

    from autorl.engine.hf import HFEngine
    from autorl.models.tiny import ensure_tiny_model
    from autorl.tasks import build_options, build_task_data, get_task

    torch.set_num_threads(args.threads)
    cache = Path(args.cache_dir)
    spec = get_task(args.task)
    build = {"eval_size": max(build_options(spec, "fixture")["eval_size"], args.episodes)}
    data = build_task_data(spec, "fixture", cache / "tasks", seed=0, options=build)
    options: dict[str, Any] = {"limit": args.episodes}
    if args.max_steps is not None:
        options["max_steps"] = args.max_steps
    engine = HFEngine(
        ensure_tiny_model(cache / "models"),
        batch_size=max(64, args.episodes),
        prefix_cache=not args.no_prefix_cache,
    )
    print(
        f"task={args.task} episodes={args.episodes} eval option overrides={options} "
        f"prefix cache={'off' if args.no_prefix_cache else 'on'} threads={args.threads} "
        f"env workers (concurrent run)={args.env_workers}",
        flush=True,
    )

    baseline_engine = engine
    if args.baseline_without_prefix_cache:
        baseline_engine = HFEngine(
            ensure_tiny_model(cache / "models"),
            batch_size=max(64, args.episodes),
            prefix_cache=False,
        )
    alone = _run(args.task, baseline_engine, data.private_dir, options | {"concurrency": 1})
    print(_line("one at a time", alone), flush=True)
    if engine.prefix is not None:
        engine.prefix.clear()  # the concurrent run starts cold as well
    together = _run(
        args.task,
        engine,
        data.private_dir,
        options | {"concurrency": args.episodes},
        args.env_workers,
    )
    print(_line("concurrent", together), flush=True)

    same_score = together["score"] == alone["score"]
    same_actions = together["actions"] == alone["actions"]
    ratios = {
        key: alone[f"{key}_s"] / max(together[f"{key}_s"], 1e-9)
        for key in ("wall", "engine", "env")
    }
    print(
        f"scores identical: {same_score}   actions identical: {same_actions}   "
        f"one at a time / concurrent: wall {ratios['wall']:.1f}x  engine {ratios['engine']:.1f}x  "
        f"env {ratios['env']:.1f}x"
    )
    if args.json:
        payload = {
            "task": args.task,
            "episodes": args.episodes,
            "options": options,
            "threads": args.threads,
            "prefix_cache": not args.no_prefix_cache,
            "baseline_prefix_cache": not (
                args.no_prefix_cache or args.baseline_without_prefix_cache
            ),
            "env_workers": args.env_workers,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "one_at_a_time": alone,
            "concurrent": together,
            "ratios": ratios,
            "same_score": same_score,
            "same_actions": same_actions,
        }
        Path(args.json).write_text(json.dumps(payload, indent=2, default=str))
    return 0 if same_score and same_actions else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
