"""Data builders for gsm8k: public/train.jsonl for the agent, private/eval.jsonl for the grader.

Each source's builder is named in ``task.yaml`` (``sources``); both write ``{"question",
"answer"}`` rows.

Sources:
    hub: ``openai/gsm8k`` config ``main``; train split -> train.jsonl (7,473 rows),
        test split -> eval.jsonl (1,319 rows). ``question`` and ``answer`` are kept verbatim.
    fixture: generated one-step addition/subtraction word problems in the same format,
        small enough for a ~1M-parameter model to learn on a CPU in about a minute.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from .fixture import fixture_rows
from .options import FixtureBuild, HubBuild

HUB_CONFIG = "main"


def _write_jsonl(path: Path, rows: Iterable[dict[str, str]]) -> int:
    count = 0
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(
                json.dumps(
                    {"question": row["question"], "answer": row["answer"]}, ensure_ascii=False
                )
                + "\n"
            )
            count += 1
    return count


def build_fixture(public: Path, private: Path, *, seed: int, options: FixtureBuild) -> None:
    """Write generated problems: ``options.train_size`` / ``options.eval_size``."""
    train_size, eval_size = options.train_size, options.eval_size
    # One pool of distinct questions, split afterwards, keeps eval disjoint from train.
    rows = fixture_rows(seed, train_size + eval_size)
    _write_jsonl(private / "eval.jsonl", rows[:eval_size])
    _write_jsonl(public / "train.jsonl", rows[eval_size:])


def build_hub(public: Path, private: Path, *, seed: int, options: HubBuild) -> None:
    """Write the hub splits (the seed is unused: they are fixed); ``options`` ``hub_path`` (the
    dataset
    repo; a local folder with the same layout works)."""
    import datasets  # heavy; only the hub source needs it

    data = datasets.load_dataset(options.hub_path, HUB_CONFIG)
    _write_jsonl(public / "train.jsonl", data["train"])
    _write_jsonl(private / "eval.jsonl", data["test"])
