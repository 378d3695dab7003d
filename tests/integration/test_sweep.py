"""Whole sweeps through the CLI on a local Ray: results, records, privacy, resume and
interruption."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from autorl.config import compose
from autorl.tasks import build_task_data, get_task
from tests.integration.conftest import (
    assert_clean_integrity,
    query,
    run_sweep_cli,
    sweep_command,
    sweep_env,
)

pytestmark = pytest.mark.integration
CELL = "gsm8k.scripted.none.tiny.s0"


def _rows(sweep_dir: Path) -> list[dict[str, str]]:
    with open(sweep_dir / "results.csv") as handle:
        return list(csv.DictReader(handle))


def _sweep_dir(out_dir: Path) -> Path:
    (sweep_dir,) = [p for p in out_dir.iterdir() if p.is_dir()]
    return sweep_dir


def test_default_sweep_trains_scores_records_and_resumes(
    tmp_path: Path, ray_tmp: Path, cache_dir: Path
) -> None:
    first = run_sweep_cli(tmp_path / "out", ray_tmp, cache_dir)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    sweep_dir = _sweep_dir(tmp_path / "out")
    (row,) = _rows(sweep_dir)
    assert (
        row["cell_id"] == CELL and row["status"] == "completed" and row["task_source"] == "fixture"
    )
    assert row["baseline"] != "" and float(row["best_score"]) > float(row["baseline"])
    assert float(row["improvement"]) > 0
    assert int(row["submissions"]) >= 2 and int(row["valid_submissions"]) >= 2
    assert row["exit_class"] == "exited" and float(row["duration_s"]) > 0
    assert_clean_integrity(row)

    db = sweep_dir / "records.sqlite"
    subs = query(
        db,
        "SELECT submission_id, status, score, code_revision, weights_hash FROM submissions WHERE "
        "cell_id = ?",
        CELL,
    )
    assert [s[0] for s in subs] == list(range(1, len(subs) + 1))
    assert all(s[1] == "scored" and s[2] is not None and s[3] and s[4] for s in subs)
    revisions = query(db, "SELECT revision, diff FROM code_revisions WHERE cell_id = ?", CELL)
    assert {s[3] for s in subs} <= {r[0] for r in revisions}
    assert any("recipe.json" in r[1] for r in revisions)
    assert query(db, "SELECT COUNT(*) FROM baselines")[0][0] == 1

    cell_dir = sweep_dir / "cells" / CELL
    assert "submitted output/v2" in (cell_dir / "agent.log").read_text()
    workspace = cell_dir / "workspace"
    meta = json.loads((workspace / "run_meta.json").read_text())
    assert meta["start_time"] and meta["end_time"] and meta["last_submit_time"]
    fixture_options = compose([]).task.build["fixture"]
    eval_data = build_task_data(
        get_task("gsm8k"), "fixture", cache_dir / "tasks", options=fixture_options
    )
    eval_file = eval_data.private_dir / "eval.jsonl"
    texts = "\n".join(
        p.read_text(errors="ignore")
        for p in workspace.rglob("*")
        if p.is_file() and "models" not in p.parts
    )
    for line in eval_file.read_text().splitlines()[:50]:
        assert json.loads(line)["question"] not in texts

    again = run_sweep_cli(tmp_path / "out", ray_tmp, cache_dir)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "already completed, skipped" in again.stdout
    assert _rows(sweep_dir) == [row]
    assert query(db, "SELECT COUNT(*) FROM submissions")[0][0] == len(subs)


def test_interrupted_sweep_resumes_without_duplicates(
    tmp_path: Path, ray_tmp: Path, cache_dir: Path, external_ray_head: str
) -> None:
    out_dir = tmp_path / "out"
    proc = subprocess.Popen(
        sweep_command(out_dir, ray_tmp, "seed=1"),
        env=sweep_env(cache_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        logs = list(out_dir.rglob("agent.log"))
        if logs and "training rows" in logs[0].read_text():
            break
        time.sleep(1)
    assert proc.poll() is None, proc.communicate()[0][-3000:]
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=180)
    assert proc.returncode == 130, output[-3000:]
    sweep_dir = _sweep_dir(out_dir)
    (row,) = _rows(sweep_dir)
    assert row["status"] == "cancelled"

    # The resumed run joins a cluster started with `ray start` (cluster.address), so the remaining
    # cell runs on a cluster this sweep did not start.
    resumed = run_sweep_cli(
        out_dir, ray_tmp, cache_dir, "seed=1", f"cluster.address={external_ray_head}"
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    (row,) = _rows(sweep_dir)
    assert row["status"] == "completed" and float(row["improvement"]) > 0
    ids = [
        r[0]
        for r in query(
            sweep_dir / "records.sqlite",
            "SELECT submission_id FROM submissions ORDER BY submission_id",
        )
    ]
    assert ids == list(range(1, len(ids) + 1)) and len(ids) == int(row["submissions"])
