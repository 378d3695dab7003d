"""Integrity checks in a real sealed cell (issue #12): a substituted model and planted eval items
are caught.

One sweep (``python -m autorl.sweep`` in a subprocess, its own local Ray) runs
``tests/helpers/integrity_agent.py`` with ``agent=command`` on the GSM8K fixture. The agent submits
a copy of the base, then a model of another architecture, and keeps five eval questions (planted by
this test in its HOME) in its code folder. The results row, the record store, the run report and
the sweep report must show the ``model_mismatch`` flag, a best that ignores that submission, and
the contamination flag with exactly the five planted items.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autorl.config import compose
from autorl.models.tiny import ensure_tiny_model
from autorl.tasks import build_task_data, get_task
from tests.integration.conftest import query, sweep_env

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "tests" / "helpers" / "integrity_agent.py"
CELL = "gsm8k.command.none.tiny.s0"
PLANTED = 5


def test_substituted_model_and_planted_eval_items_are_flagged(
    tmp_path: Path, ray_tmp: Path, cache_dir: Path
) -> None:
    ensure_tiny_model(cache_dir / "models")
    data = build_task_data(
        get_task("gsm8k"), "fixture", cache_dir / "tasks", options=compose([]).task.build["fixture"]
    )
    eval_items = [
        json.loads(line)
        for line in (data.private_dir / "eval.jsonl").read_text().splitlines()
        if line.strip()
    ]
    planted = tmp_path / "planted.txt"
    planted.write_text(
        "".join(f"Q: {item['question']}\nA: {item['answer']}\n\n" for item in eval_items[:PLANTED])
    )
    out_dir = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "autorl.sweep",
        f"out_dir={out_dir}",
        "sweep_id=integrity",
        "progress=false",
        "cluster.include_dashboard=false",
        "cluster.num_cpus=2",
        f"cluster.temp_dir={ray_tmp}",
        "agent=command",
        f"agent.files=[{AGENT},{planted}]",
        "agent.command=[python3,-I,'{home}/integrity_agent.py']",
        "budget.seconds=240",
        "budget.kill_grace_s=5",
    ]
    result = subprocess.run(
        command, env=sweep_env(cache_dir), capture_output=True, text=True, timeout=900
    )
    sweep_dir = out_dir / "integrity"
    cell_dir = sweep_dir / "cells" / CELL
    log = (
        (cell_dir / "agent.log").read_text(errors="replace")
        if (cell_dir / "agent.log").exists()
        else ""
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:] + log[-3000:]
    answers = json.loads((cell_dir / "workspace" / "output" / "integrity_agent.json").read_text())

    # The agent learns at once that its substitute is flagged, and that it is not its best.
    assert (
        answers["copy"]["status"] == "copy_of_base"
        and answers["copy"]["details"]["weight_distance"] == 0.0
    )
    assert answers["other"]["details"]["flag"] == "model_mismatch", answers["other"]
    assert answers["other"]["best"]["submission_id"] == 1

    subs = query(
        sweep_dir / "records.sqlite",
        "SELECT submission_id, status, flags, weight_distance FROM submissions WHERE cell_id = ? "
        "ORDER BY submission_id",
        CELL,
    )
    assert [(s[0], s[2]) for s in subs] == [(1, None), (2, "model_mismatch")]
    assert subs[0][3] == 0.0  # the copy

    with open(sweep_dir / "results.csv") as handle:
        (row,) = list(csv.DictReader(handle))
    assert row["status"] == "completed" and row["sandbox"] == "bwrap"
    assert row["flagged_submissions"] == "1" and float(row["best_score"]) == float(row["baseline"])
    assert row["weight_distance"] == "0.0"  # the best is the copy
    assert row["integrity_flags"] == "contamination"
    (details,) = query(
        sweep_dir / "records.sqlite", "SELECT integrity_json FROM cells WHERE cell_id = ?", CELL
    )[0]
    contamination = json.loads(details)["contamination"]
    assert contamination["flagged"] and contamination["items_hit"] == PLANTED, contamination
    assert float(row["contamination"]) == pytest.approx(contamination["overlap"], abs=1e-4)
    assert {Path(e["file"]).name for e in contamination["evidence"]} <= {"notes.txt", "planted.txt"}

    run_report = json.loads((cell_dir / "run_report.json").read_text())
    assert (
        "model_mismatch@2" in run_report["integrity"]["flags"]
        and "contamination" in run_report["integrity"]["flags"]
    )
    page = (sweep_dir / "report" / "index.html").read_text()
    assert (
        'id="integrity"' in page
        and "model_mismatch@2" in page
        and f"{PLANTED}/{contamination['items_total']} items" in page
    )
    print(f"integrity sweep: {json.dumps(contamination)[:400]}", file=sys.stderr)
