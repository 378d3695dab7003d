"""The types both sides of a cell speak: chat messages, env step results, the generation interface.

The grader side (``autorl.engine``, ``autorl.envs``, the tasks' evaluators) imports them from here,
so the agent side and the grader side share one definition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

ChatMessage = dict[str, str]


class GenerationEngine(Protocol):
    """Greedy text generation over a batch of inputs; one call generates for all of them.

    Implementations batch internally (left padding) and must return exactly one string per
    input, in order, with the prompt removed and generation cut at the first stop string.
    """

    def generate_chat(
        self,
        conversations: list[list[ChatMessage]],
        *,
        max_new_tokens: int,
        stop: list[str] | None = None,
    ) -> list[str]:
        """Generate the assistant reply for each conversation, using the model's chat template."""
        ...

    def generate_text(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str] | None = None
    ) -> list[str]:
        """Generate a raw completion of each prompt (no chat template)."""
        ...


def cut_at_stop(text: str, stop: list[str] | None) -> str:
    """Cut ``text`` at the earliest stop string.

    >>> cut_at_stop("4\\nQuestion: next", ["Question:"])
    '4\\n'
    >>> cut_at_stop("no stop here", None)
    'no stop here'
    """
    if not stop:
        return text
    cut = min((index for index in (text.find(s) for s in stop) if index >= 0), default=len(text))
    return text[:cut]


@dataclass
class StepResult:
    """What the environment answers after a reset or a step.

    Attributes:
        observation: The text the agent sees.
        reward: The task's reward so far (e.g. 1 when a game is won, a purchase's match score).
        done: The episode is over.
        admissible_actions: Actions the environment accepts now (may be empty when any text goes).
        info: Task-specific extras (``won``, ``task_type``, ``expert_action`` ...).
    """

    observation: str
    reward: float
    done: bool
    admissible_actions: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (the grading API's env endpoints send this)."""
        return {
            "observation": self.observation,
            "reward": self.reward,
            "done": self.done,
            "admissible_actions": list(self.admissible_actions),
            "info": dict(self.info),
        }
