"""GPUs are the cell's own, on a local Ray that declares GPUs this CPU machine lacks: cells and
graders hold disjoint GPU ids, each cell's sandbox binds only its own device nodes (mapped through a
fake ``nvidia-smi`` table whose indices are not the minor numbers), and a cell bigger than every
node is refused at planning (docs/design.md#gpu-platform)."""

from __future__ import annotations

import os
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

pytestmark = pytest.mark.integration


def test_cells_and_graders_hold_disjoint_gpus_and_cells_bind_only_their_own_nodes(
    tmp_path: Path, ray_tmp: Path
) -> None:
    bin_dir, dev = fake_gpu_node(tmp_path / "node")
    ray.init(
        address="local",
        num_cpus=4,
        num_gpus=4,
        include_dashboard=False,
        _temp_dir=str(ray_tmp),
        runtime_env={
            "env_vars": {"PATH": f"{bin_dir}:{os.environ['PATH']}", DEV_DIR_ENV: str(dev)}
        },
    )
    try:
        grader_cfg = compose(["grader.gpus=1"]).grader
        grader: Any = ray.remote(GraderProbe).options(num_cpus=0, num_gpus=grader_cfg.gpus).remote()
        grader_ids = ray.get(grader.gpus.remote(), timeout=120)  # placed first, as in a sweep
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
        ids = [grader_ids.split(","), *(s["ray"].split(",") for s in seen.values())]
        flat = [i for group_ids in ids for i in group_ids]
        assert sorted(flat) == ["0", "1", "2", "3"], ids  # every GPU held once
        minor = {str(index): m for index, _, m in TABLE}
        uuid = {str(index): u for index, u, _ in TABLE}
        for name, got in seen.items():
            own = got["ray"].split(",")
            assert len(own) == {"two": 2, "one": 1}[name], got
            gpu_nodes = sorted(b for b in got["binds"] if b[len("/dev/nvidia") :].isdigit())
            assert gpu_nodes == sorted(f"/dev/nvidia{minor[i]}" for i in own), got
            assert {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-caps"} <= set(got["binds"])
            assert got["agent"] == ",".join(uuid[i] for i in own), got
        check_gpus_fit(compose([]), plan_sweep(["cell.gpus=4", f"out_dir={tmp_path}"]).cells)
        too_big = plan_sweep(["cell.gpus=5", f"out_dir={tmp_path}"]).cells
        with pytest.raises(PrerequisiteError, match="cell.gpus=5 but the largest node has 4 GPU"):
            check_gpus_fit(compose([]), too_big)
        for group in groups:
            remove_placement_group(group)
    finally:
        ray.shutdown()
