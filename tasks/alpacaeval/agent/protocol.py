"""The alpacaeval prompt protocol, shared by the evaluator and the scripted recipe.

Agent side: imports nothing from the task's grader side. An instruction is sent as one user turn
(the model's own chat template formats it); the task has no rule reward (a judge scores it).
"""

from __future__ import annotations

from agent_kit.protocol import ChatMessage


def chat_prompt(question: str) -> list[ChatMessage]:
    """The chat sent for one instruction: a single user turn holding the ``question``.

    >>> chat_prompt("Name three primes.")
    [{'role': 'user', 'content': 'Name three primes.'}]
    """
    return [{"role": "user", "content": question}]
