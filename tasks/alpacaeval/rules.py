"""The alpacaeval fixture's rule-based judging model.

The fixture judge is **not a language model**. It is a deterministic judging model that only
understands the fixture's instruction families (:mod:`.fixture`): it recognises an instruction by
its template, computes the items a perfect answer lists (multiples, a count, letters of a word,
...), scores each output by the F1 overlap between those items and the items of the same kind
found in the output (order ignored), and prefers the higher score; on equal scores it prefers the
shorter output, then the first one shown. Instructions it does not recognise score 0 for both
outputs (so the shorter output wins). It is served behind a real OpenAI-compatible endpoint
(:mod:`autorl.judge.server`) so the fixture exercises the real judge client, prompt, cache,
concurrency bound and LC win rate.
"""

from __future__ import annotations

import re
from collections import Counter

from autorl.engine.base import ChatMessage

from .fixture import Kind, recognise
from .pairwise import read_prompt

RULES_VERSION = 1  # bump when scoring changes: part of the judge's cache identity

_TOKENS: dict[Kind, re.Pattern[str]] = {
    "number": re.compile(r"-?\d+"),
    "letter": re.compile(r"(?<![A-Za-z])[A-Za-z](?![A-Za-z])"),
    "word": re.compile(r"[A-Za-z]+"),
}


def quality(instruction: str, output: str) -> float:
    """F1 overlap (0-1) between the required items and the output's items of the same kind.

    >>> quality("Count from 3 to 6.", "3, 4, 5, 6")
    1.0
    >>> round(quality("Count from 3 to 6.", "3, 4"), 3)
    0.667
    >>> quality("Count from 3 to 6.", "no idea, sorry")
    0.0
    """
    found = recognise(instruction)
    if found is None:
        return 0.0
    family, items = found
    tokens = _TOKENS[family.kind].findall(output)
    if family.kind != "number":
        tokens = [t.lower() for t in tokens]
    overlap = sum((Counter(items) & Counter(tokens)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(tokens), overlap / len(items)
    return 2 * precision * recall / (precision + recall)


def judge_choice(instruction: str, first: str, second: str) -> str:
    """``"m"`` if the first output is better, else ``"M"`` (see the module docstring for the
    rule)."""
    q1, q2 = quality(instruction, first), quality(instruction, second)
    if q1 != q2:
        return "m" if q1 > q2 else "M"
    return "M" if len(second) < len(first) else "m"


class RuleJudge:
    """A judging model for :mod:`autorl.judge.server`: answers AlpacaEval pairwise prompts by
    rule."""

    name = f"alpacaeval-fixture-rules-v{RULES_VERSION}"

    def __call__(self, messages: list[ChatMessage]) -> str:
        """Answer ``m`` or ``M`` for a pairwise prompt; an unreadable prompt gets an explanation
        instead."""
        user = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
        parsed = read_prompt(user)
        if parsed is None:
            return "I can only judge AlpacaEval pairwise comparison prompts."
        return judge_choice(*parsed)
