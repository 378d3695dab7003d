"""The deepsearchqa fixture generator: questions about fictional towns, over a generated corpus.

Grader side: deterministic in its seed, so it can rebuild the private split; no agent imports it.
The towns are invented (so no model knows them); each has a founding year, a founder, a trade
(Single answers) and two or three rivers (a Set answer). The corpus holds one document per town,
asked about or not (distractors); train and eval ask about different towns.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

_SYLLABLES = (
    "var",
    "nor",
    "hol",
    "mar",
    "ten",
    "bry",
    "osk",
    "lin",
    "del",
    "kav",
    "ast",
    "rim",
    "sel",
    "tor",
    "gav",
    "ull",
    "pen",
    "dra",
    "mik",
    "zel",
    "fen",
    "quo",
    "bel",
    "hax",
)
_TRADES = (
    "salt",
    "wool",
    "amber",
    "glass",
    "timber",
    "copper",
    "silk",
    "pottery",
    "cheese",
    "paper",
)
_FOUNDERS = (
    "Elise Maren",
    "Tomas Okri",
    "Ada Lindqvist",
    "Ravi Sen",
    "Noor Halim",
    "Jonas Vell",
    "Mira Costa",
    "Ilya Brand",
    "Sofia Quell",
    "Otto Renn",
    "Lena Ardo",
    "Pavel Stroh",
)


@dataclass(frozen=True)
class FixtureData:
    """One generated data set.

    Attributes:
        corpus: The search corpus, ``{"id", "title", "text"}`` rows (one per town).
        eval: Eval questions, ``{"problem", "answer", "answer_type"}`` rows (no episode ids yet).
        train: Training questions, same shape, about other towns.
    """

    corpus: list[dict[str, str]]
    eval: list[dict[str, str]]
    train: list[dict[str, str]]


def _name(rng: random.Random, parts: int) -> str:
    """A hyphenated name of ``parts`` syllables (``Sel-tor``): every name, asked about in training
    or eval, is a sequence of the same syllable tokens, so copying one is the same skill in both
    splits."""
    return "-".join(rng.choice(_SYLLABLES) for _ in range(parts)).capitalize()


def _town(rng: random.Random, used: set[str]) -> dict[str, Any]:
    while (name := _name(rng, 2)) in used:
        pass
    used.add(name)
    rivers = sorted({_name(rng, 2) for _ in range(rng.randint(2, 3))})
    return {
        "name": name,
        "year": rng.randint(1200, 1950),
        "founder": rng.choice(_FOUNDERS),
        "trade": rng.choice(_TRADES),
        "rivers": rivers,
        "population": rng.randint(2, 90) * 1000,
    }


def _doc(town: dict[str, Any]) -> dict[str, str]:
    rivers = (
        " and ".join([", ".join(town["rivers"][:-1]), town["rivers"][-1]])
        if len(town["rivers"]) > 1
        else town["rivers"][0]
    )
    text = (
        f"The town of {town['name']} was founded in {town['year']} by {town['founder']}. It grew "
        "rich from the "
        f"{town['trade']} trade. The rivers {rivers} run through {town['name']}, which today has "
        "about "
        f"{town['population']:,} inhabitants."
    )
    return {"id": town["name"].lower(), "title": town["name"], "text": text}


def _questions(rng: random.Random, town: dict[str, Any]) -> list[dict[str, str]]:
    n = town["name"]
    pool = [
        (f"In what year was the town of {n} founded?", str(town["year"]), "Single Answer"),
        (f"Who founded the town of {n}?", town["founder"], "Single Answer"),
        (f"Which trade made the town of {n} rich?", town["trade"], "Single Answer"),
        (f"Which rivers run through the town of {n}?", ", ".join(town["rivers"]), "Set Answer"),
    ]
    return [{"problem": q, "answer": a, "answer_type": t} for q, a, t in rng.sample(pool, 2)]


def fixture_data(seed: int, train_size: int, eval_size: int, distractor_towns: int) -> FixtureData:
    """Generate the corpus and the questions with ``random.Random(seed)`` (two questions per asked
    town).

    >>> data = fixture_data(0, train_size=3, eval_size=2, distractor_towns=1)
    >>> len(data.corpus), len(data.eval), len(data.train), data == fixture_data(0, 3, 2, 1)
    (4, 2, 3, True)
    >>> town = lambda q: q["problem"].rsplit("town of ", 1)[1]
    >>> {town(q) for q in data.eval} & {town(q) for q in data.train}
    set()
    """
    asked = (train_size + eval_size + 1) // 2
    if asked + distractor_towns > len(_SYLLABLES) ** 2:
        raise ValueError(
            f"{asked + distractor_towns} towns needed (one per two questions, plus "
            "distractor_towns), but "
            f"two-syllable names allow {len(_SYLLABLES) ** 2}: lower train_size, eval_size or "
            "distractor_towns"
        )
    rng = random.Random(seed)
    used: set[str] = set()
    towns = [_town(rng, used) for _ in range(asked + distractor_towns)]
    eval_towns = towns[: (eval_size + 1) // 2]
    train_towns = towns[(eval_size + 1) // 2 : asked]
    evals = [q for t in eval_towns for q in _questions(rng, t)][:eval_size]
    train = [q for t in train_towns for q in _questions(rng, t)][:train_size]
    return FixtureData(corpus=[_doc(t) for t in towns], eval=evals, train=train)
