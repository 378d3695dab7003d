"""The engine interface every evaluator talks to."""

from __future__ import annotations

from typing import Protocol

ChatMessage = dict[str, str]


class GenerationEngine(Protocol):
    """Greedy text generation over a batch of inputs; one call generates for all of them.

    Implementations batch internally (left padding) and must return exactly one string per
    input, in order, with the prompt removed and generation cut at the first stop string.
    """

    def generate_chat(
        self, conversations: list[list[ChatMessage]], *, max_new_tokens: int, stop: list[str] | None = None
    ) -> list[str]:
        """Generate the assistant reply for each conversation, using the model's chat template."""
        ...

    def generate_text(self, prompts: list[str], *, max_new_tokens: int, stop: list[str] | None = None) -> list[str]:
        """Generate a raw completion of each prompt (no chat template)."""
        ...
