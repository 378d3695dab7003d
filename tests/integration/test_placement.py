"""A cell the cluster cannot hold: the sweep says what it waits for, then fails it with a clear error."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.integration.conftest import run_sweep_cli

pytestmark = pytest.mark.integration


def test_a_cell_bigger_than_the_cluster_is_explained_then_failed(tmp_path: Path, ray_tmp: Path, cache_dir: Path) -> None:
    done = run_sweep_cli(tmp_path, ray_tmp, cache_dir, "cell.cpus=3", "scheduler.placement_timeout_s=12",
                         "scheduler.max_retries=0", "progress=false", "sweep_id=unplaceable")
    output = done.stdout + done.stderr
    assert done.returncode != 0, output  # an infrastructure failure, not a result
    assert "has waited" in output and "{'CPU': 3" in output and "CPU 1 free of 2" in output, output
    rows = list(csv.DictReader((tmp_path / "unplaceable" / "results.csv").open()))
    assert [row["status"] for row in rows] == ["failed"]
    assert "did not become available" in rows[0]["error"] and "lower cell.cpus" in rows[0]["error"], rows[0]
