"""The humaneval judge never downgrades silently from namespaces to rlimits.

Namespaces are made unavailable the way a node without util-linux's ``unshare`` lacks them: its
``PATH`` holds no ``unshare`` (the sandbox looks it up there). Then the sweep's preflight stops a
sweep with humaneval before any cell starts, naming what is missing and the opt-in, and the
evaluator refuses to judge; with ``task.eval.<source>.sandbox_mode=rlimits`` it judges without
them and ``results.csv`` says ``judge_sandbox=rlimits``; normally it says ``namespaces``.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agent_kit.sandbox import detect_mode, namespaces_problem
from autorl.config import plan_sweep
from autorl.errors import PrerequisiteError
from autorl.records.results import write_results_csv
from autorl.records.store import RecordStore
from autorl.records.types import CellRecord, SubmissionRecord
from autorl.seal.preflight import judge_sandbox_problems
from autorl.tasks import EvalContext, build_task_data, get_task, load_task_module

TASK = get_task("humaneval")
EVAL: ModuleType = load_task_module(TASK, "evaluate.py")
NEEDS = "the humaneval judge needs unprivileged user namespaces"


def _clear_probes() -> None:
    namespaces_problem.cache_clear()
    detect_mode.cache_clear()


@pytest.fixture()
def no_namespaces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process sees a node without ``unshare`` until the test ends."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    _clear_probes()
    yield
    monkeypatch.undo()
    _clear_probes()


@pytest.fixture(scope="module")
def private_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("humaneval")
    return build_task_data(
        TASK, "fixture", root, options={"train_size": 10, "eval_size": 4}
    ).private_dir


class AnswerEngine:
    """Answers each problem with its canonical solution (the fixture's ``answer``)."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = answers

    def generate_chat(
        self,
        conversations: list[list[dict[str, str]]],
        *,
        max_new_tokens: int,
        stop: list[str] | None = None,
    ) -> list[str]:
        return self.answers[: len(conversations)]

    def generate_text(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str] | None = None
    ) -> list[str]:
        raise AssertionError("humaneval uses the chat interface")


def _engine(private_dir: Path) -> Any:
    items = [
        json.loads(line)
        for line in (private_dir / "eval.jsonl").read_text().splitlines()
        if line.strip()
    ]
    return AnswerEngine([item["answer"] for item in items])


def _judge_sandbox_row(tmp_path: Path, details: dict[str, Any]) -> str:
    """``judge_sandbox`` of a results.csv row whose cell's one submission has these grader details,
    stored as the grading service stores them (``num_examples`` plus the evaluator's details)."""
    with RecordStore(tmp_path / "records.sqlite") as store:
        store.upsert_cell(
            CellRecord("sw", "c1", "scripted", "none", "humaneval", 1, "tiny", 0, 600, "completed")
        )
        store.upsert_submission(
            SubmissionRecord(
                "c1",
                1,
                "output/v1",
                "scored",
                score=100.0,
                details_json=json.dumps({"num_examples": 4, **details}),
            )
        )
        write_results_csv(store, "sw", tmp_path / "results.csv")
    with (tmp_path / "results.csv").open(newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    return row["judge_sandbox"]


def test_preflight_names_what_is_missing_and_the_opt_in(
    no_namespaces: None, tmp_path: Path
) -> None:
    (problem,) = judge_sandbox_problems(
        plan_sweep(["task=humaneval", "seed=0,1", f"out_dir={tmp_path}"]).cells
    )
    assert problem.startswith(NEEDS) and "to hide the private split" in problem
    assert "`unshare` (util-linux) not found on PATH" in problem
    assert "task.eval.fixture.sandbox_mode=rlimits" in problem
    opted_in = plan_sweep(
        ["task=humaneval", "task.eval.fixture.sandbox_mode=rlimits", f"out_dir={tmp_path}"]
    )
    assert judge_sandbox_problems(opted_in.cells) == []
    assert (
        judge_sandbox_problems(plan_sweep(["task=gsm8k", f"out_dir={tmp_path}"]).cells) == []
    )  # no judge sandbox


def test_sweep_stops_with_exit_2_before_any_cell(
    no_namespaces: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from autorl.sweep import main

    assert main(["task=humaneval", f"out_dir={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert NEEDS in err and "task.eval.fixture.sandbox_mode=rlimits" in err
    assert not (tmp_path / "out").exists()  # nothing started


def test_preflight_passes_where_namespaces_work(tmp_path: Path) -> None:
    _clear_probes()
    assert judge_sandbox_problems(plan_sweep(["task=humaneval", f"out_dir={tmp_path}"]).cells) == []


def test_judge_refuses_rlimits_unless_told(
    no_namespaces: None, private_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(PrerequisiteError, match=NEEDS):
        EVAL.evaluate(_engine(private_dir), EvalContext.for_task(TASK, "fixture", private_dir))
    with pytest.raises(PrerequisiteError, match=NEEDS):
        EVAL.evaluate(
            _engine(private_dir),
            EvalContext.for_task(TASK, "fixture", private_dir, {"sandbox_mode": "namespaces"}),
        )
    if os.geteuid() == 0:
        # In rlimits mode root's programs run as nobody, who cannot execute an interpreter under
        # /root; the system one runs the judge's stdlib-only programs as well.
        monkeypatch.setattr(sys, "executable", "/usr/bin/python3")
    result = EVAL.evaluate(
        _engine(private_dir),
        EvalContext.for_task(TASK, "fixture", private_dir, {"sandbox_mode": "rlimits"}),
    )
    assert result.details["sandbox_mode"] == "rlimits" and result.score == 100.0
    assert _judge_sandbox_row(tmp_path, result.details) == "rlimits"


def test_row_says_namespaces_normally(private_dir: Path, tmp_path: Path) -> None:
    _clear_probes()
    result = EVAL.evaluate(_engine(private_dir), EvalContext.for_task(TASK, "fixture", private_dir))
    assert result.details["sandbox_mode"] == "namespaces" and result.score == 100.0
    assert _judge_sandbox_row(tmp_path, result.details) == "namespaces"


def test_row_is_empty_for_a_task_without_a_judge_sandbox(tmp_path: Path) -> None:
    assert _judge_sandbox_row(tmp_path, {"correct": 3, "samples": []}) == ""


def test_an_unknown_mode_is_refused(private_dir: Path) -> None:
    from autorl.errors import TaskError

    with pytest.raises(TaskError, match="sandbox_mode must be null, namespaces or rlimits"):
        EVAL.evaluate(
            _engine(private_dir),
            EvalContext.for_task(TASK, "fixture", private_dir, {"sandbox_mode": "x"}),
        )
