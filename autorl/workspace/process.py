"""Running the agent process under its budget (SPEC §4 step 5)."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class AgentExit:
    """How the agent process ended.

    ``exit_class`` is ``exited`` (it ended by itself; see ``exit_code``), ``timeout`` (stopped at
    the budget), ``killed`` (stopped because the cell was cancelled) or ``crashed`` (ended by a
    signal nobody here sent).
    """

    exit_class: str
    exit_code: int | None
    duration_s: float


def _die_with_parent() -> None:
    # If the workspace actor's process dies, the kernel kills the agent too instead of leaving
    # an orphan that keeps training on a node whose resources were already released.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def stop_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the whole process group, wait ``grace_s``, then SIGKILL what is left."""
    _signal_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    # Children may outlive the group leader; SIGKILL the group in any case.
    _signal_group(proc.pid, signal.SIGKILL)
    proc.wait()


def run_agent(
    command: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    log_path: Path,
    budget_s: float,
    grace_s: float,
    cancel: threading.Event,
    on_start: Callable[[], None] | None = None,
) -> AgentExit:
    """Run ``command`` in its own session until it exits, the budget ends or ``cancel`` is set.

    stdout and stderr go to ``log_path``. The whole process group is stopped in every case, so
    nothing the agent started survives its budget.
    """
    started = time.monotonic()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=_die_with_parent,  # noqa: PLW1509 - prctl only, no locks
        )
        if on_start is not None:
            on_start()
        deadline = started + budget_s
        exit_class = "exited"
        while True:
            try:
                proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            if cancel.is_set():
                exit_class = "killed"
                break
            if time.monotonic() >= deadline:
                exit_class = "timeout"
                break
        stop_group(proc, grace_s)
    code = proc.returncode
    if exit_class == "exited" and code is not None and code < 0:
        exit_class = "crashed"
    return AgentExit(exit_class, code, time.monotonic() - started)
