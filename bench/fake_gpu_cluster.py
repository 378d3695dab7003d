"""A local Ray cluster of simulated GPU nodes for bench/paper_grid.py: 8 ``ray start`` nodes, each
declaring 8 GPUs backed by a fake ``nvidia-smi`` and fake ``/dev/nvidia*`` files.

Only the processes started here are stopped, by process group and by their temp dirs; never
``ray stop`` (other clusters may share the machine).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

NODES = 8
GPUS_PER_NODE = 8


@dataclass
class Cluster:
    """The nodes this script started: their ``ray start --block`` processes and temp dirs."""

    address: str
    token_path: Path
    nodes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    temp_dirs: list[Path] = field(default_factory=list)


def free_port() -> int:
    """An ephemeral loopback port free now (outside Ray's worker port range)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def fake_gpus(root: Path) -> tuple[Path, Path]:
    """An ``nvidia-smi`` printing an 8-GPU table (index, uuid, minor) and its device files, as
    tests/helpers/fake_gpus.py does for 4; returns (the folder for PATH, the device folder)."""
    bin_dir, dev = root / "bin", root / "dev"
    bin_dir.mkdir(parents=True)
    dev.mkdir()
    rows = "".join(
        f"{i}, GPU-{i:08x}-0000-4000-8000-{i:012x}, {10 + i}\\n" for i in range(GPUS_PER_NODE)
    )
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '{rows}'\n")
    smi.chmod(0o755)
    for i in range(GPUS_PER_NODE):
        (dev / f"nvidia{10 + i}").touch()
    for name in ("nvidiactl", "nvidia-uvm"):
        (dev / name).touch()
    (dev / "nvidia-caps").mkdir()
    return bin_dir, dev


def start_cluster(cluster: Cluster, root: Path, env: dict[str, str]) -> None:
    """Start a head and 7 worker nodes, each ``ray start --block`` in its own process group."""
    ray_cli = str(Path(sys.executable).parent / "ray")
    port = int(cluster.address.rsplit(":", 1)[1])
    for index in range(NODES):
        temp_dir = Path(tempfile.mkdtemp(prefix=f"pg{index}-", dir="/tmp"))
        cluster.temp_dirs.append(temp_dir)
        role = (
            # The head also holds the Recorder, the grader and the env pools.
            [
                "--head",
                f"--port={port}",
                "--num-cpus=6",
                "--include-dashboard=false",
                f"--ray-client-server-port={free_port()}",
            ]
            if index == 0
            else [f"--address={cluster.address}", "--num-cpus=2"]
        )
        command = [
            ray_cli,
            "start",
            "--block",
            *role,
            f"--num-gpus={GPUS_PER_NODE}",
            f"--temp-dir={temp_dir}",
            "--disable-usage-stats",
            f"--dashboard-agent-listen-port={free_port()}",
        ]
        log = open(root / f"node{index}.log", "wb")  # noqa: SIM115 - the node outlives this call
        cluster.nodes.append(
            subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        )
        if index == 0:
            wait_for(lambda: gcs_up(cluster.address, env), 120, "the head did not start")


def ray_status(address: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``ray status`` of the cluster at ``address``."""
    ray_cli = str(Path(sys.executable).parent / "ray")
    return subprocess.run(
        [ray_cli, "status", f"--address={address}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def gcs_up(address: str, env: dict[str, str]) -> bool:
    """Whether the head's GCS answers (``ray status``)."""
    return ray_status(address, env).returncode == 0


def wait_for(check: Any, timeout_s: float, message: str) -> None:
    """Poll ``check()`` every second until it is truthy; RuntimeError(message) after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(message)
        time.sleep(1)


def stop_cluster(cluster: Cluster) -> None:
    """Workers first (with the head gone, their shutdown waits for the GCS), then the head; then
    whatever of theirs left its group (found by temp dir)."""
    for node in reversed(cluster.nodes):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGTERM)
        try:
            node.wait(60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)
            node.wait(10)
    markers = [str(d).encode() for d in cluster.temp_dirs]
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error, TypeError):
            line = " ".join(proc.info["cmdline"] or []).encode()
            if any(marker in line for marker in markers):
                proc.kill()


def alive_nodes(cluster: Cluster, env: dict[str, str]) -> int:
    """How many nodes ``ray status`` lists as active."""
    status = ray_status(cluster.address, env).stdout
    active = status.split("Active:", 1)[-1].split("Pending:", 1)[0]
    return sum(1 for line in active.splitlines() if line.strip().startswith("1 node_"))
