"""The GPUs a sealed cell is given: the ids Ray reserved for it, mapped to their device nodes.

Ray sets ``CUDA_VISIBLE_DEVICES`` of a GPU actor to the ids it reserved, indices or ``GPU-…``
UUIDs (the values of the node's own ``CUDA_VISIBLE_DEVICES`` when its raylet started with one). A
CUDA index is not a device-node number: in a Kubernetes pod or under a Slurm device cgroup the
node sees GPUs 0 and 1 whose nodes are ``/dev/nvidia2`` and ``/dev/nvidia3``. So each id is looked
up in the driver's device table (``nvidia-smi --query-gpu=index,uuid,minor_number``), whose minor
number names the node, and an id the table lacks is an error, never a GPU silently left out
(docs/design.md#gpu-platform).

:func:`map_visible_devices` is the mapping on a given table, so tests feed tables where index and
minor number differ; :func:`query_device_table` asks the driver. The device folder is ``/dev``
unless ``AUTORL_GPU_DEV_DIR`` names another (a test's fake device files, bound at the same
``/dev`` paths inside the sandbox).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autorl.errors import PrerequisiteError

DEV_DIR_ENV = "AUTORL_GPU_DEV_DIR"
QUERY = ["--query-gpu=index,uuid,minor_number", "--format=csv,noheader"]
# What every CUDA process opens besides its GPUs' own nodes (bound where the node has them).
CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
CAPS_DIR = "nvidia-caps"  # MIG and other capability devices, a folder where present
DEV_INSIDE = Path("/dev")


@dataclass(frozen=True)
class GpuDevice:
    """One row of the driver's device table.

    Attributes:
        index: The GPU's index as the driver counts the GPUs this node sees.
        uuid: Its ``GPU-…`` UUID.
        minor: The minor number of its device node, ``/dev/nvidia<minor>``.
    """

    index: str
    uuid: str
    minor: int


class GpuMappingError(PrerequisiteError):
    """A reserved GPU id that the device table does not hold, or a table that cannot be read."""


def parse_device_table(text: str) -> tuple[GpuDevice, ...]:
    """The rows of ``nvidia-smi --query-gpu=index,uuid,minor_number --format=csv,noheader``.

    >>> parse_device_table("0, GPU-aa, 2\\n1, GPU-bb, 3\\n")
    (GpuDevice(index='0', uuid='GPU-aa', minor=2), GpuDevice(index='1', uuid='GPU-bb', minor=3))

    Raises:
        GpuMappingError: a line is not three fields with an integer minor number.
    """
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [part.strip() for part in line.split(",")]
        if len(fields) != 3 or not fields[2].isdigit():
            raise GpuMappingError(f"unreadable line of the GPU device table: {line!r}")
        rows.append(GpuDevice(fields[0], fields[1], int(fields[2])))
    return tuple(rows)


def query_device_table() -> tuple[GpuDevice, ...]:
    """This node's GPU device table, from ``nvidia-smi`` on PATH.

    Raises:
        GpuMappingError: there is no ``nvidia-smi`` or it fails (no NVIDIA driver).
    """
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise GpuMappingError(
            "the cell reserved GPUs but nvidia-smi is not on this node's PATH: the sandbox maps "
            "the reserved GPU ids to their device nodes through it (install the NVIDIA driver)"
        )
    try:
        done = subprocess.run([smi, *QUERY], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as error:
        raise GpuMappingError(f"nvidia-smi could not list the GPUs: {error}") from error
    return parse_device_table(done.stdout)


def map_visible_devices(visible: str, table: Sequence[GpuDevice]) -> tuple[GpuDevice, ...]:
    """The rows of ``table`` that the ids in ``visible`` (a ``CUDA_VISIBLE_DEVICES`` value) name,
    in its order; an id is an index or a UUID (case-insensitive, with or without ``GPU-``).

    >>> table = parse_device_table("0, GPU-aa, 2\\n1, GPU-bb, 3")
    >>> [d.minor for d in map_visible_devices("GPU-bb,0", table)]
    [3, 2]

    Raises:
        GpuMappingError: an id names no row, naming the id and the table.
    """
    by_id: dict[str, GpuDevice] = {}
    for row in table:
        by_id[row.index] = row
        by_id[row.uuid.lower()] = row
        by_id[row.uuid.lower().removeprefix("gpu-")] = row
    found = []
    for item in (part.strip() for part in visible.split(",")):
        if not item:
            continue
        match = by_id.get(item.lower())
        if match is None:
            listed = "; ".join(f"index {r.index}, {r.uuid}, /dev/nvidia{r.minor}" for r in table)
            raise GpuMappingError(
                f"GPU id {item!r} of CUDA_VISIBLE_DEVICES={visible!r} is in no row of this "
                f"node's device table ({listed or 'no GPUs'}): the cell cannot be given it"
            )
        if match not in found:
            found.append(match)
    return tuple(found)


def device_dir() -> Path:
    """Where this node's NVIDIA device nodes are: ``/dev``, or ``$AUTORL_GPU_DEV_DIR``."""
    return Path(os.environ.get(DEV_DIR_ENV) or "/dev")


def device_binds(devices: Sequence[GpuDevice], dev: Path) -> list[tuple[Path, Path]]:
    """(host path, path inside the sandbox) of every device node a cell with ``devices`` needs:
    each GPU's own node, then the control devices and ``nvidia-caps`` that exist under ``dev``.

    Raises:
        GpuMappingError: a GPU's own node is missing.
    """
    if not devices:
        return []
    binds = []
    for device in devices:
        node = dev / f"nvidia{device.minor}"
        if not node.exists():
            raise GpuMappingError(
                f"GPU {device.uuid} (index {device.index}) has no device node {node}"
            )
        binds.append((node, DEV_INSIDE / node.name))
    for name in (*CONTROL_DEVICES, CAPS_DIR):
        if (dev / name).exists():
            binds.append((dev / name, DEV_INSIDE / name))
    return binds
