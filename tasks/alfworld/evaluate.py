"""Evaluator for alfworld: the reference's ReAct protocol, every eval game played concurrently.

Protocol (reference ``benchmarks/alfworld/eval.py``, a port of ReAct's ``alfworld.ipynb``): a
2-shot ReAct prompt per task type (:mod:`autorl.task_code.alfworld.agent.protocol`), raw
completion, greedy, at most ``max_new_tokens`` (the reference's 100) tokens, stop ``"\\n"``, at most
``max_steps`` (the reference's 50) actions per game.
Unlike the reference, all games advance together: one batched engine call per step for every
live game, env steps in parallel in the EnvPool (``ctx.envs``); without it the games run in
this process. Score = % of games won, with per-task-type rates.
"""

from __future__ import annotations

from pathlib import Path

from agent_kit.rollout import PlayStats, play
from autorl.engine.base import GenerationEngine
from autorl.envs.host import local_episode_client
from autorl.errors import TaskError
from autorl.tasks import EvalContext, EvalResult, plain

from .agent.protocol import AlfworldProtocol
from .env import load_episodes
from .games import SHORT_TYPES
from .options import Eval

NUM_SAMPLES = 3


def evaluate(engine: GenerationEngine, ctx: EvalContext) -> EvalResult:
    """Play every eval game and score the percentage won.

    Args:
        engine: Greedy generation engine.
        ctx: ``private_dir`` holds ``episodes.jsonl`` (the eval games); ``options``, an
            :class:`~.options.Eval` (defaults and meanings in ``options.py``): ``max_steps``,
            ``max_new_tokens``, ``max_prompt_chars`` (``None``: no truncation here; the engine
            still keeps the prompt's end within the model's window), ``concurrency`` (live games),
            ``limit`` (first N games); ``envs``: episodes bound to this task's data in the EnvPool
            (``None``: play in-process).

    Returns:
        % won, with ``success_count``, ``total_count``, ``per_task`` and a few transcripts.

    Raises:
        TaskError: Unknown or missing options, or no eval games.
    """
    opts, private_dir = ctx.options_as(Eval), Path(ctx.private_dir)
    episodes = list(load_episodes(private_dir))  # file order: task types interleaved
    if opts.limit is not None:
        episodes = episodes[: opts.limit]
    if not episodes:
        raise TaskError(f"no eval games in {private_dir}/episodes.jsonl")
    client = ctx.envs or local_episode_client("alfworld", "alfworld", private_dir, plain(opts))
    protocol = AlfworldProtocol(
        max_new_tokens=opts.max_new_tokens, max_prompt_chars=opts.max_prompt_chars
    )
    stats = PlayStats()
    played = play(
        engine,
        client,
        episodes,
        protocol,
        max_steps=opts.max_steps,
        concurrency=opts.concurrency,
        stats=stats,
    )
    per_task: dict[str, dict[str, float]] = {}
    won_total = 0
    for episode in played:
        won = bool(episode.current.info.get("won"))
        won_total += won
        task = str(episode.first.info["task_type"])
        entry = per_task.setdefault(task, {"success": 0, "total": 0})
        entry["success"] += won
        entry["total"] += 1
    for entry in per_task.values():
        entry["rate"] = 100.0 * entry["success"] / entry["total"]
    samples = [
        {
            "episode_id": e.episode_id,
            "won": bool(e.current.info.get("won")),
            "steps": e.steps,
            "actions": e.actions[:20],
        }
        for e in played[:NUM_SAMPLES]
    ]
    details = {
        "success_count": won_total,
        "total_count": len(played),
        "success_rate": won_total / len(played),
        "per_task": {t: per_task[t] for t in SHORT_TYPES if t in per_task},
        "engine_calls": stats.engine_calls,
        "max_live": stats.max_live,
        "samples": samples,
        "env_client": type(getattr(client, "client", client)).__name__,
    }
    return EvalResult(
        score=100.0 * won_total / len(played), num_examples=len(played), details=details
    )
