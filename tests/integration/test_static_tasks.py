"""humaneval and alpacaeval end to end: one sweep through the CLI, the scripted agent, real scoring.

The tiny model learns little on these tasks in a few steps, so the test asserts what must hold for
every cell: it completed, it has a baseline, at least one submission was scored, and the scoring
ran the real machinery (the code sandbox, the local judge server with its on-disk answer cache).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.integration.conftest import assert_clean_integrity, query, run_sweep_cli

pytestmark = pytest.mark.integration

CELLS = ("alpacaeval.scripted.none.tiny.s0", "humaneval.scripted.none.tiny.s0")
SMALL = [
    "task=humaneval,alpacaeval",
    "agent.sft.max_steps=10",
    "agent.sft.per_device_train_batch_size=8",
    "agent.grpo.max_steps=1",
    "agent.grpo.per_device_train_batch_size=4",
    "agent.grpo.num_generations=2",
    "task.build.fixture.train_size=120",
    "task.build.fixture.eval_size=12",
    # One grader plus two cells: with 2 logical CPUs the two cells' bundles can take both and
    # leave the grader unschedulable.
    "cluster.num_cpus=3",
]


def test_humaneval_and_alpacaeval_cells_score(
    tmp_path: Path, ray_tmp: Path, cache_dir: Path
) -> None:
    done = run_sweep_cli(tmp_path / "out", ray_tmp, cache_dir, *SMALL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sweep_dir,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    with open(sweep_dir / "results.csv") as handle:
        rows = {row["cell_id"]: row for row in csv.DictReader(handle)}
    assert sorted(rows) == sorted(CELLS)
    db = sweep_dir / "records.sqlite"
    for cell_id, row in rows.items():
        assert row["status"] == "completed" and row["task_source"] == "fixture", row
        assert row["baseline"] != "" and 0.0 <= float(row["baseline"]) <= 100.0
        assert_clean_integrity(row)
        scored = query(
            db,
            "SELECT score, details_json FROM submissions WHERE cell_id = ? AND status = 'scored'",
            cell_id,
        )
        assert scored, (
            f"{cell_id}: no scored submission; agent.log:\n"
            + (sweep_dir / "cells" / cell_id / "agent.log").read_text()[-3000:]
        )
        assert all(0.0 <= float(score) <= 100.0 for score, _ in scored)  # type: ignore[arg-type]

    (humaneval_details, *_) = [
        json.loads(str(d))
        for _, d in query(
            db,
            "SELECT score, details_json FROM submissions WHERE cell_id = ? AND status = 'scored'",
            CELLS[1],
        )
    ]
    assert (
        humaneval_details["sandbox_mode"] == "namespaces"
        and humaneval_details["num_examples"] == 12
    )
    (alpaca_details, *_) = [
        json.loads(str(d))
        for _, d in query(
            db,
            "SELECT score, details_json FROM submissions WHERE cell_id = ? AND status = 'scored'",
            CELLS[0],
        )
    ]
    assert (
        alpaca_details["judge"]["name"] == "local-rules"
        and alpaca_details["lc_glm"] == "length_controlled_minimal"
    )
    judge_answers = list((cache_dir / "eval" / "alpacaeval" / "judge").rglob("*.json"))
    assert len(judge_answers) >= 12, "the judge's answers are cached under the grader's cache dir"
