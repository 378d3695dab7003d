"""A fake GPU node for tests on a CPU machine: an ``nvidia-smi`` that prints a device table and a
folder of fake ``/dev/nvidia*`` files (``AUTORL_GPU_DEV_DIR``, :mod:`autorl.seal.gpus`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# Index ≠ minor number, as in a Kubernetes pod or under a Slurm device cgroup.
TABLE = [(0, "GPU-0a0a0a0a-0000-4000-8000-000000000000", 4)]
TABLE += [
    (i, f"GPU-{i}{i}{i}{i}{i}{i}{i}{i}-0000-4000-8000-00000000000{i}", 4 + i) for i in (1, 2, 3)
]
CONTROL = ("nvidiactl", "nvidia-uvm")  # the node has no nvidia-modeset or nvidia-uvm-tools


def fake_gpu_node(root: Path) -> tuple[Path, Path]:
    """Write the fake ``nvidia-smi`` (in ``root/bin``) and device files (in ``root/dev``).

    Returns:
        The folder to put first on PATH, and the device folder.
    """
    bin_dir, dev = root / "bin", root / "dev"
    bin_dir.mkdir(parents=True)
    dev.mkdir()
    rows = "".join(f"{index}, {uuid}, {minor}\\n" for index, uuid, minor in TABLE)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '{rows}'\n")
    smi.chmod(0o755)
    for _, _, minor in TABLE:
        (dev / f"nvidia{minor}").touch()
    for name in CONTROL:
        (dev / name).touch()
    (dev / "nvidia-caps").mkdir()
    return bin_dir, dev


class CellProbe:
    """Stands in for the Workspace actor: builds the cell's sandbox where Ray placed it."""

    def sandbox(self, overrides: list[str], cell_dir: str) -> dict[str, Any]:
        """The node, Ray's ids for this actor there, the agent's CUDA_VISIBLE_DEVICES and the
        bwrap argv's device binds."""
        from autorl.config import compose
        from autorl.seal.launch import CellSeal

        folder = Path(cell_dir)
        (folder / "ws").mkdir(parents=True)
        seal = CellSeal(compose(overrides), folder.name, folder)
        env = seal.base_env(dict(os.environ), folder / "ws")
        argv = seal.wrap(
            ["true"], workspace=folder / "ws", home=folder / "ws", base_model=folder, read_only=[]
        )
        import ray

        return {
            "node": ray.get_runtime_context().get_node_id(),
            "ray": os.environ["CUDA_VISIBLE_DEVICES"],
            "agent": env["CUDA_VISIBLE_DEVICES"],
            "binds": [argv[i + 2] for i, a in enumerate(argv) if a == "--dev-bind"],
        }


class GraderProbe:
    """Asks Ray for a grader's GPUs as the grader pool does (``num_gpus=grader.gpus``)."""

    def gpus(self) -> tuple[str, str]:
        """This actor's node and the ids Ray gave it there."""
        import ray

        return ray.get_runtime_context().get_node_id(), os.environ["CUDA_VISIBLE_DEVICES"]
