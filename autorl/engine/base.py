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


class ChatTemplateEngine:
    """``generate_chat`` of an engine that has ``tokenizer`` and ``generate_text``: the conversations
    rendered by :func:`chat_prompts` (the template adds its own special tokens), then completed."""

    tokenizer: Any

    def generate_chat(
        self, conversations: list[list[ChatMessage]], *, max_new_tokens: int, stop: list[str] | None = None
    ) -> list[str]:
        """Generate the assistant reply of each conversation with the model's chat template."""
        prompts = chat_prompts(self.tokenizer, conversations)
        return self.generate_text(prompts, max_new_tokens=max_new_tokens, stop=stop, add_special_tokens=False)

    def generate_text(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str] | None = None, add_special_tokens: bool = True
    ) -> list[str]:
        """Generate a greedy completion of each prompt (the engine's own)."""
        raise NotImplementedError
