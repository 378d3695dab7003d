"""What a cell is given: a cell the cluster cannot hold is explained, then failed; a placed cell is
told
what it holds."""

from __future__ import annotations

import csv
import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from autorl.cluster import check_nodes_sealable
from autorl.config import plan_sweep
from autorl.errors import PrerequisiteError
from tests.integration.conftest import run_sweep_cli, sweep_env

pytestmark = pytest.mark.integration


def test_a_cell_bigger_than_the_cluster_is_explained_then_failed(
    tmp_path: Path, ray_tmp: Path, cache_dir: Path
) -> None:
    done = run_sweep_cli(
        tmp_path,
        ray_tmp,
        cache_dir,
        "cell.cpus=3",
        "scheduler.placement_timeout_s=12",
        "scheduler.max_retries=0",
        "progress=false",
        "sweep_id=unplaceable",
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output  # an infrastructure failure, not a result
    assert "has waited" in output and "{'CPU': 3" in output and "CPU 1 free of 2" in output, output
    rows = list(csv.DictReader((tmp_path / "unplaceable" / "results.csv").open()))
    assert [row["status"] for row in rows] == ["failed"]
    assert (
        "did not become available" in rows[0]["error"] and "lower cell.cpus" in rows[0]["error"]
    ), rows[0]


def test_a_sealed_cell_is_told_its_quota_memory_gpus_toolchain_and_network(
    tmp_path: Path, ray_tmp: Path, cache_dir: Path
) -> None:
    """instructions.md's machine section is written from the cell's config and node: with
    cell.cpus and cell.memory_gb away from their defaults, the section shows the values set."""
    command = [
        sys.executable,
        "-m",
        "autorl.sweep",
        f"out_dir={tmp_path}",
        "sweep_id=told",
        "progress=false",
        "cluster.include_dashboard=false",
        "cluster.num_cpus=2",
        f"cluster.temp_dir={ray_tmp}",
        "agent=command",
        "agent.command=[true]",
        "cell.cpus=0.5",
        "cell.memory_gb=3",
        "cell.max_processes=300",
        "budget.seconds=60",
    ]
    done = subprocess.run(
        command, env=sweep_env(cache_dir), capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [cell] = (tmp_path / "told" / "cells").iterdir()
    text = (cell / "workspace" / "instructions.md").read_text()
    section = text[text.index("## Your machine") : text.index("## Your workspace")]
    assert (
        "- CPUs: 0.5 " in section
        and "- Memory: 3 GB" in section
        and "at most 300 processes" in section
    )
    assert "- GPUs: none" in section and "no package index" in section and "60 seconds" in section
    # The toolchain's own versions (the pins), not the sweep's interpreter's by accident: both agree
    # here.
    assert (
        f"torch {importlib.metadata.version('torch')}" in section and "not enforced" not in section
    )


def test_a_joined_clusters_nodes_are_checked_for_the_judge_sandbox(
    tmp_path: Path, ray_tmp: Path
) -> None:
    """On a cluster this sweep joins, every node may grade: one whose workers lack namespaces
    (no ``unshare`` on their PATH) stops a HumanEval sweep before any cell, naming the node."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bash").symlink_to(
        shutil.which("bash") or "/bin/bash"
    )  # Ray starts its workers with bash
    ray.init(
        address="local",
        num_cpus=1,
        include_dashboard=False,
        _temp_dir=str(ray_tmp),
        runtime_env={"env_vars": {"PATH": str(bin_dir)}},
    )
    try:
        plan = plan_sweep(["task=humaneval", "sandbox.mode=none", f"out_dir={tmp_path}"])
        with pytest.raises(
            PrerequisiteError, match=r"node [\d.]+: the humaneval judge needs unprivileged"
        ):
            check_nodes_sealable(plan.base_config, plan.cells)
        opted_in = plan_sweep(
            [
                "task=humaneval",
                "sandbox.mode=none",
                "task.eval.fixture.sandbox_mode=rlimits",
                f"out_dir={tmp_path}",
            ]
        )
        check_nodes_sealable(opted_in.base_config, opted_in.cells)
    finally:
        ray.shutdown()
