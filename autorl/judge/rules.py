"""The alpacaeval fixture's instruction families and its rule-based judging model.

The fixture judge is **not a language model**. It is a deterministic judging model that only
understands the fixture's instruction families: it recognises an instruction by its template,
computes the items a perfect answer lists (multiples, a count, letters of a word, ...), scores
each output by the F1 overlap between those items and the items of the same kind found in the
output (order ignored), and prefers the higher score; on equal scores it prefers the shorter
output, then the first one shown. Instructions it does not recognise score 0 for both outputs
(so the shorter output wins). It is served behind a real OpenAI-compatible endpoint
(:mod:`autorl.judge.server`) so the fixture exercises the real judge client, prompt, cache,
concurrency bound and LC win rate.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from autorl.engine.base import ChatMessage
from autorl.judge.pairwise import read_prompt

Kind = Literal["number", "letter", "word"]
RULES_VERSION = 1  # bump when scoring changes: part of the judge's cache identity

_WORDS = ("apple", "river", "garden", "window", "rabbit", "candle", "pencil", "orange", "silver", "planet",
          "basket", "bridge", "castle", "dragon", "forest", "guitar", "island", "jacket", "kitten", "lemon",
          "market", "needle", "pepper", "rocket", "saddle", "ticket", "violin", "wallet", "yellow", "zipper",
          "anchor", "button", "carpet", "donkey", "engine", "feather", "goblet", "hammer", "insect", "jungle",
          "kettle", "ladder", "mirror", "napkin", "oyster", "parrot", "puzzle", "ribbon", "spider", "turtle",
          "summer", "winter", "tomato", "coffee", "butter", "cookie", "pillow", "marble", "shadow", "sunset")


@dataclass(frozen=True)
class Family:
    """One instruction template with its solver.

    Attributes:
        name: Short id.
        template: ``str.format`` template of the instruction (``\\n\\n`` separates an alpaca ``input``).
        pattern: Regex that recognises a rendered instruction and captures its parameters.
        kind: What the answer's items are (numbers, single letters or words).
        solve: Items of a perfect answer, from the captured parameters.
        params: All parameter combinations (the family's pool).
    """

    name: str
    template: str
    pattern: re.Pattern[str]
    kind: Kind
    solve: Callable[[dict[str, str]], list[str]]
    params: Callable[[], list[dict[str, object]]]


def _ints(a: int, b: int, step: int = 1) -> list[str]:
    return [str(v) for v in range(a, b + step if step > 0 else b - 1, step)]


FAMILIES: tuple[Family, ...] = (
    Family("multiples", "List the first {n} multiples of {k}.",
           re.compile(r"^List the first (?P<n>\d+) multiples of (?P<k>\d+)\.$"), "number",
           lambda p: [str(int(p["k"]) * i) for i in range(1, int(p["n"]) + 1)],
           lambda: [{"n": n, "k": k} for n in range(3, 9) for k in range(2, 20)]),
    Family("count", "Count from {a} to {b}.",
           re.compile(r"^Count from (?P<a>\d+) to (?P<b>\d+)\.$"), "number",
           lambda p: _ints(int(p["a"]), int(p["b"])),
           lambda: [{"a": a, "b": a + d} for a in range(1, 61) for d in range(3, 8)]),
    Family("evens", "List the even numbers in the range below.\n\nfrom {a} to {b}",
           re.compile(r"^List the even numbers in the range below\.\n\nfrom (?P<a>\d+) to (?P<b>\d+)$"), "number",
           lambda p: [str(v) for v in range(int(p["a"]), int(p["b"]) + 1) if v % 2 == 0],
           lambda: [{"a": a, "b": a + d} for a in range(0, 61) for d in range(4, 13)]),
    Family("squares", "List the squares of the whole numbers from {a} to {b}.",
           re.compile(r"^List the squares of the whole numbers from (?P<a>\d+) to (?P<b>\d+)\.$"), "number",
           lambda p: [str(v * v) for v in range(int(p["a"]), int(p["b"]) + 1)],
           lambda: [{"a": a, "b": a + d} for a in range(1, 13) for d in range(2, 6)]),
    Family("spell", 'Spell the word "{w}" letter by letter.',
           re.compile(r'^Spell the word "(?P<w>[a-z]+)" letter by letter\.$'), "letter",
           lambda p: list(p["w"]),
           lambda: [{"w": w} for w in _WORDS]),
    Family("repeat", 'Write the word "{w}" {n} times.',
           re.compile(r'^Write the word "(?P<w>[a-z]+)" (?P<n>\d+) times\.$'), "word",
           lambda p: [p["w"]] * int(p["n"]),
           lambda: [{"w": w, "n": n} for w in _WORDS for n in range(2, 7)]),
    Family("alphabet", 'List the {n} letters of the alphabet that come after "{c}".',
           re.compile(r'^List the (?P<n>\d+) letters of the alphabet that come after "(?P<c>[a-z])"\.$'), "letter",
           lambda p: [chr(ord(p["c"]) + i) for i in range(1, int(p["n"]) + 1)],
           lambda: [{"n": n, "c": chr(c)} for c in range(ord("a"), ord("q")) for n in range(3, 7)]),
)

_TOKENS: dict[Kind, re.Pattern[str]] = {
    "number": re.compile(r"-?\d+"),
    "letter": re.compile(r"(?<![A-Za-z])[A-Za-z](?![A-Za-z])"),
    "word": re.compile(r"[A-Za-z]+"),
}


def recognise(instruction: str) -> tuple[Family, list[str]] | None:
    """The family of ``instruction`` and its required items, or ``None`` if it is not a fixture one.

    >>> family, items = recognise("List the first 3 multiples of 7.")
    >>> family.name, items
    ('multiples', ['7', '14', '21'])
    """
    text = instruction.strip()
    for family in FAMILIES:
        match = family.pattern.match(text)
        if match:
            return family, family.solve(match.groupdict())
    return None


def ideal_answer(instruction: str) -> str:
    """The answer that lists exactly the required items (what the fixture's train answers are).

    Raises:
        ValueError: Not a fixture instruction.
    """
    found = recognise(instruction)
    if found is None:
        raise ValueError(f"not a fixture instruction: {instruction!r}")
    family, items = found
    return (" " if family.kind == "word" else ", ").join(items)


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
    """``"m"`` if the first output is better, else ``"M"`` (see the module docstring for the rule)."""
    q1, q2 = quality(instruction, first), quality(instruction, second)
    if q1 != q2:
        return "m" if q1 > q2 else "M"
    return "M" if len(second) < len(first) else "m"


class RuleJudge:
    """A judging model for :mod:`autorl.judge.server`: answers AlpacaEval pairwise prompts by rule."""

    name = f"alpacaeval-fixture-rules-v{RULES_VERSION}"

    def __call__(self, messages: list[ChatMessage]) -> str:
        """Answer ``m`` or ``M`` for a pairwise prompt; an unreadable prompt gets an explanation instead."""
        user = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
        parsed = read_prompt(user)
        if parsed is None:
            return "I can only judge AlpacaEval pairwise comparison prompts."
        return judge_choice(*parsed)


def partial_answer(instruction: str, rng: random.Random) -> str:
    """A deterministic imperfect answer (some items missing, a chatty preamble): the fixture's reference.

    Its quality is strictly between 0 and 1, so a perfect answer beats it and an answer without
    any required item loses to it.
    """
    found = recognise(instruction)
    if found is None:
        raise ValueError(f"not a fixture instruction: {instruction!r}")
    family, items = found
    keep = max(1, min(len(items) - 1, round(len(items) * rng.uniform(0.4, 0.8))))
    sep = " " if family.kind == "word" else ", "
    return f"Sure! Here they are: {sep.join(items[:keep])}"


def all_instructions() -> list[str]:
    """Every fixture instruction, family by family (the fixture builder samples from these)."""
    return [family.template.format(**params) for family in FAMILIES for params in family.params()]
