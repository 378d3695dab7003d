"""Running the agent process under its budget (docs/design.md#a-cells-life, step 6).

With a :class:`~autorl.seal.cgroups.CellCgroup` (sealed cells) the agent's first process joins the
cell's cgroup before exec, so every process it starts is in it (also after ``setsid()`` or a
double fork), and whatever is left in the cgroup is killed when the agent ends, however it ends.
Without one (``sandbox.mode=none``) only the agent's process group is stopped.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autorl.seal.cgroups import CellCgroup

logger = logging.getLogger(__name__)
_PR_SET_PDEATHSIG = 1
# Loaded at import: a preexec_fn must not import or load anything (it runs between fork and exec).
_LIBC = ctypes.CDLL(None, use_errno=True)
# How long SIGKILLed processes may take to leave the cgroup (a task in uninterruptible I/O can lag).
_KILL_TIMEOUT_S = 30.0
# What agent.log keeps of the agent's output unless told otherwise (cell.max_log_mb).
DEFAULT_MAX_LOG_BYTES = 512 << 20
_CHUNK = 1 << 16


class CappedLog:
    """Copies the agent's output from a pipe into its log, keeping at most ``max_bytes`` of it.

    The agent's stdout is a channel it controls: written straight to a file outside the sandbox it
    could fill the node's disk, which every cell and grader on the node shares. Past the cap the
    output is still read (so the agent never blocks on a full pipe) and dropped, with one line in
    the log that says so. The copy stops at end of file (every writer gone) or, after
    :meth:`finish`, once the pipe stays quiet (a process that escaped the stop still holds it).
    """

    def __init__(self, pipe_fd: int, log_path: Path, max_bytes: int) -> None:
        """Start copying from ``pipe_fd`` (the read end, owned from now on) to ``log_path``."""
        self.fd = pipe_fd
        self.max_bytes = max_bytes
        self.kept = 0
        self.dropped = 0
        self._finishing = threading.Event()
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed by the copying thread
        self._thread = threading.Thread(target=self._copy, name="agent-log", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        try:
            while True:
                ready, _, _ = select.select([self.fd], [], [], 0.5)
                if not ready:
                    if self._finishing.is_set():
                        return
                    continue
                chunk = os.read(self.fd, _CHUNK)
                if not chunk:
                    return
                room = max(0, self.max_bytes - self.kept)
                if room:
                    self._log.write(chunk[:room])
                    self._log.flush()
                    self.kept += min(room, len(chunk))
                if len(chunk) > room:
                    if not self.dropped:
                        self._log.write(
                            f"\n[autorl: the agent's output past {self.max_bytes} bytes "
                            "(cell.max_log_mb) "
                            "is dropped]\n".encode()
                        )
                        self._log.flush()
                    self.dropped += len(chunk) - room
        finally:
            self._log.close()
            os.close(self.fd)

    def finish(self, timeout_s: float = 10.0) -> None:
        """Wait for the copy to end: at end of file, or once the pipe has been quiet for a
        moment."""
        self._finishing.set()
        self._thread.join(timeout_s)
        if self.dropped:
            logger.warning(
                "agent output past %d bytes was dropped (%d bytes)", self.max_bytes, self.dropped
            )


@dataclass(frozen=True)
class AgentExit:
    """How the agent process ended.

    Attributes:
        exit_class: Which way it ended:

            - ``exited``: it ended by itself (see ``exit_code``);
            - ``timeout``: stopped at the budget;
            - ``killed``: stopped because the cell was cancelled;
            - ``memory``: the cgroup's memory limit ended it (the OOM killer killed its main
              process);
            - ``crashed``: ended by a signal nobody here sent.
        exit_code: The main process's exit status (negative: killed by that signal); ``None`` if
            unknown.
        duration_s: Wall-clock seconds from start to the end of the stop.
        limit_hit: The cgroup limit the agent ran into, whatever the class: ``memory`` (the OOM
            killer killed one of its processes), ``pids`` (a fork was refused at its process cap) or
            ``None`` (none, or no cgroup).
    """

    exit_class: str
    exit_code: int | None
    duration_s: float
    limit_hit: str | None = None


def _die_with_parent() -> None:
    # If the workspace actor's process dies, the kernel kills the agent too instead of leaving
    # an orphan that keeps training on a node whose resources were already released.
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _child_setup(cgroup: CellCgroup | None) -> Callable[[], None]:
    """The agent's ``preexec_fn``: join the cgroup first (so nothing escapes it), then die with the
    parent."""

    def setup() -> None:
        if cgroup is not None:
            cgroup.enter()
        _die_with_parent()

    return setup


def _sigkilled(code: int | None) -> bool:
    # Popen reports death by signal N as -N; a shell or bubblewrap between us and the agent exits
    # 128 + N.
    return code in (-signal.SIGKILL, 128 + signal.SIGKILL)


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


def stop_cell(proc: subprocess.Popen[bytes], cgroup: CellCgroup, grace_s: float) -> None:
    """SIGTERM the process group and every process of ``cgroup``, wait ``grace_s``, then kill the
    cgroup.

    After ``grace_s`` (or as soon as the cgroup is empty) the cgroup is frozen and every process
    left in it is SIGKILLed, so nothing the agent started survives, whichever session it is in.
    """
    _signal_group(proc.pid, signal.SIGTERM)
    cgroup.signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    cgroup.wait_empty(max(0.0, deadline - time.monotonic()))
    if not cgroup.kill(timeout_s=_KILL_TIMEOUT_S):
        logger.error(
            "agent processes %s outlived SIGKILL in cgroup %s", sorted(cgroup.pids()), cgroup.name
        )
    # The group leader, should it not have joined the cgroup.
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
    cgroup: CellCgroup | None = None,
    max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
) -> AgentExit:
    """Run ``command`` in its own session until it exits, the budget ends or ``cancel`` is set.

    stdout and stderr go to ``log_path``, at most ``max_log_bytes`` of them (:class:`CappedLog`).
    In every case, also after a normal exit, what is left is stopped: the whole ``cgroup`` (see
    :func:`stop_cell`) or, without one, the process group.

    Args:
        cgroup: The cell's cgroup; the agent joins it before exec. The caller creates and removes
            it.
    """
    started = time.monotonic()
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=write_fd,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_child_setup(cgroup),  # noqa: PLW1509 - writes and prctl only
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        # The agent's processes hold the only write ends: their exit is end of file.
        os.close(write_fd)
    log = CappedLog(read_fd, log_path, max_log_bytes)
    try:
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
        if cgroup is None:
            stop_group(proc, grace_s)
        else:
            stop_cell(proc, cgroup, grace_s)
    finally:
        log.finish()
    code = proc.returncode
    limit_hit = cgroup.limit_hit(main_sigkilled=_sigkilled(code)) if cgroup is not None else None
    if exit_class == "exited" and limit_hit == "memory" and _sigkilled(code):
        exit_class = "memory"
    elif exit_class == "exited" and code is not None and code < 0:
        exit_class = "crashed"
    return AgentExit(exit_class, code, time.monotonic() - started, limit_hit)
