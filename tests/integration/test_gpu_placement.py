"""GPUs are the cell's own, on a two-node local Ray that declares GPUs this CPU machine lacks
(``--num-gpus``): cells and graders hold disjoint GPUs, each cell's sandbox binds only its own
device nodes (mapped through a fake ``nvidia-smi`` table whose indices are not the minor numbers),
and a cell bigger than every node is refused at planning, though the cluster has as many GPUs in
all (docs/design.md#gpu-platform)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from autorl.cluster import check_gpus_fit
from autorl.config import compose, plan_sweep
from autorl.errors import PrerequisiteError
from autorl.scheduler import _bundle
from autorl.seal.gpus import DEV_DIR_ENV
from tests.helpers.fake_gpus import TABLE, CellProbe, GraderProbe, fake_gpu_node
from tests.helpers.procs import free_port, processes_mentioning

pytestmark = pytest.mark.integration


def _second_node(temp_dir: Path) -> subprocess.Popen[bytes]:
    """A worker node with 2 CPUs and 2 declared GPUs, joined to this process's Ray."""
    command = [
        str(Path(sys.executable).parent / "ray"),
        "start",
        "--block",
        f"--address={ray.get_runtime_context().gcs_address}",
        "--num-cpus=2",
        "--num-gpus=2",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
        f"--dashboard-agent-listen-port={free_port()}",
    ]
    node = subprocess.Popen(
        command,
        env=dict(os.environ) | {"RAY_USAGE_STATS_ENABLED": "0"},  # ray.init set RAY_AUTH_MODE
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while len([n for n in ray.nodes() if n["Alive"]]) < 2:
        assert node.poll() is None, node.stdout.read().decode() if node.stdout else ""
        assert time.monotonic() < deadline, "the second node did not join within 120 s"
        time.sleep(0.5)
    return node


def _stop(node: subprocess.Popen[bytes], temp_dir: Path) -> None:
    """Stop the worker node by its process group, then anything of it that left the group."""
    os.killpg(node.pid, signal.SIGTERM)
    try:
        node.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(node.pid, signal.SIGKILL)
        node.wait(10)
    for pid in processes_mentioning(str(temp_dir)):
        os.kill(pid, signal.SIGKILL)


def test_cells_and_graders_hold_disjoint_gpus_and_cells_bind_only_their_own_nodes(
    tmp_path: Path, ray_tmp: Path
) -> None:
    bin_dir, dev = fake_gpu_node(tmp_path / "node")
    node_tmp = Path(tempfile.mkdtemp(prefix="arg-", dir="/tmp"))
    ray.init(
        address="local",
        num_cpus=2,
        num_gpus=2,
        include_dashboard=False,
        _temp_dir=str(ray_tmp),
        # Every worker on either node finds the fake nvidia-smi and device files.
        runtime_env={
            "env_vars": {"PATH": f"{bin_dir}:{os.environ['PATH']}", DEV_DIR_ENV: str(dev)}
        },
    )
    node = None
    try:
        node = _second_node(node_tmp)
        grader_gpus = compose(["grader.gpus=1"]).grader.gpus
        grader: Any = ray.remote(GraderProbe).options(num_cpus=0, num_gpus=grader_gpus).remote()
        grader_node, grader_ids = ray.get(grader.gpus.remote(), timeout=120)  # first, as in a sweep
        held = [(grader_node, i) for i in grader_ids.split(",")]
        cells = {"two": ["cell.gpus=2", "cell.cpus=1"], "one": ["cell.gpus=1", "cell.cpus=1"]}
        seen: dict[str, dict[str, Any]] = {}
        groups = []
        for name, overrides in cells.items():
            [spec] = plan_sweep([*overrides, f"out_dir={tmp_path}"]).cells
            group = placement_group([_bundle(spec)])
            groups.append(group)
            ray.get(group.ready(), timeout=120)
            probe: Any = (
                ray.remote(CellProbe)
                .options(  # the Workspace actor's options (SweepRunner._start)
                    num_cpus=spec.config.cell.cpus,
                    num_gpus=spec.config.cell.gpus,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=group),
                )
                .remote()
            )
            seen[name] = ray.get(
                probe.sandbox.remote(overrides, str(tmp_path / "cells" / name)), timeout=120
            )
            held += [(seen[name]["node"], i) for i in seen[name]["ray"].split(",")]
        assert len(set(held)) == len(held) == 4, held  # each of the 4 GPUs held once
        minor = {str(index): m for index, _, m in TABLE}
        uuid = {str(index): u for index, u, _ in TABLE}
        for name, got in seen.items():
            own = got["ray"].split(",")
            assert len(own) == {"two": 2, "one": 1}[name], got
            gpu_nodes = sorted(b for b in got["binds"] if b[len("/dev/nvidia") :].isdigit())
            assert gpu_nodes == sorted(f"/dev/nvidia{minor[i]}" for i in own), got
            assert {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-caps"} <= set(got["binds"])
            assert got["agent"] == ",".join(uuid[i] for i in own), got
        check_gpus_fit(compose([]), plan_sweep(["cell.gpus=2", f"out_dir={tmp_path}"]).cells)
        too_big = plan_sweep(["cell.gpus=3", f"out_dir={tmp_path}"]).cells  # 4 GPUs in all
        with pytest.raises(PrerequisiteError, match="cell.gpus=3 but the largest node has 2 GPU"):
            check_gpus_fit(compose([]), too_big)
        for group in groups:
            remove_placement_group(group)
    finally:
        if node is not None:  # the node first: with the head gone, its shutdown waits for the GCS
            _stop(node, node_tmp)
        ray.shutdown()
        shutil.rmtree(node_tmp, ignore_errors=True)
