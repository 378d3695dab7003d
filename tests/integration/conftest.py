"""Helpers for tests that run whole sweeps through the real CLI on a local Ray."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.procs import free_port, stop_processes_mentioning

# Small enough for CI on 2 cores, big enough that SFT on the fixture clearly beats the baseline: 60
# steps of 16 rows scored 8 and 9 (seeds 0, 1) in 69 and 59 s of cell time, 60 of 32 rows 5 in 101
# s, 30 of 32 rows 0.
FAST_AGENT = [
    "agent.sft.max_steps=60",
    "agent.sft.per_device_train_batch_size=16",
    "agent.grpo.max_steps=4",
    "budget.seconds=400",
]


@pytest.fixture()
def ray_tmp() -> Iterator[Path]:
    """A short private Ray temp dir (Ray's socket paths must stay under ~107 characters)."""
    path = Path(tempfile.mkdtemp(prefix="ar-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def sweep_command(out_dir: Path, ray_tmp: Path, *extra: str) -> list[str]:
    """The sweep CLI with this test's output folder and private Ray settings."""
    return [
        sys.executable,
        "-m",
        "autorl.sweep",
        *FAST_AGENT,
        f"out_dir={out_dir}",
        "cluster.include_dashboard=false",
        "cluster.num_cpus=2",
        f"cluster.temp_dir={ray_tmp}",
        *extra,
    ]


def sweep_env(cache_dir: Path) -> dict[str, str]:
    """Environment of a sweep subprocess: this session's cache, no network, no telemetry."""
    return dict(os.environ) | {
        "AUTORL_CACHE_DIR": str(cache_dir),
        "HF_HUB_OFFLINE": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
    }


def run_sweep_cli(
    out_dir: Path, ray_tmp: Path, cache_dir: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """Run the sweep to the end and return the finished process."""
    return subprocess.run(
        sweep_command(out_dir, ray_tmp, *extra),
        env=sweep_env(cache_dir),
        capture_output=True,
        text=True,
        timeout=900,
    )


def assert_clean_integrity(row: dict[str, str]) -> None:
    """A scripted (honest) cell's results row: checked for contamination, nothing flagged (issue
    #12's calibration)."""
    assert row["contamination"] != "", f"{row['cell_id']}: the contamination check did not run"
    assert row["integrity_flags"] == "" and row["flagged_submissions"] == "0", row


def query(db: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    """Read the record store as an outside reader would."""
    with sqlite3.connect(db) as conn:
        return list(conn.execute(sql, params))


def query_running(db: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    """Read the record store of a sweep that is running: read-only, and nothing (``[]``) while
    the file or its schema is not there yet."""
    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=10) as conn:
            return list(conn.execute(sql, params))
    except sqlite3.OperationalError:  # not created yet, or the schema is being migrated
        return []


@pytest.fixture()
def external_ray_head() -> Iterator[str]:
    """A Ray head started with `ray start` (token auth on, as Ray 2.60 does); yields its address.

    Stopped by PID afterwards (never `ray stop`, which would stop other clusters on the machine).
    """
    temp_dir = tempfile.mkdtemp(prefix="arh-", dir="/tmp")
    port, client_port = free_port(), free_port()
    ray_cli = str(Path(sys.executable).parent / "ray")
    env = dict(os.environ) | {"RAY_USAGE_STATS_ENABLED": "0"}
    subprocess.run(
        [
            ray_cli,
            "start",
            "--head",
            f"--port={port}",
            f"--temp-dir={temp_dir}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--ray-client-server-port={client_port}",
            f"--dashboard-agent-listen-port={free_port()}",
        ],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop_processes_mentioning(temp_dir, f"--port={client_port}")
        shutil.rmtree(temp_dir, ignore_errors=True)
