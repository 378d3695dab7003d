"""Data builder for gsm8k: public/train.jsonl for the agent, private/eval.jsonl for the grader.

Sources:
    hub: ``openai/gsm8k`` config ``main``; train split -> train.jsonl (7,473 rows),
        test split -> eval.jsonl (1,319 rows). ``question`` and ``answer`` are kept verbatim.
    fixture: generated one-step addition/subtraction word problems in the same format,
        small enough for a ~1M-parameter model to learn on a CPU in about a minute.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

HUB_PATH = "openai/gsm8k"
HUB_CONFIG = "main"

_NAMES = (("Tom", "He"), ("Anna", "She"), ("Ben", "He"), ("Mia", "She"), ("Sam", "He"), ("Lily", "She"),
          ("Max", "He"), ("Emma", "She"), ("Leo", "He"), ("Zoe", "She"), ("Jack", "He"), ("Ella", "She"))
_ITEMS = ("apples", "books", "marbles", "stickers", "pencils", "cookies", "toy cars", "shells",
          "balloons", "cards", "eggs", "flowers")

# Each template: (question, answer working, operator). The working names every varying part
# of the question, so distinct questions always have distinct answers.
_Template = tuple[str, str, str]
_TEMPLATES: tuple[_Template, ...] = (
    ("{n} has {a} {i}. {p} buys {b} more {i}. How many {i} does {n} have now?",
     "{n} has {a} + {b} = {c} {i}.", "+"),
    ("There are {a} {i} in a box. {n} puts {b} more {i} in the box. How many {i} are in the box now?",
     "{n} puts {b} {i} into the box, so there are {a} + {b} = {c} {i} in the box.", "+"),
    ("{n} has {a} {i} and {f} has {b} {i}. How many {i} do they have together?",
     "{n} and {f} have {a} + {b} = {c} {i} together.", "+"),
    ("{n} has {a} {i}. {p} gives {b} {i} to {f}. How many {i} does {n} have left?",
     "{n} gives {b} {i} to {f}, so {n} has {a} - {b} = {c} {i} left.", "-"),
    ("{n} had {a} {i}. {p} lost {b} of them. How many {i} does {n} have now?",
     "{n} lost {b} of the {i}, so {n} has {a} - {b} = {c} {i} now.", "-"),
    ("{n} has {a} {i} and {f} has {b} {i}. How many more {i} does {n} have than {f}?",
     "{n} has {a} - {b} = {c} more {i} than {f}.", "-"),
)


def _write_jsonl(path: Path, rows: Iterable[dict[str, str]]) -> int:
    count = 0
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps({"question": row["question"], "answer": row["answer"]}, ensure_ascii=False) + "\n")
            count += 1
    return count


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
    return {"question": question.format(**fields), "answer": f"{working.format(**fields)}\n#### {c}"}


def _fixture_rows(seed: int, total: int) -> list[dict[str, str]]:
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


def _build_fixture(public: Path, private: Path, seed: int, options: dict[str, Any]) -> None:
    train_size = int(options.get("train_size", 2000))
    eval_size = int(options.get("eval_size", 200))
    # One pool of distinct questions, split afterwards, keeps eval disjoint from train.
    rows = _fixture_rows(seed, train_size + eval_size)
    _write_jsonl(private / "eval.jsonl", rows[:eval_size])
    _write_jsonl(public / "train.jsonl", rows[eval_size:])


def _build_hub(public: Path, private: Path, options: dict[str, Any]) -> None:
    import datasets  # heavy; only the hub source needs it

    data = datasets.load_dataset(options.get("hub_path", HUB_PATH), HUB_CONFIG)
    _write_jsonl(public / "train.jsonl", data["train"])
    _write_jsonl(private / "eval.jsonl", data["test"])


_BUILDERS: dict[str, Callable[[Path, Path, int, dict[str, Any]], None]] = {
    "fixture": _build_fixture,
    "hub": lambda public, private, seed, options: _build_hub(public, private, options),
}


def build(source: str, public: Path, private: Path, *, seed: int, options: dict[str, Any]) -> None:
    """Write ``public/train.jsonl`` and ``private/eval.jsonl`` (``{"question", "answer"}`` rows).

    Args:
        source: ``"fixture"`` or ``"hub"``.
        public: Empty folder for what the agent may see.
        private: Empty folder for what only the evaluator reads.
        seed: Seed of the fixture generator (the hub split is fixed).
        options: ``train_size`` / ``eval_size`` (fixture, defaults 2000 / 200);
            ``hub_path`` (hub, default ``openai/gsm8k``; a local folder with the same layout works).

    Raises:
        ValueError: Unknown source.
    """
    if source not in _BUILDERS:
        raise ValueError(f"unknown source '{source}'; valid: {', '.join(_BUILDERS)}")
    _BUILDERS[source](Path(public), Path(private), seed, options)
