"""A sweep folder written by the previous main (b0f395e) resumes under this autorl.

The fixture (``tests/fixtures/sweep_b0f395e``, see its README) is the folder of
``task=gsm8k seed=0,1`` with the overrides below, interrupted after seed 0 completed: seed 1 is
``cancelled``. Running the same command again must migrate the store, skip seed 0, run seed 1 and
write results.csv and the report.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autorl.records.migrations import SCHEMA_VERSION
from tests.integration.conftest import query, sweep_env

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parents[1] / "fixtures" / "sweep_b0f395e" / "default-9f036f8b"
COMPLETED, CANCELLED = "gsm8k.scripted.none.tiny.s0", "gsm8k.scripted.none.tiny.s1"
# Exactly the fixture's overrides that are not presentation keys: they make its sweep id.
SAME_COMMAND = [
    "task=gsm8k", "seed=0,1", "budget.seconds=60", "agent.sft.steps=5", "agent.grpo.steps=1",
    "task.build.fixture.train_size=40", "task.build.fixture.eval_size=8",
]
V1_CELL_COLUMNS = (
    "sweep_id, cell_id, agent, driver, task, task_version, model, seed, budget_s, status, baseline, best_score, "
    "improvement, submissions, valid_submissions, duration_s, tokens_in, tokens_out, cost_usd, exit_class, exit_code, "
    "working_time_s, task_source, error, attempts, config_json, started_at, finished_at"
)


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as handle:
        return {row["cell_id"]: row for row in csv.DictReader(handle)}


def test_the_previous_mains_sweep_resumes(tmp_path: Path, ray_tmp: Path, cache_dir: Path) -> None:
    out_dir = tmp_path / "out"
    sweep_dir = out_dir / FIXTURE.name
    shutil.copytree(FIXTURE, sweep_dir)
    db = sweep_dir / "records.sqlite"
    completed_before = query(db, f"SELECT {V1_CELL_COLUMNS} FROM cells WHERE cell_id = ?", COMPLETED)
    submissions_before = query(db, "SELECT * FROM submissions WHERE cell_id = ? ORDER BY submission_id", COMPLETED)
    assert query(db, "SELECT version FROM schema_version") == [(1,)]

    command = [
        sys.executable, "-m", "autorl.sweep", *SAME_COMMAND, f"out_dir={out_dir}", "progress=false",
        "cluster.include_dashboard=false", "cluster.num_cpus=2", f"cluster.temp_dir={ray_tmp}",
    ]
    run = subprocess.run(command, env=sweep_env(cache_dir), capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert [p.name for p in out_dir.iterdir()] == [FIXTURE.name]  # the same sweep id: no new folder
    assert f"1 cell(s) already completed, skipped: {COMPLETED}" in run.stdout

    assert query(db, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    # The completed cell was not re-run: its row and submissions are as the old main left them,
    # no autorl registered it again, and it has no workspace or agent log (the report writes
    # cells/<id>/metrics.json and run_report.* for every cell; only a run makes these two).
    assert query(db, f"SELECT {V1_CELL_COLUMNS} FROM cells WHERE cell_id = ?", COMPLETED) == completed_before
    # Every old column as it was; the columns added since (flags, weight_distance) are empty: never
    # checked; attempt: the cell's only attempt.
    after = query(db, "SELECT * FROM submissions WHERE cell_id = ? ORDER BY submission_id", COMPLETED)
    width = len(submissions_before[0])
    assert [row[:width] for row in after] == submissions_before
    assert {row[width:width + 3] for row in after} == {(None, None, 1)}
    # test_score (schema v7): a test-feedback cell's scores are its test scores
    assert {score == test for score, test in query(
        db, "SELECT score, test_score FROM submissions WHERE cell_id = ?", COMPLETED)} == {True}
    assert not (sweep_dir / "cells" / COMPLETED / "workspace").exists()
    assert not (sweep_dir / "cells" / COMPLETED / "agent.log").exists()
    assert query(db, "SELECT autorl_version FROM cells WHERE cell_id = ?", COMPLETED) == [(None,)]
    # The cancelled one ran under this autorl.
    ((status, version, submissions),) = query(
        db, "SELECT status, autorl_version, submissions FROM cells WHERE cell_id = ?", CANCELLED
    )
    assert status == "completed" and version and submissions >= 1
    # Its old (cancelled) attempt is kept under its number next to the new one, which alone counts.
    assert [a[1] for a in query(db, "SELECT attempt, status FROM cell_attempts WHERE cell_id = ? ORDER BY attempt",
                                CANCELLED)] == ["cancelled", "completed"]
    assert (sweep_dir / "cells" / CANCELLED / "agent.log").is_file()

    rows = _rows(sweep_dir / "results.csv")
    assert set(rows) == {COMPLETED, CANCELLED}
    old = _rows(FIXTURE / "results.csv")[COMPLETED]
    assert {k: rows[COMPLETED][k] for k in old} == old
    # Columns added since: the old cell ran before sealing (no sandbox recorded); the resumed one sealed.
    assert (rows[COMPLETED]["sandbox"], rows[COMPLETED]["resumes"]) == ("", "0")
    assert rows[CANCELLED]["status"] == "completed" and rows[CANCELLED]["sandbox"] == "bwrap"
    html = (sweep_dir / "report" / "index.html").read_text()
    assert COMPLETED in html and CANCELLED in html
