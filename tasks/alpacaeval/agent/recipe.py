"""Scripted recipe for alpacaeval: SFT on the training answers (the task has no rule reward for
RL)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from agent_kit.scripted.common import log, longest_conversation_tokens, remaining_s, sft, submit
from agent_kit.scripted.settings import ScriptedSettings

from .protocol import chat_prompt

MAX_SEQUENCE = 1024  # the longest SFT sequence this recipe asks for


def load_conversations(data_dir: Path) -> list[list[dict[str, str]]]:
    """One chat per training row: the ``question`` as the user turn (as evaluated), the ``answer``
    as the reply."""
    conversations: list[list[dict[str, str]]] = []
    for line in (data_dir / "train.jsonl").read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        conversations.append(
            [*chat_prompt(item["question"]), {"role": "assistant", "content": item["answer"]}]
        )
    return conversations


def run(settings: ScriptedSettings) -> int:
    """SFT → submit v1."""
    conversations = load_conversations(Path(os.environ["DATA_PATH"]))
    output = Path(os.environ["OUTPUT_DIR"])
    base = os.environ["MODEL_PATH"]
    log(f"alpacaeval: {len(conversations)} training rows; budget left {remaining_s():.0f} s")
    needed = min(MAX_SEQUENCE, longest_conversation_tokens(base, conversations))
    sft(
        settings.with_sft(max_length=max(settings.sft.max_length, needed)),
        conversations,
        base,
        output / "v1",
    )
    submit("output/v1")
    log("alpacaeval has no rule reward; stopping after SFT")
    return 0
