"""The alpacaeval fixture generator: seven instruction families, their perfect and partial answers.

Grader side: deterministic in its seed, so it can rebuild the private split; no agent imports it.
Each family is an instruction template with a solver (the items a perfect answer lists:
multiples, a count, letters of a word, ...). Train answers list exactly the required items; eval
references are deliberately partial, so a perfect answer beats the reference and an empty one
loses to it under the fixture's rule judge (:mod:`.rules`, which recognises the same families).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Kind = Literal["number", "letter", "word"]

_WORDS = (
    "apple",
    "river",
    "garden",
    "window",
    "rabbit",
    "candle",
    "pencil",
    "orange",
    "silver",
    "planet",
    "basket",
    "bridge",
    "castle",
    "dragon",
    "forest",
    "guitar",
    "island",
    "jacket",
    "kitten",
    "lemon",
    "market",
    "needle",
    "pepper",
    "rocket",
    "saddle",
    "ticket",
    "violin",
    "wallet",
    "yellow",
    "zipper",
    "anchor",
    "button",
    "carpet",
    "donkey",
    "engine",
    "feather",
    "goblet",
    "hammer",
    "insect",
    "jungle",
    "kettle",
    "ladder",
    "mirror",
    "napkin",
    "oyster",
    "parrot",
    "puzzle",
    "ribbon",
    "spider",
    "turtle",
    "summer",
    "winter",
    "tomato",
    "coffee",
    "butter",
    "cookie",
    "pillow",
    "marble",
    "shadow",
    "sunset",
)


@dataclass(frozen=True)
class Family:
    """One instruction template with its solver.

    Attributes:
        name: Short id.
        template: ``str.format`` template of the instruction (``\\n\\n`` separates an alpaca
            ``input``).
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
    Family(
        "multiples",
        "List the first {n} multiples of {k}.",
        re.compile(r"^List the first (?P<n>\d+) multiples of (?P<k>\d+)\.$"),
        "number",
        lambda p: [str(int(p["k"]) * i) for i in range(1, int(p["n"]) + 1)],
        lambda: [{"n": n, "k": k} for n in range(3, 9) for k in range(2, 20)],
    ),
    Family(
        "count",
        "Count from {a} to {b}.",
        re.compile(r"^Count from (?P<a>\d+) to (?P<b>\d+)\.$"),
        "number",
        lambda p: _ints(int(p["a"]), int(p["b"])),
        lambda: [{"a": a, "b": a + d} for a in range(1, 61) for d in range(3, 8)],
    ),
    Family(
        "evens",
        "List the even numbers in the range below.\n\nfrom {a} to {b}",
        re.compile(
            r"^List the even numbers in the range below\.\n\nfrom (?P<a>\d+) to (?P<b>\d+)$"
        ),
        "number",
        lambda p: [str(v) for v in range(int(p["a"]), int(p["b"]) + 1) if v % 2 == 0],
        lambda: [{"a": a, "b": a + d} for a in range(0, 61) for d in range(4, 13)],
    ),
    Family(
        "squares",
        "List the squares of the whole numbers from {a} to {b}.",
        re.compile(r"^List the squares of the whole numbers from (?P<a>\d+) to (?P<b>\d+)\.$"),
        "number",
        lambda p: [str(v * v) for v in range(int(p["a"]), int(p["b"]) + 1)],
        lambda: [{"a": a, "b": a + d} for a in range(1, 13) for d in range(2, 6)],
    ),
    Family(
        "spell",
        'Spell the word "{w}" letter by letter.',
        re.compile(r'^Spell the word "(?P<w>[a-z]+)" letter by letter\.$'),
        "letter",
        lambda p: list(p["w"]),
        lambda: [{"w": w} for w in _WORDS],
    ),
    Family(
        "repeat",
        'Write the word "{w}" {n} times.',
        re.compile(r'^Write the word "(?P<w>[a-z]+)" (?P<n>\d+) times\.$'),
        "word",
        lambda p: [p["w"]] * int(p["n"]),
        lambda: [{"w": w, "n": n} for w in _WORDS for n in range(2, 7)],
    ),
    Family(
        "alphabet",
        'List the {n} letters of the alphabet that come after "{c}".',
        re.compile(
            r'^List the (?P<n>\d+) letters of the alphabet that come after "(?P<c>[a-z])"\.$'
        ),
        "letter",
        lambda p: [chr(ord(p["c"]) + i) for i in range(1, int(p["n"]) + 1)],
        lambda: [{"n": n, "c": chr(c)} for c in range(ord("a"), ord("q")) for n in range(3, 7)],
    ),
)


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

    >>> ideal_answer('Write the word "kite" 2 times.'), ideal_answer("Count from 3 to 5.")
    ('kite kite', '3, 4, 5')

    Raises:
        ValueError: Not a fixture instruction.
    """
    found = recognise(instruction)
    if found is None:
        raise ValueError(f"not a fixture instruction: {instruction!r}")
    family, items = found
    return (" " if family.kind == "word" else ", ").join(items)


def partial_answer(instruction: str, rng: random.Random) -> str:
    """A deterministic imperfect answer (some items missing, a chatty preamble): the fixture's
    reference.

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


EVAL_HEAD = (
    60  # eval rows that come before the training block in the shuffled pool (all of version 2's)
)


def fixture_split(
    seed: int, train_size: int, eval_size: int
) -> tuple[list[dict[str, str]], list[tuple[str, str]]]:
    """The fixture's eval rows and train ``(question, ideal answer)`` pairs, drawn with
    ``random.Random(seed)``.

    All instructions are shuffled once. The train pairs are the ``train_size`` after the first
    :data:`EVAL_HEAD`; the eval rows (``question``, a partial ``reference``, ``generator``,
    ``dataset``) are the first ``eval_size`` of the rest: the first :data:`EVAL_HEAD`, then those
    after the training block. So a larger eval set leaves the training instructions, and with them
    ``small``'s tokenizer corpus (``autorl/models/small.py``), as they were.

    >>> evals, train = fixture_split(0, 3, 2)
    >>> len(evals), len(train), (evals, train) == fixture_split(0, 3, 2)
    (2, 3, True)
    >>> fixture_split(0, 600, 200)[1] == fixture_split(0, 600, 60)[1]
    True

    Raises:
        ValueError: More instructions asked for than the families hold, or an eval item leaks into
            train.
    """
    pool = all_instructions()
    if train_size + max(eval_size, EVAL_HEAD) > len(pool):
        raise ValueError(
            f"the fixture has {len(pool)} instructions; train_size + eval_size = "
            f"{train_size + eval_size} "
            f"(with eval_size at least {EVAL_HEAD})"
        )
    rng = random.Random(seed)
    rng.shuffle(pool)
    candidates = pool[:EVAL_HEAD] + pool[EVAL_HEAD + train_size :]
    evals = [
        {
            "question": q,
            "reference": partial_answer(q, rng),
            "generator": "fixture_reference",
            "dataset": "fixture",
        }
        for q in candidates[:eval_size]
    ]
    train = [
        (question, ideal_answer(question)) for question in pool[EVAL_HEAD : EVAL_HEAD + train_size]
    ]
    public_text = "\n".join(question + "\n" + answer for question, answer in train)
    for row in evals:
        if row["question"] in public_text or row["reference"] in public_text:
            raise ValueError(f"fixture bug: eval item {row['question']!r} leaks into train")
    return evals, train
