"""gsm8k specifics: answer extraction, the hub loader on a local stand-in, and the prompts sent."""

from __future__ import annotations

import doctest
import json
from pathlib import Path
from types import ModuleType

import pytest

from autorl.tasks import (
    EvalContext,
    build_options,
    build_task_data,
    eval_options,
    get_task,
    load_task_module,
)

SPEC = get_task("gsm8k")
EVAL: ModuleType = load_task_module(SPEC, "evaluate.py")

HUB_README = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
- config_name: socratic
  data_files:
  - split: train
    path: socratic/train-*
  - split: test
    path: socratic/test-*
---
# gsm8k local stand-in
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so 3 + 4 = 7.\nThe answer is 7", "7"),
        ("The answer is 1,000.", "1000"),
        ("The answer is $18.00", "18"),
        ("the answer is: 2.50", "2.5"),
        ("The answer is -3", "-3"),
        ("Working 5 then 6\n#### 11", "11"),
        ("The answer is 4\nThe answer is 5", "4"),
        ("#### 9 but The answer is 8", "8"),
        ("We get 12 and then 15.", "15"),
        ("The answer is 7\nQuestion: what is 9?", "7"),
        ("Question: 9", None),
        ("", None),
        ("no numbers here", None),
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert EVAL.extract_answer(text) == expected


def test_doctests() -> None:
    result = doctest.testmod(load_task_module(SPEC, "agent/protocol.py"))
    assert result.attempted > 0 and result.failed == 0


def test_gold_answer() -> None:
    assert EVAL.gold_answer("Natalia sold 48/2 = 24 clips.\n#### 1,024") == "1024"


def _write_hub(root: Path, rows: dict[str, list[dict[str, str]]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True)
    (root / "README.md").write_text(HUB_README, encoding="utf-8")
    for config in ("main", "socratic"):
        (root / config).mkdir(parents=True)
        for split, split_rows in rows.items():
            table = pa.table(
                {
                    "question": [
                        f"{config}: {r['question']}" if config != "main" else r["question"]
                        for r in split_rows
                    ],
                    "answer": [r["answer"] for r in split_rows],
                }
            )
            pq.write_table(table, root / config / f"{split}-00000-of-00001.parquet")


def test_hub_build_from_local_standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    rows = {
        "train": [
            {
                "question": f"Train question {i}: what is {i} + 1?",
                "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}",
            }
            for i in range(5)
        ],
        "test": [
            {
                "question": "Test: Ann has 3 pens and buys 2, how many?",
                "answer": "3 + 2 = 5\n#### 5",
            },
            {
                "question": "Test: costs $1,200 then $300; total?",
                "answer": "1200 + 300 = 1500\n#### 1,500",
            },
        ],
    }
    hub = tmp_path / "hub"
    _write_hub(hub, rows)

    data = build_task_data(SPEC, "hub", tmp_path / "cache", options={"hub_path": str(hub)})

    assert data.source == "hub"
    assert sorted(p.name for p in data.public_dir.iterdir()) == ["train.jsonl"]
    assert sorted(p.name for p in data.private_dir.iterdir()) == ["eval.jsonl"]
    read = lambda p: [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines()]  # noqa: E731
    assert read(data.public_dir / "train.jsonl") == rows["train"]
    assert read(data.private_dir / "eval.jsonl") == rows["test"]


def test_hub_failure_raises_and_never_falls_back(tmp_path: Path) -> None:
    from autorl.errors import TaskError

    with pytest.raises(TaskError, match="hub"):
        # An existing empty folder: fails fast without any network lookup.
        build_task_data(SPEC, "hub", tmp_path / "cache", options={"hub_path": str(tmp_path)})
    assert not list((tmp_path / "cache" / "gsm8k" / f"v{SPEC.version}").glob("fixture-*"))


class RecordingEngine:
    """Records what it was asked and answers every conversation with a fixed text."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.calls: list[tuple[list[list[dict[str, str]]], int, list[str] | None]] = []

    def generate_chat(
        self,
        conversations: list[list[dict[str, str]]],
        *,
        max_new_tokens: int,
        stop: list[str] | None = None,
    ) -> list[str]:
        self.calls.append((conversations, max_new_tokens, stop))
        return [self.reply] * len(conversations)

    def generate_text(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str] | None = None
    ) -> list[str]:
        raise AssertionError("gsm8k must use the chat interface")


@pytest.fixture(scope="module")
def private_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gsm8k")
    return build_task_data(
        SPEC, "fixture", root, options={"train_size": 50, "eval_size": 20}
    ).private_dir


def test_prompts_contain_shots_and_question(private_dir: Path) -> None:
    engine = RecordingEngine("The answer is 12")
    items = [json.loads(line) for line in (private_dir / "eval.jsonl").read_text().splitlines()]
    # The hub source's eval options: the reference protocol (4 shots), on fixture data.
    result = EVAL.evaluate(engine, EvalContext.for_task(SPEC, "hub", private_dir))

    assert len(engine.calls) == 1, "one batched engine call for all items"
    conversations, max_new_tokens, stop = engine.calls[0]
    assert max_new_tokens == eval_options(SPEC, "hub")["max_new_tokens"] and stop == ["Question:"]
    assert len(conversations) == len(items) == result.num_examples == 20
    for conversation, item in zip(conversations, items, strict=True):
        assert [m["role"] for m in conversation] == ["user", "assistant"] * 4 + ["user"]
        assert (
            conversation[-1]["content"]
            == f"Question: {item['question']}\nLet's think step by step\nAnswer:"
        )
        for (shot_q, shot_a), user, bot in zip(
            EVAL.SHOTS, conversation[0:8:2], conversation[1:8:2], strict=True
        ):
            assert user["content"] == f"Question: {shot_q}\nLet's think step by step\nAnswer:"
            assert bot["content"] == shot_a and shot_a.rstrip().splitlines()[-1].startswith(
                "The answer is "
            )
    golds = [EVAL.gold_answer(item["answer"]) for item in items]
    assert result.details["correct"] == golds.count("12")
    assert result.score == pytest.approx(100.0 * golds.count("12") / 20)
    assert result.details["samples"][0]["question"] == items[0]["question"]


def test_options_zero_shot_and_limit(private_dir: Path) -> None:
    engine = RecordingEngine("")
    result = EVAL.evaluate(
        engine,
        EvalContext.for_task(
            SPEC, "hub", private_dir, {"num_shots": 0, "limit": 3, "max_new_tokens": 32}
        ),
    )
    conversations, max_new_tokens, _ = engine.calls[0]
    assert (
        len(conversations) == 3 and all(len(c) == 1 for c in conversations) and max_new_tokens == 32
    )
    assert result.score == 0.0 and result.num_examples == 3


def test_fixture_shape_and_disjoint(tmp_path: Path) -> None:
    data = build_task_data(SPEC, "fixture", tmp_path, seed=3)
    train = [
        json.loads(line) for line in (data.public_dir / "train.jsonl").read_text().splitlines()
    ]
    test = [json.loads(line) for line in (data.private_dir / "eval.jsonl").read_text().splitlines()]
    defaults = build_options(SPEC, "fixture")  # tasks/gsm8k/options.py: 2000 / 200
    assert (len(train), len(test)) == (defaults["train_size"], defaults["eval_size"]) == (2000, 200)
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    for row in train + test:
        gold = int(EVAL.gold_answer(row["answer"]))
        assert 0 <= gold <= 40 and row["answer"].endswith(f"\n#### {gold}")
    other = build_task_data(SPEC, "fixture", tmp_path, seed=4)
    assert other.digest != data.digest
