"""The engine interface every evaluator talks to.

Defined in :mod:`agent_kit.protocol` (the agent side generates with the same interface) and
re-exported here for the grader side.
"""

from __future__ import annotations

from typing import Any

from agent_kit.protocol import ChatMessage as ChatMessage
from agent_kit.protocol import GenerationEngine as GenerationEngine


def chat_prompts(tokenizer: Any, conversations: list[list[ChatMessage]]) -> list[str]:
    """Each conversation as prompt text with the model's chat template and the assistant's turn opened:
    what every engine generates from, so that engines given the same conversations see the same text."""
    return [str(tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True)) for c in conversations]
