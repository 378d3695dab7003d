"""A seventh task is one folder: a plugin path holding only ``tasks/wordcount/`` (manifest, typed
options, builder with its tiny fixture, evaluator, description) is listed, checked and swept with
nothing else changed: no file under ``conf/``, none in the repository."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from autorl.plugins import PLUGIN_PATH_ENV
from tests.integration.conftest import query, sweep_command, sweep_env

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TASK_ID = "wordcount"

FILES = {
    "task.yaml": """\
id: wordcount
name: Word count
version: 1
level: L1
kind: static
grader: rule
description: Count the words of a short phrase; score is exact-match accuracy of the number.
sources:
  fixture: build:build_fixture     # generated phrases (the fixture below)
run:
  source: fixture
  budget_s: 60                     # the agent's default budget in seconds
entry_points:
  evaluate: evaluate:evaluate
  options: options:OPTIONS
""",
    "__init__.py": '"""wordcount: a task added from a plugin folder."""\n',
    "options.py": '''\
"""The options of wordcount's builder and evaluator."""

from dataclasses import dataclass

from autorl.task_options import TaskOptions, option


@dataclass
class FixtureBuild:
    """``build.py`` ``build_fixture``."""

    train_size: int = option(12, "generated phrases in public/train.jsonl")
    eval_size: int = option(4, "generated phrases in private/eval.jsonl")


@dataclass
class Eval:
    """``evaluate.py``'s options."""

    max_new_tokens: int = option(4, "generation cap per answer")
    limit: int | None = option(None, "score only the first N phrases; null: all")


OPTIONS = TaskOptions(build={"fixture": FixtureBuild}, eval={"fixture": Eval})
''',
    "build.py": '''\
"""The fixture: phrases of one to six words and their word counts."""

import json
import random
from pathlib import Path

from .options import FixtureBuild

WORDS = ("red", "blue", "cat", "dog", "runs", "fast", "slow", "tree", "sky", "sea")


def _rows(rng: random.Random, count: int) -> list[dict[str, str]]:
    rows = []
    for _ in range(count):
        phrase = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
        question = f"How many words are in: {phrase}?"
        rows.append({"question": question, "answer": str(len(phrase.split()))})
    return rows


def build_fixture(public: Path, private: Path, *, seed: int, options: FixtureBuild) -> None:
    """Write ``train.jsonl`` (public) and ``eval.jsonl`` (private)."""
    rng = random.Random(seed)
    splits = {public / "train.jsonl": options.train_size, private / "eval.jsonl": options.eval_size}
    for path, count in splits.items():
        lines = [json.dumps(row) + "\\n" for row in _rows(rng, count)]
        path.write_text("".join(lines), encoding="utf-8")
''',
    "evaluate.py": '''\
"""Greedy answers, exact match of the number."""

import json

from autorl.tasks import EvalContext, EvalResult

from .options import Eval


def evaluate(engine, ctx: EvalContext) -> EvalResult:
    """Score the share of phrases whose word count the model answers exactly."""
    options = ctx.options_as(Eval)
    lines = (ctx.private_dir / "eval.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines][: options.limit]
    chats = [[{"role": "user", "content": row["question"]}] for row in rows]
    outputs = engine.generate_chat(chats, max_new_tokens=options.max_new_tokens)
    pairs = zip(outputs, rows, strict=True)
    correct = sum((out or "").strip() == row["answer"] for out, row in pairs)
    return EvalResult(100.0 * correct / len(rows), len(rows), {"correct": correct})
''',
    "description.md": "# Word count\n\n"
    + "Answer with the number of words in the phrase, digits only. " * 6
    + "\n",
}


def make_task(plugin: Path) -> Path:
    """The plugin folder: ``tasks/wordcount/`` and nothing else."""
    folder = plugin / "tasks" / TASK_ID
    folder.mkdir(parents=True)
    for name, text in FILES.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def test_a_seventh_task_is_one_folder_listed_checked_and_swept(
    tmp_path: Path, ray_tmp: Path, cache_dir: Path
) -> None:
    plugin = tmp_path / "plugin"
    make_task(plugin)
    assert [p.name for p in plugin.iterdir()] == ["tasks"] and not plugin.resolve().is_relative_to(
        ROOT
    )
    env = sweep_env(cache_dir) | {PLUGIN_PATH_ENV: str(plugin)}

    listed = subprocess.run(
        [sys.executable, "-m", "autorl.ls", "tasks"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert listed.returncode == 0, listed.stderr
    line = next(line for line in listed.stdout.splitlines() if line.startswith(TASK_ID))
    assert "[L1] Count the words of a short phrase" in line and line.endswith(
        f"(plugin {plugin})"
    ), listed.stdout

    # Its typed options are checked like a built-in task's, before anything starts.
    refused = subprocess.run(
        sweep_command(
            tmp_path / "dry",
            ray_tmp,
            f"task={TASK_ID}",
            "task.build.fixture.eval_size=four",
            "dry_run=true",
        ),
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "task.build.fixture.eval_size must be an integer (int), got 'four'" in refused.stderr, (
        refused.stderr
    )
    assert "generated phrases in private/eval.jsonl" in refused.stderr, refused.stderr

    # An agent that does nothing: the cell still builds the folder's data and scores the base model.
    command = [
        sys.executable,
        "-m",
        "autorl.sweep",
        f"task={TASK_ID}",
        "agent=command",
        "agent.command=[sh,-c,'exit 0']",
        "budget.seconds=30",
        "task.eval.fixture.limit=3",
        f"out_dir={tmp_path / 'out'}",
        "progress=false",
        "cluster.include_dashboard=false",
        "cluster.num_cpus=2",
        f"cluster.temp_dir={ray_tmp}",
    ]
    done = subprocess.run(
        command, check=False, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sweep_dir,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    with open(sweep_dir / "results.csv") as handle:
        (row,) = list(csv.DictReader(handle))
    assert (
        row["task"] == TASK_ID and row["status"] == "completed" and row["task_source"] == "fixture"
    ), row
    assert row["baseline"] != "", row  # the base model scored by the folder's own evaluator
    (built,) = [
        p.parent for p in (cache_dir / "tasks" / TASK_ID / "v1").glob("fixture-seed0-*/private")
    ]
    assert (
        len((built / "private" / "eval.jsonl").read_text().splitlines()) == 4
    )  # the folder's default eval_size
    (cell_id,) = query(sweep_dir / "records.sqlite", "SELECT cell_id FROM cells")
    assert (sweep_dir / "cells" / str(cell_id[0]) / "home").is_dir()
    assert not (ROOT / "tasks" / TASK_ID).exists() and not list(
        (ROOT / "conf").rglob(f"{TASK_ID}*")
    )
