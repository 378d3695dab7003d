"""What the agent is told of the machine it works on: the "Your machine" section of instructions.md.

An agent's first moves on an unknown machine are ``nvidia-smi`` and ``pip install``; told what it
has (the reference's prompt gave the GPU count and name, PostTrainBench states the hardware), it
sizes its batches and picks its method at once. Every figure comes from the cell's real config and
node: the cgroup's limits, the workspace's free disk, the GPUs the cell reserved, and the versions
installed in the interpreter the agent runs (the toolchain when sealed).
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from autorl.seal.toolchain import PACKAGES

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Gpu:
    """One GPU the cell sees."""

    name: str
    memory_mib: int


@dataclass(frozen=True)
class Toolchain:
    """The interpreter the agent runs and the versions of its training packages."""

    python: str
    packages: dict[str, str]


@dataclass(frozen=True)
class CellEnvironment:
    """The facts the agent is told, each from the cell's config or its node.

    Attributes:
        cpus: The CPU quota of the agent's cgroup (``cell.cpus``).
        memory_gb: Its memory limit (``cell.memory_gb``).
        max_processes: Its process and thread limit (``cell.max_processes``).
        disk_free_gb: Free space of the filesystem that holds the workspace.
        gpus: The GPUs the cell reserved (none: CPU only).
        toolchain: What the agent's Python has.
        sealed: Whether the agent runs in its sandbox (``sandbox.mode=bwrap``).
        isolated_network: Sealed with a network namespace of its own (``sandbox.network=none``).
        budget_s: The time budget.
    """

    cpus: float
    memory_gb: float
    max_processes: int
    disk_free_gb: float
    gpus: tuple[Gpu, ...]
    toolchain: Toolchain
    sealed: bool
    isolated_network: bool
    budget_s: float

    def markdown(self) -> str:
        """The section as it appears in instructions.md.

        >>> toolchain = Toolchain("3.11.7", {"torch": "2.13.0"})
        >>> env = CellEnvironment(1.0, 8.0, 2048, 40.2, (), toolchain, True, True, 600.0)
        >>> print(env.markdown())  # doctest: +NORMALIZE_WHITESPACE
        ## Your machine
        - CPUs: 1 (the CPU quota of your processes; more threads only share it).
        - Memory: 8 GB for all your processes together; past it the largest is killed.
        - Processes: at most 2048 processes and threads at once.
        - Disk: 40.2 GB free where the workspace is.
        - GPUs: none; train on the CPU (small batches, short sequences).
        - Python 3.11.7 with torch 2.13.0. Nothing else can be installed: there is no package index.
        - Network: only the grading API (`$GRADING_SERVER_URL`) and the driver gateway answer; no
          internet, no model or dataset hub (everything you need is in this workspace).
        - Time: 600 seconds in all (see Budget).
        """
        listed = "; ".join(f"{g.name} ({g.memory_mib / 1024:.0f} GB)" for g in self.gpus)
        gpus = "none; train on the CPU (small batches, short sequences)."
        if self.gpus:
            gpus = (
                f"{len(self.gpus)}: {listed} (`CUDA_VISIBLE_DEVICES` names them; "
                "they are this cell's alone)."
            )
        packages = ", ".join(f"{name} {v}" for name, v in self.toolchain.packages.items())
        if self.isolated_network:
            install = "Nothing else can be installed: there is no package index."
            network = (
                "only the grading API (`$GRADING_SERVER_URL`) and the driver gateway "
                "answer; no internet, no model or dataset hub (everything you need is in "
                "this workspace)."
            )
        else:
            install = "There may be a package index; installing is at your own risk."
            network = "the node's own (this cell is not network-isolated)."
        limits = "" if self.sealed else " (not enforced: this cell runs unsealed)"
        return "\n".join(
            [
                "## Your machine",
                f"- CPUs: {self.cpus:g} (the CPU quota of your processes; more threads only share "
                "it)"
                f"{limits}.",
                f"- Memory: {self.memory_gb:g} GB for all your processes together; past it the "
                "largest "
                f"is killed{limits}.",
                f"- Processes: at most {self.max_processes} processes and threads at once{limits}.",
                f"- Disk: {self.disk_free_gb:.1f} GB free where the workspace is.",
                f"- GPUs: {gpus}",
                f"- Python {self.toolchain.python} with {packages}. {install}",
                f"- Network: {network}",
                f"- Time: {self.budget_s:.0f} seconds in all (see Budget).",
            ]
        )


def visible_gpus(cuda_visible_devices: str | None) -> tuple[Gpu, ...]:
    """The GPUs named by ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs), as ``nvidia-smi`` lists them.

    None or empty: no GPU. A node without ``nvidia-smi`` (no NVIDIA driver) has none either.
    """
    wanted = [part.strip() for part in (cuda_visible_devices or "").split(",") if part.strip()]
    if not wanted or shutil.which("nvidia-smi") is None:
        return ()
    try:
        listed = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=index,uuid,name,memory.total",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as error:
        logger.warning("nvidia-smi could not list the GPUs: %s", error)
        return ()
    rows = [
        [field.strip() for field in line.split(",")]
        for line in listed.splitlines()
        if line.count(",") >= 3
    ]
    by_id = {key: row for row in rows for key in (row[0], row[1])}
    return tuple(Gpu(by_id[w][2], int(float(by_id[w][3]))) for w in wanted if w in by_id)


@lru_cache(maxsize=8)
def toolchain_versions(python: str) -> Toolchain:
    """The Python version of ``python`` and the versions of the toolchain's packages it has.

    Read from package metadata (nothing is imported), once per interpreter and process.
    """
    script = (
        "import importlib.metadata as m, json, platform\n"
        "def v(p):\n"
        "    try: return m.version(p)\n"
        "    except m.PackageNotFoundError: return None\n"
        f"packages = {{p: v(p) for p in {list(PACKAGES)!r}}}\n"
        "print(json.dumps({'python': platform.python_version(), 'packages': packages}))"
    )
    done = subprocess.run(
        [python, "-I", "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    found = json.loads(done.stdout)
    packages = {name: version for name, version in found["packages"].items() if version}
    return Toolchain(found["python"], packages)


def disk_free_gb(folder: Path) -> float:
    """Free space of the filesystem holding ``folder``, in GB."""
    return shutil.disk_usage(folder).free / 1e9
