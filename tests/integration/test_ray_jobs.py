"""Sweeps submitted as Ray Jobs (``cluster=jobs-local``) to a head this module starts with ``ray
start --head``.

The job writes its sweep under a folder the submitting command is never told about
(``cluster.job_out_dir``); the local ``out_dir`` only gets what came back through the dashboard.
Cells run the fast ``command`` agent on the GSM8K fixture.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.procs import free_port, stop_processes_mentioning
from tests.integration.conftest import query, sweep_env

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CELL = "gsm8k.command.none.tiny.s0"


@pytest.fixture(scope="module")
def jobs_head(cache_dir: Path) -> Iterator[str]:
    """A head with its dashboard on loopback (token auth on, as Ray 2.60 does); yields the Jobs
    address.

    Its environment is the sweep's (this session's cache, no network) with the venv first on PATH
    and the agent toolchain named (the job's copy of the project has no .cache/). Stopped by PID,
    with the reparented Ray client server (never `ray stop`, which stops every Ray on the machine).
    """
    temp_dir = tempfile.mkdtemp(prefix="arj-", dir="/tmp")
    port, client_port, dashboard_port = free_port(), free_port(), free_port()
    venv_bin = str(Path(sys.executable).parent)
    toolchain = os.environ.get("AUTORL_TOOLCHAIN_DIR", str(ROOT / ".cache" / "toolchain"))
    env = sweep_env(cache_dir) | {
        "PATH": f"{venv_bin}:{os.environ['PATH']}",
        "AUTORL_TOOLCHAIN_DIR": toolchain,
    }
    subprocess.run(
        [
            f"{venv_bin}/ray",
            "start",
            "--head",
            f"--port={port}",
            f"--temp-dir={temp_dir}",
            "--num-cpus=2",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard_port}",
            "--include-dashboard=true",
            "--disable-usage-stats",
            f"--ray-client-server-port={client_port}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--metrics-export-port={free_port()}",
        ],
        env=env,
        check=True,
        capture_output=True,
        timeout=180,
    )
    try:
        yield f"http://127.0.0.1:{dashboard_port}"
    finally:
        left = stop_processes_mentioning(temp_dir, f"--port={client_port}")
        assert not left, "Ray processes of the test's head are still running"
        shutil.rmtree(temp_dir, ignore_errors=True)


def job_command(
    address: str, head_out: Path, local_out: Path, agent_command: str, *extra: str
) -> list[str]:
    """The sweep command against the test's head: jobs-local with its address and the head-side
    folder."""
    return [
        sys.executable,
        "-m",
        "autorl.sweep",
        "cluster=jobs-local",
        f"cluster.jobs_address={address}",
        f"cluster.job_out_dir={head_out}",
        "cluster.job_stop_wait_s=90",
        f"out_dir={local_out}",
        "task=gsm8k",
        "agent=command",
        f"agent.command={agent_command}",
        "budget.seconds=120",
        *extra,
    ]


def status_of(results: Path) -> str:
    (row,) = list(csv.DictReader(results.open()))
    return row["status"]


def test_sweep_runs_as_one_job_and_its_folder_comes_back(
    jobs_head: str, tmp_path: Path, cache_dir: Path
) -> None:
    head_out, local_out = tmp_path / "head", tmp_path / "local"
    done = subprocess.run(
        job_command(jobs_head, head_out, local_out, "[sh,-c,'exit 0']", "sweep_id=jobs-ok"),
        env=sweep_env(cache_dir),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"job autorl-jobs-ok-\S+ succeeded", done.stdout), done.stdout[-2000:]
    assert (
        f"[autorl] {CELL}: completed" in done.stdout
    )  # the in-job sweep's progress, followed here
    local = local_out / "jobs-ok"
    assert status_of(local / "results.csv") == "completed"
    assert query(local / "records.sqlite", "SELECT status FROM cells") == [("completed",)]
    assert (local / "report" / "index.html").is_file() and (
        local / "cells" / CELL / "agent.log"
    ).is_file()
    assert not (
        local / "cells" / CELL / "workspace"
    ).exists()  # agents' workspaces stay on the cluster
    assert (head_out / "jobs-ok" / "cells" / CELL / "workspace").is_dir()


def test_ctrl_c_stops_the_job_and_the_next_run_resumes(
    jobs_head: str, tmp_path: Path, cache_dir: Path
) -> None:
    head_out, local_out = tmp_path / "head", tmp_path / "local"
    command = job_command(jobs_head, head_out, local_out, "[sleep,600]", "sweep_id=jobs-stop")
    proc = subprocess.Popen(
        command,
        env=sweep_env(cache_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True
    )  # type: ignore[union-attr]
    reader.start()
    deadline = time.monotonic() + 400
    while not any(f"{CELL}: running" in line for line in lines):
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
        time.sleep(1)
    proc.send_signal(
        signal.SIGINT
    )  # Ctrl-C: the client stops the job, the job's sweep cancels the cell
    assert proc.wait(timeout=300) == 130, "".join(lines)[-3000:]
    reader.join(timeout=10)
    out = "".join(lines)
    assert "stopping job" in out and "stopped; its sweep folder is now" in out, out[-3000:]
    assert status_of(local_out / "jobs-stop" / "results.csv") == "cancelled", out[-4000:]

    # detach, then attach: the rerun (same sweep id) resumes the cancelled cell on the cluster.
    rerun = job_command(jobs_head, head_out, local_out, "[sh,-c,'exit 0']", "sweep_id=jobs-stop")
    detached = subprocess.run(
        [*rerun, "detach=true"],
        env=sweep_env(cache_dir),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert detached.returncode == 0, detached.stdout[-2000:] + detached.stderr[-2000:]
    job_id = re.search(r"attach=(\S+)", detached.stdout)
    assert job_id, detached.stdout
    attached = subprocess.run(
        [*rerun, f"attach={job_id[1]}"],
        env=sweep_env(cache_dir),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert attached.returncode == 0, attached.stdout[-3000:] + attached.stderr[-3000:]
    assert status_of(local_out / "jobs-stop" / "results.csv") == "completed"
