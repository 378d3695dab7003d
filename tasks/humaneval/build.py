"""Data builders for humaneval: public/train.jsonl for the agent, private/eval.jsonl for the grader.

Each source's builder is named in ``task.yaml`` (``sources``). Rows (both files): ``question`` (the
HumanEval ``prompt``: signature and docstring), ``answer`` (the ``canonical_solution``: the function
body), ``task_id``, ``entry_point`` and ``test`` (code defining ``check(candidate)``).

Sources:
    hub: ``openai/openai_humaneval`` split ``test`` (164 problems, in order): the first 82 -> train
        (tests included), the last 82 -> eval.
    fixture: generated small function problems in the same format (one-line bodies over ints,
        strings and lists; :mod:`.fixture`), drawn from one pool of distinct problems, so train and
        eval are disjoint.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .fixture import fixture_problems
from .options import FixtureBuild, HubBuild

HUB_CONFIG = "openai_humaneval"
FIELDS = ("question", "answer", "task_id", "entry_point", "test")


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps({k: row[k] for k in FIELDS}, ensure_ascii=False) + "\n")


def _check_private_not_public(public: list[dict[str, str]], private: list[dict[str, str]]) -> None:
    """Guard against a generator change that lets eval text leak into train."""
    public_text = "\n".join(json.dumps(r) + "".join(r.values()) for r in public)
    for row in private:
        for key in ("question", "answer", "test"):
            if row[key] in public_text:
                raise ValueError(
                    f"fixture bug: eval {key} of {row['entry_point']} also appears in train"
                )


def build_fixture(public: Path, private: Path, *, seed: int, options: FixtureBuild) -> None:
    """Write generated problems, shuffled with ``random.Random(seed)``; eval first from one pool.

    Args:
        public: Empty folder for what the agent may see (``train.jsonl``).
        private: Empty folder for what only the evaluator reads (``eval.jsonl``).
        seed: Seed of the shuffle that picks and orders the problems.
        options: ``train_size`` / ``eval_size``.

    Raises:
        ValueError: The sizes ask for more problems than the fixture has, or eval text leaked into
            train.
    """
    train_size, eval_size = options.train_size, options.eval_size
    pool = fixture_problems()
    if train_size + eval_size > len(pool):
        raise ValueError(
            f"the fixture has {len(pool)} problems; train_size + eval_size = "
            f"{train_size + eval_size}"
        )
    random.Random(seed).shuffle(pool)
    chosen = pool[: eval_size + train_size]
    for index, row in enumerate(chosen):
        row["task_id"] = f"Fixture/{index}"
    evals, train = chosen[:eval_size], chosen[eval_size:]
    _check_private_not_public(train, evals)
    _write_jsonl(Path(private) / "eval.jsonl", evals)
    _write_jsonl(Path(public) / "train.jsonl", train)


def build_hub(public: Path, private: Path, *, seed: int, options: HubBuild) -> None:
    """Write the hub split (the seed is unused: the split is fixed).

    Args:
        public: Empty folder for what the agent may see (``train.jsonl``).
        private: Empty folder for what only the evaluator reads (``eval.jsonl``).
        seed: Unused.
        options: ``hub_path`` (the dataset repo; a local folder with the same layout works) and
            ``split_at`` (test problems before it are train).

    Raises:
        ValueError: The test split has no more than ``split_at`` problems.
    """
    import datasets  # heavy; only the hub source needs it

    split_at = options.split_at
    data = datasets.load_dataset(options.hub_path, HUB_CONFIG, split="test")
    if len(data) <= split_at:
        raise ValueError(
            f"{options.hub_path} test split has {len(data)} problems; "
            f"need more than split_at={split_at}"
        )
    rows = [
        {
            "question": r["prompt"],
            "answer": r["canonical_solution"],
            "task_id": r["task_id"],
            "entry_point": r["entry_point"],
            "test": r["test"],
        }
        for r in data
    ]
    _write_jsonl(Path(public) / "train.jsonl", rows[:split_at])
    _write_jsonl(Path(private) / "eval.jsonl", rows[split_at:])
