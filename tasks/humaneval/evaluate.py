"""Evaluator for humaneval: zero-shot chat prompt, greedy, pass@1 by running the tests in a sandbox.

The prompt is OpenCompass's ``humaneval_openai_sample_evals_gen_dcae0e`` user turn. Each
completion's code is extracted (first markdown code block, else the whole reply), joined to the
problem's prompt, and run with the problem's ``check(entry_point)`` in :mod:`autorl.sandbox`
(a fresh directory, no network, resource limits, killed at the timeout). A problem passes when
that program exits with status 0.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from autorl.engine.base import ChatMessage, GenerationEngine
from autorl.errors import TaskError
from autorl.sandbox import Sandbox, SandboxLimits
from autorl.tasks import EvalResult

INSTRUCTION = (
    "Read the following function signature and docstring, and fully implement the function described. "
    "Your response should only contain the code for this function.\n"
)
DEFAULT_MAX_NEW_TOKENS = 512
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_WORKERS = 2
NUM_SAMPLES = 5

_FENCE = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.DOTALL)


def format_prompt(prompt: str) -> str:
    """The user turn for one problem.

    >>> format_prompt("def f():\\n").endswith("only contain the code for this function.\\ndef f():\\n")
    True
    """
    return INSTRUCTION + prompt


def build_conversation(prompt: str) -> list[ChatMessage]:
    """The chat sent for one problem: a single user turn."""
    return [{"role": "user", "content": format_prompt(prompt)}]


def extract_code(completion: str) -> str:
    """The code in a reply: the first fenced block (an unclosed fence runs to the end), else the reply.

    >>> extract_code("Here:\\n```python\\ndef f():\\n    return 1\\n```\\nDone.")
    'def f():\\n    return 1\\n'
    >>> extract_code("    return x + 1\\n")
    '    return x + 1\\n'
    >>> extract_code("```python\\ndef f():\\n    return 2")
    'def f():\\n    return 2'
    """
    match = _FENCE.search(completion)
    return match.group(1) if match else completion


def build_program(prompt: str, completion: str, test: str, entry_point: str) -> str:
    """The program that passes iff the completion implements the function.

    If the code defines ``entry_point`` it is appended after the prompt (the prompt alone is valid
    Python and provides the imports and helpers the code may rely on; the code's definition
    replaces the prompt's). Otherwise the code is the body that continues the prompt; a body
    written without indentation is indented by four spaces.

    >>> print(build_program("def f(x):\\n    'Doc.'\\n", "return x", "def check(c):\\n    assert c(1) == 1", "f"))
    def f(x):
        'Doc.'
        return x
    def check(c):
        assert c(1) == 1
    <BLANKLINE>
    check(f)
    <BLANKLINE>
    """
    code = extract_code(completion)
    if re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE):
        solution = f"{prompt}\n{code}"
    else:
        lines = code.split("\n")
        first = next((line for line in lines if line.strip()), "")
        if first and not first[0].isspace():
            code = "\n".join(f"    {line}" if line.strip() else line for line in lines)
        solution = prompt + code
    return f"{solution.rstrip()}\n{test.rstrip()}\n\ncheck({entry_point})\n"


def sandbox_from_options(options: dict[str, Any], hidden: tuple[Path, ...] = ()) -> Sandbox:
    """The sandbox the options ask for (``timeout_s``, ``memory_mb``, ``max_processes``, ``sandbox_mode``)."""
    timeout = float(options.get("timeout_s", DEFAULT_TIMEOUT_S))
    limits = SandboxLimits(timeout_s=timeout, cpu_s=max(1, int(timeout)),
                           memory_bytes=int(options.get("memory_mb", 1024)) << 20,
                           max_processes=int(options.get("max_processes", 32)))
    return Sandbox(limits, mode=options.get("sandbox_mode"), hidden=hidden)


def evaluate(engine: GenerationEngine, private_dir: Path, *, options: dict[str, Any]) -> EvalResult:
    """Score ``engine`` on ``private_dir/eval.jsonl`` with one batched generation call.

    Args:
        engine: Greedy generation engine.
        private_dir: Folder holding ``eval.jsonl`` (``question``, ``answer``, ``task_id``,
            ``entry_point``, ``test``).
        options: ``max_new_tokens`` (512), ``limit`` (first N problems), ``timeout_s`` (10, per
            problem), ``workers`` (2 problems run at once), ``memory_mb`` (1024),
            ``max_processes`` (32), ``sandbox_mode`` (``None`` = best available).

    Returns:
        pass@1 x100, with ``passed``, ``timed_out`` and a few of the model's completions in details.

    Raises:
        TaskError: No eval items, or the engine returned the wrong number of generations.
        SandboxError: The sandbox cannot run even a trivial program here.
    """
    max_new_tokens = int(options.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))
    limit = options.get("limit")
    with (Path(private_dir) / "eval.jsonl").open(encoding="utf-8") as fh:
        items = [json.loads(line) for line in fh if line.strip()]
    if limit is not None:
        items = items[: int(limit)]
    if not items:
        raise TaskError(f"no eval items in {private_dir / 'eval.jsonl'}")
    sandbox = sandbox_from_options(options, hidden=(Path(private_dir).resolve(),))  # no peeking at the tests
    sandbox.check()

    outputs = engine.generate_chat([build_conversation(i["question"]) for i in items], max_new_tokens=max_new_tokens)
    if len(outputs) != len(items):
        raise TaskError(f"engine returned {len(outputs)} generations for {len(items)} prompts")
    programs = [build_program(i["question"], out or "", i["test"], i["entry_point"]) for i, out in zip(items, outputs)]
    results = sandbox.run_many(programs, workers=int(options.get("workers", DEFAULT_WORKERS)))
    passed = [r.ok for r in results]
    # Details reach the agent through the grading API: nothing from the private split (no prompts,
    # no test output, which would show the hidden asserts), only the model's own completions.
    samples = [{"completion": out, "passed": ok, "timed_out": r.timed_out}
               for out, ok, r in list(zip(outputs, passed, results))[:NUM_SAMPLES]]
    details = {"passed": sum(passed), "timed_out": sum(r.timed_out for r in results), "sandbox_mode": sandbox.mode,
               "max_new_tokens": max_new_tokens, "samples": samples}
    return EvalResult(score=100.0 * sum(passed) / len(items), num_examples=len(items), details=details)
