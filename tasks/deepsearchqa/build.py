"""Data builders for deepsearchqa: training questions for the agent, eval questions for the grader.

Each source's builder is named in ``task.yaml`` (``sources``). Rows are ``{"episode_id", "problem",
"answer", "answer_type"}`` in ``questions.jsonl`` (``public/``: ``train/<i>``; ``private/``:
``eval/<i>``).

Sources:
    hub: ``google/deepsearchqa`` split ``eval`` (900 rows), shuffled with seed 42 as the reference
        does: train = shuffled[0:100], eval = shuffled[100:300]; the other 600 are unused. The
            search
        backend is a web search API (env options).
    fixture: generated questions about fictional towns (so no model knows them), Single and Set
        answers, over a generated corpus (``private/corpus.jsonl``, one document per town and
        distractors) that the local BM25 search backend indexes; train and eval ask about
        different towns (:mod:`autorl.task_code.deepsearchqa.fixture`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .fixture import fixture_data
from .options import FixtureBuild, HubBuild

HUB_SPLIT = "eval"
SHUFFLE_SEED = 42


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")


def build_fixture(public: Path, private: Path, *, seed: int, options: FixtureBuild) -> None:
    """Write generated questions and their search corpus.

    Args:
        public: Empty folder for what the agent may see (``questions.jsonl``, train).
        private: Empty folder for what only the grader reads (``questions.jsonl``, eval, and
            ``corpus.jsonl``).
        seed: Seed of the fixture generator.
        options: ``train_size``, ``eval_size``, ``distractor_towns``.
    """
    data = fixture_data(seed, options.train_size, options.eval_size, options.distractor_towns)
    private, public = Path(private), Path(public)
    _write(private / "corpus.jsonl", data.corpus)
    _write(
        private / "questions.jsonl",
        [{"episode_id": f"eval/{i}", **q} for i, q in enumerate(data.eval)],
    )
    _write(
        public / "questions.jsonl",
        [{"episode_id": f"train/{i}", **q} for i, q in enumerate(data.train)],
    )


def build_hub(public: Path, private: Path, *, seed: int, options: HubBuild) -> None:
    """Write the reference's split of the hub data set (the seed is unused: the shuffle seed is 42).

    Args:
        public: Empty folder for what the agent may see (``questions.jsonl``, ``split_meta.json``).
        private: Empty folder for what only the grader reads (``questions.jsonl``).
        seed: Unused.
        options: ``train_size``, ``eval_size``, ``hub_path`` (``google/deepsearchqa`` or a local
            copy with the same layout).

    Raises:
        ValueError: The split has fewer rows than ``train_size + eval_size``.
    """
    import datasets  # heavy; only the hub source needs it

    hub_path = options.hub_path
    data = datasets.load_dataset(hub_path, split=HUB_SPLIT).shuffle(seed=SHUFFLE_SEED)
    train_n, eval_n = options.train_size, options.eval_size
    if len(data) < train_n + eval_n:
        raise ValueError(
            f"{hub_path} split {HUB_SPLIT} has {len(data)} rows, "
            f"fewer than train_size + eval_size = {train_n + eval_n}"
        )

    def row(item: dict[str, Any]) -> dict[str, str]:
        return {
            "problem": str(item["problem"]),
            "answer": str(item["answer"]),
            "answer_type": str(item.get("answer_type") or "Single Answer"),
        }

    public, private = Path(public), Path(private)
    _write(
        public / "questions.jsonl",
        [{"episode_id": f"train/{i}", **row(data[i])} for i in range(train_n)],
    )
    _write(
        private / "questions.jsonl",
        [{"episode_id": f"eval/{i}", **row(data[train_n + i])} for i in range(eval_n)],
    )
    (public / "split_meta.json").write_text(
        json.dumps({"dataset": hub_path, "train_size": train_n}, sort_keys=True), encoding="utf-8"
    )
