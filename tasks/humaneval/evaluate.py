"""Evaluator for humaneval: zero-shot chat prompt, greedy, pass@1 of the hidden tests, judged out
of the code's reach.

The prompt is OpenCompass's ``humaneval_openai_sample_evals_gen_dcae0e`` user turn. Each
completion's code is extracted (first markdown code block, else the whole reply) and joined to the
problem's prompt (:mod:`.agent.protocol`, shared with the scripted recipe's reward). That solution
is judged by :mod:`agent_kit.function_judge`: it runs in one sandboxed process, the problem's
original prompt and tests in another, and ``check`` calls the function across the process boundary
with plain data both ways. A problem passes only when ``check`` ran to its end; the solution's
exit status, its output and anything it redefines have no say.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agent_kit.function_judge import FunctionJudge, Problem
from agent_kit.sandbox import (
    Mode,
    Sandbox,
    SandboxError,
    SandboxLimits,
    namespaces_problem,
    namespaces_required,
)
from autorl.engine.base import ChatMessage, GenerationEngine
from autorl.errors import PrerequisiteError, TaskError
from autorl.tasks import EvalContext, EvalResult

from .agent.protocol import build_solution, format_prompt
from .options import Eval

NUM_SAMPLES = 5
# The eval option of the judge's isolation; only an explicit rlimits runs it without namespaces.
MODE_OPTION = "sandbox_mode"


def build_conversation(prompt: str) -> list[ChatMessage]:
    """The chat sent for one problem: a single user turn."""
    return [{"role": "user", "content": format_prompt(prompt)}]


def judge_mode(requested: str | None, source: str = "<source>") -> Mode:
    """The judge's isolation mode for the ``sandbox_mode`` option; never a silent downgrade.

    ``null`` and ``namespaces`` need namespaces: without them the hidden folders (the private
    split, the task's fixture generator) would be readable by the code the judge runs, so the
    judge refuses. Only ``rlimits``, set explicitly, runs it without them.

    Args:
        requested: The option's value.
        source: The task's data source, to name the setting in the message.

    Raises:
        PrerequisiteError: namespaces were asked for (or left to the default) and do not work here.
        TaskError: an unknown mode.
    """
    if requested == "rlimits":
        return "rlimits"
    if requested not in (None, "namespaces"):
        raise TaskError(
            f"humaneval eval option {MODE_OPTION} must be null, namespaces or rlimits, "
            f"not {requested!r}"
        )
    problem = namespaces_problem()
    if problem is not None:
        setting = f"task.eval.{source}.{MODE_OPTION}"
        raise PrerequisiteError(namespaces_required("the humaneval judge", setting, problem))
    return "namespaces"


def sandbox_from_options(
    options: Eval, hidden: tuple[Path, ...] = (), source: str = "<source>"
) -> Sandbox:
    """The sandbox the eval options ask for (``timeout_s``, ``memory_mb``, ``max_processes``,
    ``sandbox_mode``).

    ``timeout_s`` bounds one whole problem (both processes); the memory and process limits apply
    to each process; the mode is :func:`judge_mode`'s (``source`` names the setting in its message).
    """
    timeout = float(options.timeout_s)
    limits = SandboxLimits(
        timeout_s=timeout,
        cpu_s=max(1, options.timeout_s),
        memory_bytes=options.memory_mb << 20,
        max_processes=options.max_processes,
    )
    return Sandbox(limits, mode=judge_mode(options.sandbox_mode, source), hidden=hidden)


def hidden_from_programs(private_dir: Path) -> tuple[Path, ...]:
    """Folders of this machine that hold the eval problems' answers or tests, hidden from the
    programs.

    The sandbox shows the rest of the filesystem read-only, so besides ``private_dir`` this covers
    every cached build of this task's data (all versions, sources and seeds: the layout is
    ``<cache>/humaneval/v<version>/<build>/private``), this task's folder (``fixture.py`` generates
    every fixture problem with its answer) and the Hugging Face caches (the ``hub`` source's
    dataset).
    """
    private = private_dir.resolve()
    hidden = [private, Path(__file__).resolve().parent]
    if len(private.parents) > 3 and private.parents[2].name == "humaneval":
        hidden.append(private.parents[2])
    hf_home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    hidden += [
        hf_home,
        *[Path(os.environ[k]) for k in ("HF_DATASETS_CACHE", "HF_HUB_CACHE") if os.environ.get(k)],
    ]
    return tuple(dict.fromkeys(path.resolve() for path in hidden))


def evaluate(engine: GenerationEngine, ctx: EvalContext) -> EvalResult:
    """Score ``engine`` on ``ctx.private_dir/eval.jsonl`` with one batched generation call.

    Args:
        engine: Greedy generation engine.
        ctx: ``private_dir`` holds ``eval.jsonl`` (``question``, ``answer``, ``task_id``,
            ``entry_point``, ``test``); ``options``, an :class:`~.options.Eval` (defaults and
            meanings in ``options.py``): ``max_new_tokens``, ``limit`` (first N
            problems), ``timeout_s`` (per problem), ``workers`` (problems judged at once),
            ``memory_mb``, ``max_processes``, ``sandbox_mode`` (:func:`judge_mode`).

    Returns:
        pass@1 x100, with ``passed``, ``timed_out`` and a few of the model's completions in details.

    Raises:
        TaskError: Unknown or missing options, no eval items, or the engine returned the wrong
            number of generations.
        PrerequisiteError: The sandbox cannot judge even a trivial correct solution here, or
            namespaces do not work here and ``sandbox_mode`` is not ``rlimits``.
    """
    options, private_dir = ctx.options_as(Eval), Path(ctx.private_dir)
    max_new_tokens, limit = options.max_new_tokens, options.limit
    with (private_dir / "eval.jsonl").open(encoding="utf-8") as fh:
        items = [json.loads(line) for line in fh if line.strip()]
    if limit is not None:
        items = items[:limit]
    if not items:
        raise TaskError(f"no eval items in {private_dir / 'eval.jsonl'}")
    sandbox = sandbox_from_options(
        options, hidden=hidden_from_programs(private_dir)
    )  # no peeking at the tests
    with FunctionJudge(sandbox) as judge:
        try:
            judge.check()
        except (
            SandboxError
        ) as error:  # the agent-side kit's own error; autorl reports prerequisites as this
            raise PrerequisiteError(str(error)) from error
        outputs = engine.generate_chat(
            [build_conversation(i["question"]) for i in items], max_new_tokens=max_new_tokens
        )
        if len(outputs) != len(items):
            raise TaskError(f"engine returned {len(outputs)} generations for {len(items)} prompts")
        cases = [
            (
                Problem(i["question"], i["test"], i["entry_point"]),
                build_solution(i["question"], out or "", i["entry_point"]),
            )
            for i, out in zip(items, outputs, strict=True)
        ]
        verdicts = judge.judge_many(cases, workers=options.workers)
    passed = [v.passed for v in verdicts]
    # Details reach the agent through the grading API: nothing from the private split (no prompts,
    # no test output or failure reasons, which would show the hidden asserts), only the model's own
    # completions.
    samples = [
        {"completion": out, "passed": v.passed, "timed_out": v.timed_out}
        for out, v in list(zip(outputs, verdicts, strict=True))[:NUM_SAMPLES]
    ]
    details = {
        "passed": sum(passed),
        "timed_out": sum(v.timed_out for v in verdicts),
        "sandbox_mode": sandbox.mode,
        "max_new_tokens": max_new_tokens,
        "samples": samples,
    }
    return EvalResult(
        score=100.0 * sum(passed) / len(items), num_examples=len(items), details=details
    )
