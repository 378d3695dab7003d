"""agent.reprompt on a real sealed cell: an agent that stops early is resumed, and each resume is
recorded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import query, sweep_env


def test_agent_that_exits_early_is_resumed_up_to_max_and_recorded(
    tmp_path: Path, ray_tmp: Path, cache_dir: Path
) -> None:
    out_dir = tmp_path / "out"
    # Each run appends a line to a file in the agent's HOME (kept across resumes) and exits at once.
    command = ["sh", "-c", "echo run >> {home}/runs; exit 0"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "autorl.sweep",
            "agent=command",
            f"agent.command=[{','.join(repr(a) for a in command)}]",
            "agent.reprompt.max=2",
            "agent.reprompt.min_remaining_s=5",
            "budget.seconds=120",
            f"out_dir={out_dir}",
            "cluster.include_dashboard=false",
            "cluster.num_cpus=2",
            f"cluster.temp_dir={ray_tmp}",
            "progress=false",
        ],
        env=sweep_env(cache_dir),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (db,) = out_dir.glob("*/records.sqlite")
    ((cell_id, resumes, exit_class, sandbox),) = query(
        db, "SELECT cell_id, resumes, exit_class, sandbox FROM cells"
    )
    assert (resumes, exit_class, sandbox) == (2, "exited", "bwrap")
    cell_dir = db.parent / "cells" / str(cell_id)
    assert (cell_dir / "home" / "runs").read_text() == "run\n" * 3  # the first run and two resumes
    log = (cell_dir / "agent.log").read_text()
    assert log.count("[autorl] resume ") == 2
    report = (cell_dir / "run_report.md").read_text()
    assert "resumed 2 time(s)" in report and "sandbox: bwrap" in report
