"""humaneval specifics: code extraction, the prompt sent, hostile completions, the recipe's reward,
the fixture and the hub loader."""

from __future__ import annotations

import doctest
import json
import os
import pwd
import socket
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from autorl.errors import TaskError
from autorl.tasks import (
    EvalContext,
    build_options,
    build_task_data,
    eval_options,
)
from tests.helpers.humaneval_task import EVAL, FIXTURE, PROTOCOL, RECIPE, SPEC

INSTRUCTION = (
    "Read the following function signature and docstring, and fully implement the function "
    "described. "
    "Your response should only contain the code for this function.\n"
)
PROMPT = 'from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum of xs."""\n'
TEST = (
    "\n\ndef check(candidate):\n    assert candidate([1, 2]) == 3\n    assert candidate([]) == 0\n"
)

HUB_README = """---
configs:
- config_name: openai_humaneval
  data_files:
  - split: test
    path: openai_humaneval/test-*
---
# openai_humaneval local stand-in
"""


def _exec_passes(program: str) -> bool:
    """Run a program we generated ourselves in-process (fast; only for trusted code)."""
    try:
        exec(compile(program, "<program>", "exec"), {"__name__": "__main__"})  # noqa: S102 - trusted fixture code
    except Exception:  # noqa: BLE001 - any failure means "does not pass"
        return False
    return True


@pytest.mark.parametrize("module", [PROTOCOL, FIXTURE], ids=lambda m: m.__name__.rpartition(".")[2])
def test_doctests(module: ModuleType) -> None:
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize(
    ("completion", "passes"),
    [
        ("    return sum(xs)\n", True),
        ("return sum(xs)", True),  # unindented body
        (
            "```python\ndef total(xs: List[int]) -> int:\n    return sum(xs)\n```\nThis sums the "
            "list.",
            True,
        ),
        ("Here you go:\n```\ndef total(xs):\n    return sum(xs)\n```", True),
        ("```python\ndef total(xs: List[int]) -> int:\n    return sum(xs)", True),  # unclosed fence
        (
            "def total(xs: List[int]) -> int:\n    s = 0\n    for x in xs:\n        s += x\n    "
            "return s\n",
            True,
        ),
        ("    return sum(xs) + 1\n", False),
        ("no idea, sorry", False),
        ("", False),
    ],
)
def test_build_solution(completion: str, passes: bool) -> None:
    solution = PROTOCOL.build_solution(PROMPT, completion, "total")
    assert solution.startswith(PROMPT) and solution.endswith("\n")
    assert _exec_passes(f"{solution}{TEST}\ncheck(total)\n") is passes


class RecordingEngine:
    """Records the conversations and answers with ``replies[i]`` (or the canonical solution)."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.calls: list[tuple[list[list[dict[str, str]]], int]] = []

    def generate_chat(
        self,
        conversations: list[list[dict[str, str]]],
        *,
        max_new_tokens: int,
        stop: list[str] | None = None,
    ) -> list[str]:
        self.calls.append((conversations, max_new_tokens))
        return self.replies[: len(conversations)]

    def generate_text(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str] | None = None
    ) -> list[str]:
        raise AssertionError("humaneval must use the chat interface")


@pytest.fixture(scope="module")
def private_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("humaneval")
    return build_task_data(
        SPEC, "fixture", root, options={"train_size": 20, "eval_size": 8}
    ).private_dir


def _items(private_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (private_dir / "eval.jsonl").read_text().splitlines()]


def test_prompt_is_exact_and_batched(private_dir: Path) -> None:
    items = _items(private_dir)
    replies = [
        item["answer"] if i % 2 == 0 else "    return None\n" for i, item in enumerate(items)
    ]
    engine = RecordingEngine(replies)
    result = EVAL.evaluate(
        engine, EvalContext.for_task(SPEC, "hub", private_dir)
    )  # the reference's 512 tokens
    assert len(engine.calls) == 1
    conversations, max_new_tokens = engine.calls[0]
    assert max_new_tokens == eval_options(SPEC, "hub")["max_new_tokens"] == 512
    assert conversations == [
        [{"role": "user", "content": INSTRUCTION + item["question"]}] for item in items
    ]
    assert result.num_examples == 8 and result.details["passed"] == 4 and result.score == 50.0
    assert result.details["sandbox_mode"] == "namespaces"
    assert (
        result.details["samples"][0]["passed"] is True
        and result.details["samples"][1]["passed"] is False
    )
    shown = json.dumps(result.details)  # what the agent gets back from the grading API
    for item in items:
        assert json.dumps(item["question"])[1:-1] not in shown and "assert candidate" not in shown


def test_hostile_completions_score_0_and_harm_nothing(
    private_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each completion would pass if the sandbox let it do what it tries; none may."""
    items = _items(private_dir)[:6]
    fake_home = tmp_path / "home"
    fake_home.mkdir()
    (fake_home / "canary").write_text("alive")
    monkeypatch.setenv("HOME", str(fake_home))
    real_canary = (
        Path(pwd.getpwuid(os.getuid()).pw_dir) / f".autorl-humaneval-canary-{uuid.uuid4().hex[:8]}"
    )
    real_canary.write_text("alive")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    hostile = [
        "    while True:\n        pass\n",
        "    import os\n    while True:\n        try:\n            os.fork()\n"
        "        except OSError:\n            pass\n",
        f"    import os\n    os.system('rm -rf ~')\n    os.remove({str(real_canary)!r})\n",
        f"    import socket\n    socket.create_connection(('127.0.0.1', {port}), "
        "timeout=5).close()\n",
        "    while True:\n        print('x' * 65536)\n",
        # peek at the hidden tests
        f"    assert 'check' in open({str(private_dir / 'eval.jsonl')!r}).read()\n",
    ]
    # Append each problem's own solution: the completion passes unless its attack is stopped.
    replies = [attack + item["answer"] for attack, item in zip(hostile, items, strict=True)]
    try:
        result = EVAL.evaluate(
            RecordingEngine(replies),
            EvalContext.for_task(
                SPEC,
                "fixture",
                private_dir,
                {"limit": 6, "timeout_s": 3, "workers": 2, "max_processes": 16},
            ),
        )
        assert result.score == 0.0 and result.details["passed"] == 0 and result.num_examples == 6
        assert result.details["timed_out"] == 2  # the loop and the fork bomb; the others fail fast
        assert real_canary.read_text() == "alive" and (fake_home / "canary").read_text() == "alive"
        with pytest.raises(OSError):
            listener.accept()
    finally:
        real_canary.unlink(missing_ok=True)
        listener.close()
    # The grader is unharmed: the same evaluator still scores correct answers.
    again = EVAL.evaluate(
        RecordingEngine([item["answer"] for item in items]),
        EvalContext.for_task(SPEC, "fixture", private_dir, {"limit": 5}),
    )
    assert again.score == 100.0


def test_programs_find_no_answers_on_the_graders_disk(private_dir: Path) -> None:
    """Besides the private split: every cached build of the task (other versions too) and the task's
    folder (fixture.py generates every answer) look empty to the judged programs."""
    items = _items(private_dir)[:2]
    task_dir, cache_dir = Path(EVAL.__file__).resolve().parent, private_dir.resolve().parents[2]
    (cache_dir / "v1").mkdir(exist_ok=True)  # an older version's build of the same problems
    assert {"fixture.py", "evaluate.py"} <= set(os.listdir(task_dir)) and "v1" in os.listdir(
        cache_dir
    )
    peek = (
        f"    import os\n    assert os.listdir({str(task_dir)!r}) == "
        f"os.listdir({str(cache_dir)!r}) == []\n"
    )
    result = EVAL.evaluate(
        RecordingEngine([peek + item["answer"] for item in items]),
        EvalContext.for_task(SPEC, "fixture", private_dir, {"limit": 2}),
    )
    assert result.score == 100.0, result.details


def test_no_eval_items_is_a_task_error(tmp_path: Path) -> None:
    (tmp_path / "eval.jsonl").write_text("")
    with pytest.raises(TaskError, match="no eval items"):
        EVAL.evaluate(RecordingEngine([]), EvalContext.for_task(SPEC, "fixture", tmp_path))


def test_recipe_reward_uses_the_evaluators_protocol(private_dir: Path) -> None:
    """The recipe trains on the evaluator's user turn, and its reward passes what the evaluator
    passes."""
    item = _items(private_dir)[0]
    assert PROTOCOL.format_prompt(item["question"]) == INSTRUCTION + item["question"]
    assert EVAL.build_conversation(item["question"]) == [
        {"role": "user", "content": INSTRUCTION + item["question"]}
    ]
    completions = [
        item["answer"],
        "    return None\n",
        f"```python\n{item['question']}{item['answer']}```",
        "    import os\n    os._exit(0)\n",
        f"{item['answer']}\nimport sys\nsys.exit(0)\n",
    ]
    n = len(completions)
    reward = RECIPE.PassesTests()(
        completions,
        question=[item["question"]] * n,
        test=[item["test"]] * n,
        entry_point=[item["entry_point"]] * n,
    )
    assert reward == [1.0, 0.0, 1.0, 0.0, 0.0]


def test_every_fixture_solution_passes_its_tests_and_tests_catch_a_wrong_one() -> None:
    problems = FIXTURE.fixture_problems()
    assert (
        len(problems)
        == len({p["entry_point"] for p in problems})
        == len({p["test"] for p in problems})
        > 400
    )
    for problem in problems:
        good = (
            problem["question"]
            + problem["answer"]
            + problem["test"]
            + f"\ncheck({problem['entry_point']})\n"
        )
        assert _exec_passes(good), problem["entry_point"]
        wrong = (
            problem["question"]
            + "    return None\n"
            + problem["test"]
            + f"\ncheck({problem['entry_point']})\n"
        )
        assert not _exec_passes(wrong), problem["entry_point"]


def test_fixture_split_is_disjoint_and_seeded(tmp_path: Path) -> None:
    data = build_task_data(SPEC, "fixture", tmp_path, seed=1)
    train = [
        json.loads(line) for line in (data.public_dir / "train.jsonl").read_text().splitlines()
    ]
    evals = [
        json.loads(line) for line in (data.private_dir / "eval.jsonl").read_text().splitlines()
    ]
    defaults = build_options(SPEC, "fixture")  # tasks/humaneval/options.py: 240 / 40
    assert (len(train), len(evals)) == (defaults["train_size"], defaults["eval_size"]) == (240, 40)
    assert not {r["entry_point"] for r in train} & {r["entry_point"] for r in evals}
    assert (
        set(train[0]) == set(evals[0]) == {"question", "answer", "task_id", "entry_point", "test"}
    )
    assert build_task_data(SPEC, "fixture", tmp_path, seed=2).digest != data.digest
    with pytest.raises(TaskError, match="434 problems"):
        build_task_data(SPEC, "fixture", tmp_path, options={"train_size": 430, "eval_size": 40})


def _write_hub(root: Path, rows: list[dict[str, str]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "openai_humaneval").mkdir(parents=True)
    (root / "README.md").write_text(HUB_README, encoding="utf-8")
    table = pa.table(
        {
            key: [r[key] for r in rows]
            for key in ("task_id", "prompt", "canonical_solution", "test", "entry_point")
        }
    )
    pq.write_table(table, root / "openai_humaneval" / "test-00000-of-00001.parquet")


def test_hub_build_from_local_standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    rows = [
        {
            "task_id": f"HumanEval/{i}",
            "prompt": f'def f{i}(x):\n    """Return x + {i}."""\n',
            "canonical_solution": f"    return x + {i}\n",
            "test": f"\n\ndef check(c):\n    assert c(0) == {i}\n",
            "entry_point": f"f{i}",
        }
        for i in range(6)
    ]
    _write_hub(tmp_path / "hub", rows)

    data = build_task_data(
        SPEC, "hub", tmp_path / "cache", options={"hub_path": str(tmp_path / "hub"), "split_at": 4}
    )

    read = lambda p: [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines()]  # noqa: E731
    expected = [
        {
            "question": r["prompt"],
            "answer": r["canonical_solution"],
            "task_id": r["task_id"],
            "entry_point": r["entry_point"],
            "test": r["test"],
        }
        for r in rows
    ]
    assert data.source == "hub"
    assert read(data.public_dir / "train.jsonl") == expected[:4]
    assert read(data.private_dir / "eval.jsonl") == expected[4:]
    with pytest.raises(TaskError, match="need more than split_at=82"):
        build_task_data(
            SPEC, "hub", tmp_path / "cache", options={"hub_path": str(tmp_path / "hub")}
        )


def test_hub_failure_raises_and_never_falls_back(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="hub"):
        build_task_data(SPEC, "hub", tmp_path / "cache", options={"hub_path": str(tmp_path)})
    assert not list((tmp_path / "cache" / "humaneval" / f"v{SPEC.version}").glob("fixture-*"))
