"""Data builder for deepsearchqa: training questions for the agent, eval questions for the grader.

Rows are ``{"episode_id", "problem", "answer", "answer_type"}`` in ``questions.jsonl`` (``public/``:
``train/<i>``; ``private/``: ``eval/<i>``).

Sources:
    hub: ``google/deepsearchqa`` split ``eval`` (900 rows), shuffled with seed 42 as the reference
        does: train = shuffled[0:100], eval = shuffled[100:300]; the other 600 are unused. The search
        backend is a web search API (env options).
    fixture: generated questions about fictional towns (so no model knows them), Single and Set
        answers, over a generated corpus (``private/corpus.jsonl``, one document per town and
        distractors) that the local BM25 search backend indexes; train and eval ask about
        different towns.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

HUB_PATH = "google/deepsearchqa"
HUB_SPLIT = "eval"
SHUFFLE_SEED = 42
DEFAULTS = {"fixture": {"train_size": 100, "eval_size": 60, "distractor_towns": 40},
            "hub": {"train_size": 100, "eval_size": 200, "hub_path": HUB_PATH}}

_SYLLABLES = ("var", "nor", "hol", "mar", "ten", "bry", "osk", "lin", "del", "kav", "ast", "rim", "sel", "tor",
              "gav", "ull", "pen", "dra", "mik", "zel", "fen", "quo", "bel", "hax")
_TRADES = ("salt", "wool", "amber", "glass", "timber", "copper", "silk", "pottery", "cheese", "paper")
_FOUNDERS = ("Elise Maren", "Tomas Okri", "Ada Lindqvist", "Ravi Sen", "Noor Halim", "Jonas Vell", "Mira Costa",
             "Ilya Brand", "Sofia Quell", "Otto Renn", "Lena Ardo", "Pavel Stroh")


def _name(rng: random.Random, parts: int) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(parts)).capitalize()


def _town(rng: random.Random, used: set[str]) -> dict[str, Any]:
    while (name := _name(rng, 3)) in used:
        pass
    used.add(name)
    rivers = sorted({_name(rng, 2) for _ in range(rng.randint(2, 3))})
    return {"name": name, "year": rng.randint(1200, 1950), "founder": rng.choice(_FOUNDERS),
            "trade": rng.choice(_TRADES), "rivers": rivers, "population": rng.randint(2, 90) * 1000}


def _doc(town: dict[str, Any]) -> dict[str, str]:
    rivers = " and ".join([", ".join(town["rivers"][:-1]), town["rivers"][-1]]) if len(town["rivers"]) > 1 else town["rivers"][0]
    text = (f"The town of {town['name']} was founded in {town['year']} by {town['founder']}. It grew rich from the "
            f"{town['trade']} trade. The rivers {rivers} run through {town['name']}, which today has about "
            f"{town['population']:,} inhabitants.")
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


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")


def _build_fixture(public: Path, private: Path, seed: int, options: dict[str, Any]) -> None:
    rng = random.Random(seed)
    used: set[str] = set()
    train_n, eval_n = int(options["train_size"]), int(options["eval_size"])
    towns = [_town(rng, used) for _ in range((train_n + eval_n + 1) // 2 + int(options["distractor_towns"]))]
    asked = (train_n + eval_n + 1) // 2
    eval_towns = towns[: (eval_n + 1) // 2]
    train_towns = towns[(eval_n + 1) // 2: asked]
    evals = [q for t in eval_towns for q in _questions(rng, t)][:eval_n]
    train = [q for t in train_towns for q in _questions(rng, t)][:train_n]
    _write(private / "corpus.jsonl", [_doc(t) for t in towns])
    _write(private / "questions.jsonl", [{"episode_id": f"eval/{i}", **q} for i, q in enumerate(evals)])
    _write(public / "questions.jsonl", [{"episode_id": f"train/{i}", **q} for i, q in enumerate(train)])


def _build_hub(public: Path, private: Path, options: dict[str, Any]) -> None:
    import datasets  # heavy; only the hub source needs it

    data = datasets.load_dataset(options["hub_path"], split=HUB_SPLIT).shuffle(seed=SHUFFLE_SEED)
    train_n, eval_n = int(options["train_size"]), int(options["eval_size"])
    if len(data) < train_n + eval_n:
        raise ValueError(f"{options.get('hub_path', HUB_PATH)} split {HUB_SPLIT} has {len(data)} rows, "
                         f"fewer than train_size + eval_size = {train_n + eval_n}")

    def row(item: dict[str, Any]) -> dict[str, str]:
        return {"problem": str(item["problem"]), "answer": str(item["answer"]),
                "answer_type": str(item.get("answer_type") or "Single Answer")}

    _write(public / "questions.jsonl", [{"episode_id": f"train/{i}", **row(data[i])} for i in range(train_n)])
    _write(private / "questions.jsonl",
           [{"episode_id": f"eval/{i}", **row(data[train_n + i])} for i in range(eval_n)])
    (public / "split_meta.json").write_text(json.dumps({"dataset": options["hub_path"], "train_size": train_n},
                                                       sort_keys=True), encoding="utf-8")


def build(source: str, public: Path, private: Path, *, seed: int, options: dict[str, Any]) -> None:
    """Write train questions (``public/``) and eval questions (``private/``).

    Args:
        source: ``"fixture"`` or ``"hub"``.
        public: Empty folder for what the agent may see.
        private: Empty folder for what only the grader reads.
        seed: Seed of the fixture generator (the hub split is fixed: shuffle seed 42).
        options: fixture: ``train_size``, ``eval_size``, ``distractor_towns``; hub: ``train_size``
            (100), ``eval_size`` (200), ``hub_path`` (``google/deepsearchqa`` or a local copy).

    Raises:
        ValueError: Unknown source.
    """
    if source not in DEFAULTS:
        raise ValueError(f"unknown source '{source}'; valid: fixture, hub")
    opts = DEFAULTS[source] | dict(options)
    if source == "fixture":
        _build_fixture(Path(public), Path(private), seed, opts)
    else:
        _build_hub(Path(public), Path(private), opts)
