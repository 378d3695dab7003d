"""Evaluator for webshop: the reference's protocol, every session played concurrently.

Protocol (reference ``benchmarks/webshop/eval.py``): sessions 0-99, the model's chat template with
the reference's system message and user prompt (verbatim): the instruction, available actions,
rules and the last 5 observation/action pairs (:mod:`.agent.protocol`; the fixture's ``multi_turn``
splits it into one chat turn per step), greedy, at most 100 tokens, stop
``"\\n"``, at most 50 steps. A session succeeds when its purchase reward is at least 0.5
(the reference's threshold); one not finished within the steps gets reward 0. All sessions advance
together: one batched engine call per step, env steps in parallel in the EnvPool (``ctx.envs``).
"""

from __future__ import annotations

import json
from pathlib import Path

from agent_kit.rollout import PlayStats, play
from autorl.engine.base import GenerationEngine
from autorl.envs.host import local_episode_client
from autorl.errors import TaskError
from autorl.tasks import EvalContext, EvalResult, plain

from .agent.protocol import WebShopProtocol
from .options import Eval

NUM_SAMPLES = 3


def evaluate(engine: GenerationEngine, ctx: EvalContext) -> EvalResult:
    """Play every eval session; score = % with reward >= ``success_threshold``.

    Args:
        engine: Greedy generation engine.
        ctx: ``private_dir`` holds ``goals.jsonl`` (the eval sessions); ``options``, an
            :class:`~.options.Eval` (defaults and meanings in ``options.py``): ``max_steps``,
            ``max_new_tokens``, ``history_window``, ``multi_turn``, ``success_threshold``,
            ``concurrency``, ``limit``, ``backend`` (``builtin``, ``textenv`` or ``server``),
            ``server_url``, ``server_timeout_s``; ``envs``: episodes bound to this task's data in
            the EnvPool, ``None``: play in-process.

    Returns:
        The success rate x100, with ``avg_reward``, ``avg_steps`` and a few transcripts.

    Raises:
        TaskError: Unknown or missing options, or no eval sessions.
    """
    opts, private_dir = ctx.options_as(Eval), Path(ctx.private_dir)
    path = private_dir / "goals.jsonl"
    ids = [
        json.loads(line)["episode_id"]
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    if opts.limit is not None:
        ids = ids[: opts.limit]
    if not ids:
        raise TaskError(f"no eval sessions in {path}")
    client = ctx.envs or local_episode_client("webshop", "webshop", private_dir, plain(opts))
    protocol = WebShopProtocol(
        max_new_tokens=opts.max_new_tokens,
        history_window=opts.history_window,
        multi_turn=opts.multi_turn,
    )
    stats = PlayStats()
    played = play(
        engine,
        client,
        ids,
        protocol,
        max_steps=opts.max_steps,
        concurrency=opts.concurrency,
        stats=stats,
    )
    rewards = [e.current.reward if e.current.done else 0.0 for e in played]
    success = sum(r >= opts.success_threshold for r in rewards)
    samples = [
        {"episode_id": e.episode_id, "reward": r, "steps": e.steps, "actions": e.actions[:15]}
        for e, r in list(zip(played, rewards, strict=True))[:NUM_SAMPLES]
    ]
    details = {
        "success_count": success,
        "total_count": len(played),
        "success_rate": success / len(played),
        "avg_reward": sum(rewards) / len(played),
        "avg_steps": sum(e.steps for e in played) / len(played),
        "engine_calls": stats.engine_calls,
        "max_live": stats.max_live,
        "samples": samples,
        "env_client": type(getattr(client, "client", client)).__name__,
    }
    return EvalResult(
        score=100.0 * success / len(played), num_examples=len(played), details=details
    )
