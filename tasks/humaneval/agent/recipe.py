"""Scripted recipe for humaneval: SFT on the canonical solutions, then GRPO with a tests-pass
reward.

The prompt and the solution assembly are the evaluator's (:mod:`.protocol`, the protocol
``description.md`` documents); the reward judges each completion by the training problem's own
tests with the evaluator's judge, :mod:`agent_kit.function_judge` (the tests run in a sandboxed
process of their own and call the function in another), so a completion earns nothing for exiting
early or for answering with an object that only pretends to be equal.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agent_kit.function_judge import FunctionJudge, Problem
from agent_kit.sandbox import Sandbox, SandboxLimits
from agent_kit.scripted.common import (
    completion_texts,
    grpo,
    log,
    longest_conversation_tokens,
    remaining_s,
    sft,
    submit,
)
from agent_kit.scripted.settings import ScriptedSettings

from .protocol import build_solution, format_prompt

MAX_SEQUENCE = 1024  # the longest SFT sequence this recipe asks for (the tiny model's context)


def load_rows(data_dir: Path) -> list[dict[str, str]]:
    """Training problems: the user turn, the canonical body and what the reward needs."""
    rows = []
    for line in (data_dir / "train.jsonl").read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        rows.append(
            {
                "prompt": format_prompt(item["question"]),
                "solution": item["answer"],
                "question": item["question"],
                "test": item["test"],
                "entry_point": item["entry_point"],
            }
        )
    return rows


class PassesTests:
    """GRPO reward: 1 when the completion passes the training problem's tests (judged as the
    evaluator does)."""

    __name__ = "tests_pass"

    def __init__(self) -> None:
        """One judge for every reward call (short timeout: fixture bodies are one line)."""
        self.judge = FunctionJudge(Sandbox(SandboxLimits(timeout_s=5, cpu_s=5)))
        self.judge.check()

    def __call__(
        self,
        completions: list[Any],
        question: list[str],
        test: list[str],
        entry_point: list[str],
        **_: Any,
    ) -> list[float]:
        """Judge every completion, two at a time."""
        texts = completion_texts(completions)
        cases = [
            (Problem(q, t, e), build_solution(q, c, e))
            for c, q, t, e in zip(texts, question, test, entry_point, strict=True)
        ]
        return [1.0 if v.passed else 0.0 for v in self.judge.judge_many(cases, workers=2)]


def run(settings: ScriptedSettings) -> int:
    """SFT → submit v1 → GRPO → submit v2."""
    rows = load_rows(Path(os.environ["DATA_PATH"]))
    output = Path(os.environ["OUTPUT_DIR"])
    base = os.environ["MODEL_PATH"]
    log(f"humaneval: {len(rows)} training rows; budget left {remaining_s():.0f} s")
    conversations = [
        [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["solution"]}]
        for r in rows
    ]
    # The default max_length (128) would cut the solutions off these long prompts.
    needed = min(MAX_SEQUENCE, longest_conversation_tokens(base, conversations))
    sft(
        settings.with_sft(max_length=max(settings.sft.max_length, needed)),
        conversations,
        base,
        output / "v1",
    )
    submit("output/v1")
    if remaining_s() < 30:
        log("less than 30 s left; skipping GRPO")
        return 0
    grpo_rows = [
        {
            "prompt": [{"role": "user", "content": r["prompt"]}],
            "question": r["question"],
            "test": r["test"],
            "entry_point": r["entry_point"],
        }
        for r in rows
    ]
    grpo(settings, grpo_rows, PassesTests(), output / "v1", output / "v2")
    submit("output/v2")
    return 0
