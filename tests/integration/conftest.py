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

import pytest

# Small enough for CI on 2 cores, big enough that SFT on the fixture clearly beats the baseline.
FAST_AGENT = ["agent.sft.steps=60", "agent.grpo.steps=4", "budget.seconds=400"]


@pytest.fixture()
def ray_tmp() -> Iterator[Path]:
    """A short private Ray temp dir (Ray's socket paths must stay under ~107 characters)."""
    path = Path(tempfile.mkdtemp(prefix="ar-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def sweep_command(out_dir: Path, ray_tmp: Path, *extra: str) -> list[str]:
    """The sweep CLI with this test's output folder and private Ray settings."""
    return [
        sys.executable, "-m", "autorl.sweep", *FAST_AGENT, f"out_dir={out_dir}",
        "cluster.include_dashboard=false", "cluster.num_cpus=2", f"cluster.temp_dir={ray_tmp}", *extra,
    ]


def sweep_env(cache_dir: Path) -> dict[str, str]:
    """Environment of a sweep subprocess: this session's cache, no network, no telemetry."""
    return dict(os.environ) | {"AUTORL_CACHE_DIR": str(cache_dir), "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}


def run_sweep_cli(out_dir: Path, ray_tmp: Path, cache_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run the sweep to the end and return the finished process."""
    return subprocess.run(
        sweep_command(out_dir, ray_tmp, *extra), env=sweep_env(cache_dir), capture_output=True, text=True, timeout=900
    )


def query(db: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    """Read the record store as an outside reader would."""
    with sqlite3.connect(db) as conn:
        return list(conn.execute(sql, params))
