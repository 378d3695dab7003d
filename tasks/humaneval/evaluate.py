"""Evaluator for humaneval: zero-shot chat prompt, greedy, pass@1 by running the tests in a sandbox.

The prompt is OpenCompass's ``humaneval_openai_sample_evals_gen_dcae0e`` user turn. Each
completion's code is extracted (first markdown code block, else the whole reply), joined to the
problem's prompt, and run with the problem's ``check(entry_point)`` in :mod:`agent_kit.sandbox`
(a fresh directory, no network, resource limits, killed at the timeout). A problem passes when
that program exits with status 0. The prompt and the program assembly live in
:mod:`.agent.protocol`, shared with the scripted recipe's reward.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent_kit.sandbox import Sandbox, SandboxError, SandboxLimits
from autorl.engine.base import ChatMessage, GenerationEngine
from autorl.errors import PrerequisiteError, TaskError
from autorl.tasks import EvalContext, EvalResult, require_options

from .agent.protocol import build_program, format_prompt

NUM_SAMPLES = 5


def build_conversation(prompt: str) -> list[ChatMessage]:
    """The chat sent for one problem: a single user turn."""
    return [{"role": "user", "content": format_prompt(prompt)}]


def sandbox_from_options(options: dict[str, Any], hidden: tuple[Path, ...] = ()) -> Sandbox:
    """The sandbox the eval options ask for (``timeout_s``, ``memory_mb``, ``max_processes``, ``sandbox_mode``)."""
    timeout = float(options["timeout_s"])
    limits = SandboxLimits(timeout_s=timeout, cpu_s=max(1, int(timeout)), memory_bytes=int(options["memory_mb"]) << 20,
                           max_processes=int(options["max_processes"]))
    return Sandbox(limits, mode=options["sandbox_mode"], hidden=hidden)


def evaluate(engine: GenerationEngine, ctx: EvalContext) -> EvalResult:
    """Score ``engine`` on ``ctx.private_dir/eval.jsonl`` with one batched generation call.

    Args:
        engine: Greedy generation engine.
        ctx: ``private_dir`` holds ``eval.jsonl`` (``question``, ``answer``, ``task_id``,
            ``entry_point``, ``test``); ``options`` (every one required; defaults and meanings in
            ``conf/task/humaneval.yaml`` ``eval``): ``max_new_tokens``, ``limit`` (first N
            problems), ``timeout_s`` (per problem), ``workers`` (problems run at once),
            ``memory_mb``, ``max_processes``, ``sandbox_mode`` (``None`` = best available).

    Returns:
        pass@1 x100, with ``passed``, ``timed_out`` and a few of the model's completions in details.

    Raises:
        TaskError: Unknown or missing options, no eval items, or the engine returned the wrong
            number of generations.
        PrerequisiteError: The sandbox cannot run even a trivial program here.
    """
    options, private_dir = require_options(__package__, "eval", ctx.options), Path(ctx.private_dir)
    max_new_tokens = int(options["max_new_tokens"])
    limit = options["limit"]
    with (private_dir / "eval.jsonl").open(encoding="utf-8") as fh:
        items = [json.loads(line) for line in fh if line.strip()]
    if limit is not None:
        items = items[: int(limit)]
    if not items:
        raise TaskError(f"no eval items in {private_dir / 'eval.jsonl'}")
    sandbox = sandbox_from_options(options, hidden=(private_dir.resolve(),))  # no peeking at the tests
    try:
        sandbox.check()
    except SandboxError as error:  # the agent-side kit's own error; autorl reports prerequisites as this
        raise PrerequisiteError(str(error)) from error

    outputs = engine.generate_chat([build_conversation(i["question"]) for i in items], max_new_tokens=max_new_tokens)
    if len(outputs) != len(items):
        raise TaskError(f"engine returned {len(outputs)} generations for {len(items)} prompts")
    programs = [
        build_program(i["question"], out or "", i["test"], i["entry_point"]) for i, out in zip(items, outputs, strict=True)
    ]
    results = sandbox.run_many(programs, workers=int(options["workers"]))
    passed = [r.ok for r in results]
    # Details reach the agent through the grading API: nothing from the private split (no prompts,
    # no test output, which would show the hidden asserts), only the model's own completions.
    samples = [{"completion": out, "passed": ok, "timed_out": r.timed_out}
               for out, ok, r in list(zip(outputs, passed, results, strict=True))[:NUM_SAMPLES]]
    details = {"passed": sum(passed), "timed_out": sum(r.timed_out for r in results), "sandbox_mode": sandbox.mode,
               "max_new_tokens": max_new_tokens, "samples": samples}
    return EvalResult(score=100.0 * sum(passed) / len(items), num_examples=len(items), details=details)
