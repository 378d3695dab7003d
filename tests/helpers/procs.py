"""Processes and ports a test starts: finding them by a marker in their command line, stopping them
by PID."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path


def free_port() -> int:
    """An OS-assigned ephemeral port on loopback (32768+, outside Ray's worker range
    10002-19999)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def processes_mentioning(*markers: str) -> list[int]:
    """Live processes whose command line contains any of ``markers``."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if any(marker.encode() in cmdline for marker in markers):
                found.append(int(proc.name))
    return found


def stop_processes_mentioning(*markers: str, grace_s: float = 3.0) -> list[int]:
    """SIGTERM, then after ``grace_s`` SIGKILL, every process mentioning a marker (never `ray stop`,
    which would stop other clusters on the machine); returns those still alive afterwards."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in processes_mentioning(*markers):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        time.sleep(grace_s)
    return processes_mentioning(*markers)
