"""The gsm8k fixture generator: one-step addition/subtraction word problems in GSM8K's format.

Grader side: deterministic in its seed, so it can rebuild the private split; no agent imports it.
"""

from __future__ import annotations

import random

_NAMES = (
    ("Tom", "He"),
    ("Anna", "She"),
    ("Ben", "He"),
    ("Mia", "She"),
    ("Sam", "He"),
    ("Lily", "She"),
    ("Max", "He"),
    ("Emma", "She"),
    ("Leo", "He"),
    ("Zoe", "She"),
    ("Jack", "He"),
    ("Ella", "She"),
)
_ITEMS = (
    "apples",
    "books",
    "marbles",
    "stickers",
    "pencils",
    "cookies",
    "toy cars",
    "shells",
    "balloons",
    "cards",
    "eggs",
    "flowers",
)

# Each template: (question, answer working, operator). The working names every varying part
# of the question, so distinct questions always have distinct answers.
_Template = tuple[str, str, str]
_TEMPLATES: tuple[_Template, ...] = (
    (
        "{n} has {a} {i}. {p} buys {b} more {i}. How many {i} does {n} have now?",
        "{n} has {a} + {b} = {c} {i}.",
        "+",
    ),
    (
        "There are {a} {i} in a box. {n} puts {b} more {i} in the box. How many {i} are in the "
        "box now?",
        "{n} puts {b} {i} into the box, so there are {a} + {b} = {c} {i} in the box.",
        "+",
    ),
    (
        "{n} has {a} {i} and {f} has {b} {i}. How many {i} do they have together?",
        "{n} and {f} have {a} + {b} = {c} {i} together.",
        "+",
    ),
    (
        "{n} has {a} {i}. {p} gives {b} {i} to {f}. How many {i} does {n} have left?",
        "{n} gives {b} {i} to {f}, so {n} has {a} - {b} = {c} {i} left.",
        "-",
    ),
    (
        "{n} had {a} {i}. {p} lost {b} of them. How many {i} does {n} have now?",
        "{n} lost {b} of the {i}, so {n} has {a} - {b} = {c} {i} now.",
        "-",
    ),
    (
        "{n} has {a} {i} and {f} has {b} {i}. How many more {i} does {n} have than {f}?",
        "{n} has {a} - {b} = {c} more {i} than {f}.",
        "-",
    ),
)


def _fixture_problem(rng: random.Random) -> dict[str, str]:
    question, working, op = rng.choice(_TEMPLATES)
    (name, pronoun), (friend, _) = rng.sample(_NAMES, 2)
    item = rng.choice(_ITEMS)
    if op == "+":
        a, b = rng.randint(1, 20), rng.randint(1, 20)
        c = a + b
    else:
        a = rng.randint(1, 20)
        b = rng.randint(1, a)
        c = a - b
    fields = {"n": name, "p": pronoun, "f": friend, "i": item, "a": a, "b": b, "c": c}
    return {
        "question": question.format(**fields),
        "answer": f"{working.format(**fields)}\n#### {c}",
    }


def fixture_rows(seed: int, total: int) -> list[dict[str, str]]:
    """``total`` distinct problems (distinct questions and answers) drawn with
    ``random.Random(seed)``.

    >>> rows = fixture_rows(0, 3)
    >>> len(rows), rows == fixture_rows(0, 3), rows[0]["answer"].split("#### ")[1].isdigit()
    (3, True, True)
    """
    rng = random.Random(seed)
    rows: list[dict[str, str]] = []
    seen_q: set[str] = set()
    seen_a: set[str] = set()
    for _ in range(total * 50):
        if len(rows) == total:
            return rows
        row = _fixture_problem(rng)
        if row["question"] in seen_q or row["answer"] in seen_a:
            continue
        seen_q.add(row["question"])
        seen_a.add(row["answer"])
        rows.append(row)
    raise ValueError(f"could not generate {total} distinct fixture problems; ask for fewer")
