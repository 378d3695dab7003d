"""Scripted recipe for humaneval: SFT on the canonical solutions, then GRPO with a tests-pass reward.

The prompt and the program assembly are the evaluator's (:mod:`.protocol`, the protocol
``description.md`` documents); the reward runs each completion against the training problem's own
tests in :mod:`agent_kit.sandbox` (no network, resource limits, timeout).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from agent_kit.sandbox import Sandbox, SandboxLimits
from agent_kit.scripted.common import (
    completion_texts,
    grpo,
    log,
    longest_conversation_tokens,
    remaining_s,
    sft,
    submit,
    with_overrides,
)

from .protocol import build_program, format_prompt

MAX_SEQUENCE = 1024  # the longest SFT sequence this recipe asks for (the tiny model's context)


def load_rows(data_dir: Path) -> list[dict[str, str]]:
    """Training problems: the user turn, the canonical body and what the reward needs."""
    rows = []
    for line in (data_dir / "train.jsonl").read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        rows.append({"prompt": format_prompt(item["question"]), "solution": item["answer"], "question": item["question"],
                     "test": item["test"], "entry_point": item["entry_point"]})
    return rows


class PassesTests:
    """GRPO reward: 1 when the completion passes the training problem's tests in the sandbox."""

    __name__ = "tests_pass"

    def __init__(self) -> None:
        """One sandbox for every reward call (short timeout: fixture bodies are one line)."""
        self.sandbox = Sandbox(SandboxLimits(timeout_s=5, cpu_s=5))
        self.sandbox.check()

    def __call__(self, completions: list[Any], question: list[str], test: list[str], entry_point: list[str],
                 **_: Any) -> list[float]:
        """Run every completion's program, two at a time."""
        texts = completion_texts(completions)
        programs = [build_program(q, c, t, e) for c, q, t, e in zip(texts, question, test, entry_point, strict=True)]
        return [1.0 if r.ok else 0.0 for r in self.sandbox.run_many(programs, workers=2)]


def run(args: argparse.Namespace) -> int:
    """SFT → submit v1 → GRPO → submit v2."""
    rows = load_rows(Path(os.environ["DATA_PATH"]))
    output = Path(os.environ["OUTPUT_DIR"])
    base = os.environ["MODEL_PATH"]
    log(f"humaneval: {len(rows)} training rows; budget left {remaining_s():.0f} s")
    conversations = [[{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["solution"]}]
                     for r in rows]
    # The default max_length (128) would cut the solutions off these long prompts.
    needed = min(MAX_SEQUENCE, longest_conversation_tokens(base, conversations))
    sft(with_overrides(args, sft_max_length=max(args.sft_max_length, needed)), conversations, base, output / "v1")
    submit("output/v1")
    if remaining_s() < 30:
        log("less than 30 s left; skipping GRPO")
        return 0
    grpo_rows = [{"prompt": [{"role": "user", "content": r["prompt"]}], "question": r["question"], "test": r["test"],
                  "entry_point": r["entry_point"]} for r in rows]
    grpo(args, grpo_rows, PassesTests(), output / "v1", output / "v2")
    submit("output/v2")
    return 0
