"""Run untrusted Python source in a sandboxed subprocess (code-execution graders and rewards).

Each run gets a fresh empty directory as its working directory, ``HOME`` and ``TMPDIR``, limits
(``RLIMIT_CPU``, ``RLIMIT_AS``, ``RLIMIT_FSIZE``, ``RLIMIT_NOFILE``, no core files, a task cap), a
wall-clock timeout after which it is killed, and at most ``max_output_bytes`` of its output kept.
:meth:`Sandbox.run_python` runs one program to its end; :meth:`Sandbox.start_python` starts one and
returns a :class:`SandboxRun`, so that several can run at once, joined by pipes passed to them
(:mod:`agent_kit.function_judge` runs a problem's tests and the candidate's code that way).

Two isolation modes:

- ``namespaces`` (used whenever the kernel allows it): ``unshare`` puts the run in new user, mount,
  network and PID namespaces. The network namespace has no interfaces up, so every connection fails.
  A small launcher then makes the whole filesystem read-only except the run's directory
  (``mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY)``), empties the capability bounding set and sets
  ``no_new_privs`` before it execs the program, so the program holds no capabilities and cannot undo
  the mounts. At the timeout the PID namespace dies with everything in it. The run gets a /proc of
  its own (``--mount-proc``) where the kernel allows it. Nested in another sandbox (the scripted
  agent's reward inside a sealed cell's bubblewrap) it does not: a new procfs may only be mounted
  where the enclosing one is fully visible, and bubblewrap covers parts of its /proc. There the run
  keeps the enclosing sandbox's /proc, read-only like the rest (it shows the agent's own processes,
  none of which the run can signal from its PID namespace), and every other namespace as above; this
  is logged once.
- ``rlimits`` (fallback, logged as a warning): limits, private directory and kill only, no network
  or filesystem isolation (``hidden`` folders stay visible); as root the program runs as ``nobody``
  (uid 65534). A caller that must hide files checks :func:`namespaces_problem` and asks for
  ``rlimits`` only when told to explicitly.

The number of tasks (processes and threads) of a run is capped with a ``pids`` cgroup of its own
when one can be created (cgroup v1, or v2 with ``pids`` delegated): every task of the run is in
it, also ones that called ``setsid()``, and all of them are killed when the run ends. Otherwise
``RLIMIT_NPROC`` is set to the tasks the program's user already has plus ``max_processes`` (the
kernel counts ``RLIMIT_NPROC`` per user, and never for uid 0: as root without a usable cgroup the
task count is not capped, which is logged).

This module owns the runs: their limits, start, wait, kill, clean-up and results, and the choice of
mode. The kernel mechanisms it builds them on (the namespace launcher and the task cap) are in
:mod:`agent_kit.confinement`, apart from the run's life cycle that uses them.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent_kit.confinement import TaskCap, namespace_prefix

# Part of this module's interface (function_judge and the tests import it from here).
from agent_kit.confinement import fresh_proc_allowed as fresh_proc_allowed

logger = logging.getLogger(__name__)

Mode = Literal["namespaces", "rlimits"]
_NOBODY = 65534
_PR_SET_PDEATHSIG = 1
# Loaded at import: a preexec_fn must not import anything (it runs between fork and exec).
_LIBC = ctypes.CDLL(None, use_errno=True)


class SandboxError(RuntimeError):
    """The sandbox itself does not work here (not the program's fault); the message says why.

    The grader side turns it into ``autorl.errors.PrerequisiteError`` (this package imports nothing
    of autorl).
    """


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one sandboxed run.

    Attributes:
        timeout_s: Wall-clock seconds before the run's process group (and PID namespace) is killed.
        cpu_s: ``RLIMIT_CPU`` per process, in seconds.
        memory_bytes: ``RLIMIT_AS`` (address space) per process.
        max_processes: Tasks (processes and threads) the run may have at once (see the module
            docstring).
        max_file_bytes: ``RLIMIT_FSIZE``: largest file the run may write (its output file included).
        max_open_files: ``RLIMIT_NOFILE``.
        max_output_bytes: Bytes of combined stdout and stderr kept in the result.
    """

    timeout_s: float = 10.0
    cpu_s: int = 10
    memory_bytes: int = 1 << 30
    max_processes: int = 32
    max_file_bytes: int = 16 << 20
    max_open_files: int = 256
    max_output_bytes: int = 64 << 10


@dataclass(frozen=True)
class SandboxResult:
    """What one run did.

    Attributes:
        returncode: Exit status (negative: killed by that signal); ``None`` when it timed out.
        timed_out: Killed at the wall-clock timeout.
        output: The first ``max_output_bytes`` of stdout and stderr, decoded leniently.
        output_truncated: The program wrote more than was kept.
        elapsed_s: Wall-clock seconds from start to exit.
        mode: The isolation mode it ran under.
    """

    returncode: int | None
    timed_out: bool
    output: str
    output_truncated: bool
    elapsed_s: float
    mode: Mode

    @property
    def ok(self) -> bool:
        """The program exited with status 0 before the timeout."""
        return self.returncode == 0 and not self.timed_out


def _preexec(limits: SandboxLimits, cap: TaskCap, drop_to_nobody: bool) -> Callable[[], None]:
    """The child's ``preexec_fn``: join the task cap, set resource limits, maybe become
    ``nobody``.
    """

    def apply() -> None:
        cap.enter()
        cpu = max(1, int(limits.cpu_s))
        for which, value in (
            (resource.RLIMIT_CPU, cpu),
            (resource.RLIMIT_AS, int(limits.memory_bytes)),
            (resource.RLIMIT_FSIZE, int(limits.max_file_bytes)),
            (resource.RLIMIT_NOFILE, int(limits.max_open_files)),
            (resource.RLIMIT_CORE, 0),
        ):
            resource.setrlimit(which, (value, value))
        if drop_to_nobody:
            os.setgroups([])
            os.setgid(_NOBODY)
            os.setuid(_NOBODY)
        # If the grader dies mid-run, the run dies too (set last: changing uid clears it).
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return apply


class SandboxRun:
    """One program started in the sandbox and not yet reaped; :meth:`finish` (or ``with``) kills and
    cleans up.

    :meth:`Sandbox.start_python` returns one; :meth:`Sandbox.run_python` is start, wait, finish.
    """

    def __init__(
        self,
        source: str,
        limits: SandboxLimits,
        mode: Mode,
        python: str,
        tmp_root: Path | None,
        stdlib_only: bool,
        hidden: tuple[Path, ...],
        pass_fds: tuple[int, ...],
    ) -> None:
        """Write ``source`` as ``program.py`` in a fresh directory and start it under ``mode``.

        ``pass_fds`` stay open in the program under the same numbers (pipes to another process).
        """
        self.limits, self.mode = limits, mode
        self.workdir = Path(tempfile.mkdtemp(prefix="autorl-sbx-", dir=tmp_root))
        self._out_dir = Path(tempfile.mkdtemp(prefix="autorl-sbx-out-", dir=tmp_root))
        self.proc: subprocess.Popen[bytes] | None = None
        self._result: SandboxResult | None = None
        drop = mode == "rlimits" and os.geteuid() == 0
        self._cap = TaskCap(limits.max_processes, _NOBODY if drop else os.getuid())
        self.started = time.monotonic()
        try:
            (self.workdir / "program.py").write_text(source, encoding="utf-8")
            if drop:
                for path in (self.workdir, self.workdir / "program.py"):
                    os.chown(path, _NOBODY, _NOBODY)
            # -I: ignore PYTHON* variables and the user site; -S: no site-packages (faster start,
            # stdlib only).
            argv = [python, "-I", *(["-S"] if stdlib_only else []), "program.py"]
            if mode == "namespaces":
                argv = namespace_prefix(self.workdir, python, hidden) + argv
            env = {
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "HOME": str(self.workdir),
                "TMPDIR": str(self.workdir),
                "LANG": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONHASHSEED": "0",
            }
            with open(self._out_dir / "output", "wb") as sink:
                try:
                    self.proc = subprocess.Popen(  # noqa: S603 - running untrusted code is the point of this module
                        argv,
                        cwd=self.workdir,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=sink,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                        preexec_fn=_preexec(limits, self._cap, drop),
                        close_fds=True,
                        pass_fds=pass_fds,
                    )
                except OSError as error:  # e.g. the interpreter cannot be executed
                    self._result = SandboxResult(
                        127, False, f"cannot start {argv[0]}: {error}", False, 0.0, mode
                    )
        except BaseException:
            self.finish()
            raise
        if self._result is not None:
            self._cleanup()

    def wait(self, timeout: float | None) -> int | None:
        """The exit status once the program has exited, waiting at most ``timeout`` seconds; else
        ``None``.
        """
        if self.proc is None:
            return self._result.returncode if self._result is not None else None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def finish(self, timed_out: bool = False) -> SandboxResult:
        """Kill whatever is left of the run, remove its directories and return what it did
        (idempotent).

        Args:
            timed_out: Record the run as killed at its timeout (its exit status is then ``None``).
        """
        if self._result is not None:
            return self._result
        returncode: int | None = None
        if self.proc is not None:
            _kill_group(self.proc)
            returncode = None if timed_out else self.proc.returncode
        self._cap.kill_and_remove()
        elapsed = time.monotonic() - self.started
        raw = b""
        with contextlib.suppress(OSError), open(self._out_dir / "output", "rb") as fh:
            raw = fh.read(self.limits.max_output_bytes + 1)
        self._result = SandboxResult(
            returncode,
            timed_out,
            raw[: self.limits.max_output_bytes].decode("utf-8", "replace"),
            len(raw) > self.limits.max_output_bytes,
            elapsed,
            self.mode,
        )
        self._cleanup()
        return self._result

    def _cleanup(self) -> None:
        self._cap.kill_and_remove()
        shutil.rmtree(self.workdir, ignore_errors=True)
        shutil.rmtree(self._out_dir, ignore_errors=True)

    def __enter__(self) -> SandboxRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()


def _run(
    source: str,
    limits: SandboxLimits,
    mode: Mode,
    python: str,
    tmp_root: Path | None,
    stdlib_only: bool = True,
    hidden: tuple[Path, ...] = (),
) -> SandboxResult:
    """Run ``source`` as ``program.py`` in a fresh directory under ``mode``; the directory is
    removed after.
    """
    with SandboxRun(source, limits, mode, python, tmp_root, stdlib_only, hidden, ()) as run:
        returncode = run.wait(limits.timeout_s)
        return run.finish(timed_out=returncode is None and run.proc is not None)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the run's process group (in namespace mode this also ends its PID namespace)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@functools.cache
def namespaces_problem() -> str | None:
    """Why ``namespaces`` mode cannot run here; None when the launcher runs a trivial program.

    Checked once per process (the kernel's settings do not change under a running grader).
    """
    if shutil.which("unshare") is None:
        return "`unshare` (util-linux) not found on PATH"
    limits = SandboxLimits(timeout_s=30, cpu_s=30)
    probe = _run("print('sandbox-ok')", limits, "namespaces", sys.executable, None)
    if probe.ok and "sandbox-ok" in probe.output:
        return None
    return f"the namespace probe exited {probe.returncode}: {probe.output.strip()[-500:]}"


def namespaces_required(judge: str, setting: str, problem: str) -> str:
    """What a judge that refuses to run without namespaces says (and the sweep's preflight).

    Args:
        judge: Who refuses, e.g. ``the humaneval judge``.
        setting: The config key that opts into ``rlimits`` mode.
        problem: Why namespaces do not work here (:func:`namespaces_problem`).
    """
    return (
        f"{judge} needs unprivileged user namespaces (util-linux unshare with user, mount, "
        "network and PID namespaces: sysctl kernel.unprivileged_userns_clone=1 and "
        "user.max_user_namespaces > 0, as bubblewrap needs for the cells) to hide the private "
        f"split from the tests and solutions it runs; here {problem}; enable them, or set "
        f"{setting}=rlimits to run it without them (the code it runs can then read the private "
        "split; results.csv says judge_sandbox=rlimits)"
    )


@functools.cache
def detect_mode() -> Mode:
    """``"namespaces"`` if the launcher runs a trivial program here, else ``"rlimits"`` (logged).

    For callers that accept the weaker mode; a judge that must hide files asks
    :func:`namespaces_problem` and refuses instead (``tasks/humaneval/evaluate.py``).
    """
    problem = namespaces_problem()
    if problem is None:
        return "namespaces"
    logger.warning(
        "sandbox: namespaces unavailable (%s); falling back to rlimit-only mode "
        "(no network or filesystem isolation)",
        problem,
    )
    return "rlimits"


class Sandbox:
    """Runs Python programs under :class:`SandboxLimits` in the best available isolation mode.

    Example:
        >>> box = Sandbox(SandboxLimits(timeout_s=20))
        >>> box.run_python("print(6 * 7)").output
        '42\\n'
    """

    def __init__(
        self,
        limits: SandboxLimits = SandboxLimits(),
        *,
        mode: Mode | None = None,
        python: str | None = None,
        tmp_root: Path | None = None,
        stdlib_only: bool = True,
        hidden: tuple[Path, ...] = (),
    ) -> None:
        """Choose the interpreter and the isolation mode.

        Args:
            limits: Limits of every run.
            mode: Force ``"namespaces"`` or ``"rlimits"``; ``None`` detects the best one.
            python: Interpreter for the programs (default: this process's).
            tmp_root: Where run directories are created (default: the system temp dir).
            stdlib_only: Start programs without site-packages (``python -S``): only the standard
                library is importable, and start-up is faster.
            hidden: Directories the program must not see (e.g. the private eval data): in
                namespace mode each is covered by an empty read-only tmpfs.
        """
        self.limits = limits
        self.python = python or sys.executable
        self.mode: Mode = mode or detect_mode()
        self.tmp_root = tmp_root
        self.stdlib_only = stdlib_only
        self.hidden = tuple(Path(p) for p in hidden)

    def run_python(self, source: str) -> SandboxResult:
        """Run ``source`` as ``program.py`` in a fresh directory and return what happened."""
        return _run(
            source,
            self.limits,
            self.mode,
            self.python,
            self.tmp_root,
            self.stdlib_only,
            self.hidden,
        )

    def start_python(
        self,
        source: str,
        *,
        pass_fds: tuple[int, ...] = (),
        tmp_root: Path | None = None,
        hidden: tuple[Path, ...] = (),
    ) -> SandboxRun:
        """Start ``source`` as ``program.py`` in a fresh directory and return without waiting.

        The caller waits (:meth:`SandboxRun.wait`) and must :meth:`SandboxRun.finish` the run (or
        use it as a context manager): that kills what is left and removes its directories. The
        limits apply as in :meth:`run_python`, except the timeout: the caller enforces it.

        Args:
            source: The program.
            pass_fds: File descriptors the program keeps, under the same numbers (e.g. pipe ends).
            tmp_root: Where the run's directories go, instead of the sandbox's ``tmp_root``.
            hidden: Directories hidden from this program besides the sandbox's own ``hidden``.
        """
        return SandboxRun(
            source,
            self.limits,
            self.mode,
            self.python,
            tmp_root or self.tmp_root,
            self.stdlib_only,
            self.hidden + tuple(Path(p) for p in hidden),
            tuple(pass_fds),
        )

    def run_many(self, sources: list[str], *, workers: int) -> list[SandboxResult]:
        """Run each source in its own sandbox, ``workers`` at a time; results in input order."""
        with ThreadPoolExecutor(
            max(1, workers)
        ) as pool:  # threads suffice: each run is a subprocess
            return list(pool.map(self.run_python, sources))

    def check(self) -> None:
        """Fail loudly if a trivial program does not run (a broken sandbox must never score 0).

        Raises:
            SandboxError: naming the mode, the interpreter and the program's output.
        """
        result = self.run_python("print('sandbox-ok')")
        if not (result.ok and "sandbox-ok" in result.output):
            raise SandboxError(
                f"the sandbox ({self.mode} mode, python {self.python}) cannot run a trivial "
                f"program: exit {result.returncode}, timed out {result.timed_out}, output "
                f"{result.output[-500:]!r}. In rlimit mode as root the program runs as uid 65534, "
                "which must be able to execute the interpreter; pass a world-readable one (e.g. "
                "/usr/bin/python3)."
            )
