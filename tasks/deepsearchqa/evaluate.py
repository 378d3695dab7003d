"""Evaluator for deepsearchqa: ReAct with a working search tool, then an LLM judge.

Protocol (reference ``benchmarks/deepsearchqa/eval.py``, bugs fixed): raw-completion ReAct
(:mod:`autorl.task_code.deepsearchqa.agent.protocol`), greedy, at most ``max_new_tokens`` (the
reference's 256) tokens a step, at most ``max_steps`` (6) steps, all questions advancing together
(one batched engine call per step, searches in parallel in the EnvPool). The final answer is the
``answer[…]`` action; an episode that never answers has an empty prediction, which is incorrect
(never sent to the judge). Answers are judged after all episodes by the configured judge
(:mod:`autorl.task_code.deepsearchqa.judge`): "correct"/"incorrect",
Set answers must contain every item. Score = % correct.
"""

from __future__ import annotations

from pathlib import Path

from agent_kit.rollout import PlayStats, play
from autorl.engine.base import GenerationEngine
from autorl.envs.host import local_episode_client
from autorl.errors import TaskError
from autorl.tasks import EvalContext, EvalResult, plain

from .agent.protocol import DeepSearchProtocol
from .env import load_questions
from .judge import judge_answers, open_judge
from .options import Eval

NUM_SAMPLES = 5
TASK_ID = "deepsearchqa"  # the env kind of the in-process client (this task's ``env`` entry point)


def evaluate(engine: GenerationEngine, ctx: EvalContext) -> EvalResult:
    """Answer every eval question and score the percentage judged correct.

    Args:
        engine: Greedy generation engine.
        ctx: ``private_dir`` holds ``questions.jsonl`` (and the fixture's ``corpus.jsonl``);
            ``options``, an :class:`~.options.Eval` (defaults and meanings in ``options.py``):
            ``max_steps``, ``max_new_tokens``, ``concurrency``, ``limit``, ``search``
            (``{backend: bm25, num_results}`` or ``{backend: web, endpoint, api_key_env,
            num_results, timeout_s}``), ``judge_driver`` and ``judge_server`` (exactly one set),
            ``judge_params``, ``judge_concurrency``; ``envs``: episodes bound to this task's data in
            the EnvPool (``None``: play in-process); ``cache_dir``: where judge answers are cached,
            under ``judge/`` (``None``: no cache).

    Returns:
        % correct, with per-answer-type counts and a few samples.

    Raises:
        TaskError: Unknown or missing options, or no questions.
        ConfigError: Bad judge options (before anything is generated).
    """
    opts = ctx.options_as(Eval)
    private_dir, cache_dir = ctx.private_dir, ctx.cache_dir
    rows = load_questions(Path(private_dir))
    ids = sorted(rows, key=lambda e: int(e.split("/")[1]) if e.split("/")[1].isdigit() else e)
    if opts.limit is not None:
        ids = ids[: opts.limit]
    if not ids:
        raise TaskError(f"no eval questions in {private_dir}/questions.jsonl")
    with open_judge(plain(opts), None if cache_dir is None else Path(cache_dir) / "judge") as judge:
        client = ctx.envs or local_episode_client(TASK_ID, TASK_ID, Path(private_dir), plain(opts))
        stats = PlayStats()
        played = play(
            engine,
            client,
            ids,
            DeepSearchProtocol(max_new_tokens=opts.max_new_tokens),
            max_steps=opts.max_steps,
            concurrency=opts.concurrency,
            stats=stats,
        )
        predictions = [
            str(e.current.info.get("answer", "")) if e.current.done else "" for e in played
        ]
        items = [
            (
                rows[e.episode_id].get("answer_type") or "Single Answer",
                str(rows[e.episode_id]["answer"]),
                p,
            )
            for e, p in zip(played, predictions, strict=True)
        ]
        verdicts = judge_answers(judge, items)
    by_type: dict[str, dict[str, int]] = {}
    for (answer_type, _, _), ok in zip(items, verdicts, strict=True):
        entry = by_type.setdefault(answer_type, {"correct": 0, "total": 0})
        entry["correct"] += ok
        entry["total"] += 1
    searches = sum(1 for e in played for a in e.actions if a.startswith("search["))
    samples = [
        {"episode_id": e.episode_id, "predicted": p, "correct": ok, "steps": e.steps}
        for e, p, ok in list(zip(played, predictions, verdicts, strict=True))[:NUM_SAMPLES]
    ]
    correct = sum(verdicts)
    details = {
        "correct": correct,
        "total": len(played),
        "accuracy": correct / len(played),
        "by_answer_type": by_type,
        "searches": searches,
        "answered": sum(1 for p in predictions if p.strip()),
        "engine_calls": stats.engine_calls,
        "samples": samples,
        "env_client": type(getattr(client, "client", client)).__name__,
    }
    return EvalResult(
        score=100.0 * correct / len(played), num_examples=len(played), details=details
    )
