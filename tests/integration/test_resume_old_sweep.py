"""A sweep folder written by an earlier autorl (its record store at schema version 1) resumes.

The fixture (``tests/fixtures/sweep_b0f395e``, see its README) is the folder of
``task=gsm8k seed=0,1`` with the overrides below, interrupted after seed 0 completed: seed 1 is
``cancelled``. Running the same command again must migrate the store, run seed 1 and write
results.csv and the report. Seed 0 completed under GSM8K's task version 1, and the task is at a
later version now: it runs again as a new attempt, its old attempt kept in the store as it was (a
completed cell of the current version is skipped: ``tests/integration/test_sweep.py``).
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autorl.records.migrations import SCHEMA_VERSION
from autorl.tasks import get_task
from tests.integration.conftest import query, sweep_env

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parents[1] / "fixtures" / "sweep_b0f395e" / "default-9f036f8b"
COMPLETED, CANCELLED = "gsm8k.scripted.none.tiny.s0", "gsm8k.scripted.none.tiny.s1"
VERSION = get_task("gsm8k").version  # the fixture's cells ran under version 1
# The fixture's overrides that are not presentation keys, with the scripted agent's keys under
# their current (TRL's) names: renamed, they no longer make the fixture's sweep id, which the
# command therefore names.
SAME_COMMAND = [
    "task=gsm8k",
    "seed=0,1",
    "budget.seconds=60",
    "agent.sft.max_steps=5",
    "agent.grpo.max_steps=1",
    "task.build.fixture.train_size=40",
    "task.build.fixture.eval_size=8",
    f"sweep_id={FIXTURE.name}",
]


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as handle:
        return {row["cell_id"]: row for row in csv.DictReader(handle)}


def test_the_previous_mains_sweep_resumes(tmp_path: Path, ray_tmp: Path, cache_dir: Path) -> None:
    out_dir = tmp_path / "out"
    sweep_dir = out_dir / FIXTURE.name
    shutil.copytree(FIXTURE, sweep_dir)
    db = sweep_dir / "records.sqlite"
    submissions_before = query(
        db, "SELECT * FROM submissions WHERE cell_id = ? ORDER BY submission_id", COMPLETED
    )
    assert query(db, "SELECT version FROM schema_version") == [(1,)]

    command = [
        sys.executable,
        "-m",
        "autorl.sweep",
        *SAME_COMMAND,
        f"out_dir={out_dir}",
        "progress=false",
        "cluster.include_dashboard=false",
        "cluster.num_cpus=2",
        f"cluster.temp_dir={ray_tmp}",
    ]
    run = subprocess.run(
        command, env=sweep_env(cache_dir), capture_output=True, text=True, timeout=900, check=False
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert [p.name for p in out_dir.iterdir()] == [FIXTURE.name]  # the same sweep id: no new folder
    assert "1 completed cell(s) ran an older task version or model build and run again" in (
        run.stdout
    )
    assert f"{COMPLETED} (task v1 -> v{VERSION})" in run.stdout

    assert query(db, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    # The stale cell ran again under this autorl and the current task version, as attempt 2 ...
    ((status, task_version, attempts, version),) = query(
        db,
        "SELECT status, task_version, attempts, autorl_version FROM cells WHERE cell_id = ?",
        COMPLETED,
    )
    assert (status, task_version, attempts) == ("completed", VERSION, 2) and version
    assert (sweep_dir / "cells" / COMPLETED / "agent.log").is_file()
    # ... and its first attempt's submissions are as the old main left them, under attempt 1. Every
    # old column as it was; the columns added since (flags, weight_distance) are empty: never
    # checked.
    after = query(
        db, "SELECT * FROM submissions WHERE cell_id = ? ORDER BY submission_id", COMPLETED
    )
    width = len(submissions_before[0])
    first = [row for row in after if row[width + 2] == 1]
    assert [row[:width] for row in first] == submissions_before
    assert {row[width : width + 2] for row in first} == {(None, None)}
    assert any(row[width + 2] == 2 for row in after)
    # test_score (schema v7): a test-feedback cell's scores are its test scores
    assert {
        score == test
        for score, test in query(
            db, "SELECT score, test_score FROM submissions WHERE cell_id = ?", COMPLETED
        )
    } == {True}
    # The cancelled one ran under this autorl.
    ((status, version, submissions),) = query(
        db, "SELECT status, autorl_version, submissions FROM cells WHERE cell_id = ?", CANCELLED
    )
    assert status == "completed" and version and submissions >= 1
    # Its old (cancelled) attempt is kept under its number next to the new one, which alone counts.
    assert [
        a[1]
        for a in query(
            db,
            "SELECT attempt, status FROM cell_attempts WHERE cell_id = ? ORDER BY attempt",
            CANCELLED,
        )
    ] == ["cancelled", "completed"]
    assert (sweep_dir / "cells" / CANCELLED / "agent.log").is_file()

    rows = _rows(sweep_dir / "results.csv")
    assert set(rows) == {COMPLETED, CANCELLED}
    assert {rows[cell]["task_version"] for cell in rows} == {str(VERSION)}
    assert {rows[cell]["sandbox"] for cell in rows} == {
        "bwrap"
    }  # both ran sealed, under this autorl
    html = (sweep_dir / "report" / "index.html").read_text()
    assert COMPLETED in html and CANCELLED in html
