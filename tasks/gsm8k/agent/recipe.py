"""Scripted recipe for gsm8k: SFT on the training solutions, then GRPO with an exact-match
reward."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agent_kit.scripted.common import completion_texts, grpo, log, remaining_s, sft, submit
from agent_kit.scripted.settings import ScriptedSettings

from .protocol import extract_answer, format_question, normalize_number


def load_rows(data_dir: Path) -> list[dict[str, str]]:
    """Training rows: the prompt in the eval protocol, a solution ending "The answer is N", the
    gold N."""
    rows = []
    for line in (data_dir / "train.jsonl").read_text().splitlines():
        item = json.loads(line)
        working, _, gold = item["answer"].rpartition("####")
        rows.append(
            {
                "prompt": format_question(item["question"]),
                "solution": f"{working.strip()} The answer is {gold.strip()}",
                "gold": normalize_number(gold) or gold.strip(),
            }
        )
    return rows


def exact_match(completions: list[Any], gold: list[str], **_: Any) -> list[float]:
    """Rule reward: 1 when the completion's final number (as the evaluator extracts it) equals the
    gold answer.

    >>> exact_match(["3 + 4 = 7. The answer is 7", "so 1,200 in total", "no number"],
    ...             ["7", "1200", "1"])
    [1.0, 1.0, 0.0]
    """
    return [
        1.0 if extract_answer(text) == g else 0.0
        for text, g in zip(completion_texts(completions), gold, strict=True)
    ]


def run(settings: ScriptedSettings) -> int:
    """SFT → submit v1 → GRPO → submit v2."""
    rows = load_rows(Path(os.environ["DATA_PATH"]))
    output = Path(os.environ["OUTPUT_DIR"])
    log(f"gsm8k: {len(rows)} training rows; budget left {remaining_s():.0f} s")
    conversations = [
        [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["solution"]}]
        for r in rows
    ]
    sft(settings, conversations, os.environ["MODEL_PATH"], output / "v1")
    submit("output/v1")
    if remaining_s() < 30:
        log("less than 30 s left; skipping GRPO")
        return 0
    grpo_rows = [
        {"prompt": [{"role": "user", "content": r["prompt"]}], "gold": r["gold"]} for r in rows
    ]
    grpo(settings, grpo_rows, exact_match, output / "v1", output / "v2")
    submit("output/v2")
    return 0
