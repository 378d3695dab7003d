"""How a sandboxed run is confined by the kernel: its namespaces and its cap on tasks.

:mod:`agent_kit.sandbox` owns the runs (limits, start, wait, kill, results) and chooses the mode;
this module owns the two kernel mechanisms it builds them on, kept apart because they are the part
that is specific to Linux and to where the grader runs:

- the ``namespaces`` mode's command line: ``unshare`` into new user, mount, network and PID
  namespaces, then a small launcher that hides folders, makes every mount read-only but the run's
  directory, drops every capability and sets ``no_new_privs`` before it execs the program; and
  :func:`fresh_proc_allowed`, whether the run may mount a /proc of its own here;
- the cap on a run's tasks (processes and threads): a ``pids`` cgroup of its own when one can be
  created, else ``RLIMIT_NPROC`` (:class:`TaskCap`).

The behaviour of both is described in :mod:`agent_kit.sandbox`'s docstring. Like the rest of
``agent_kit`` it imports nothing of autorl.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import resource
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

# The sandbox's messages, under its name (log filters and readers look for agent_kit.sandbox).
logger = logging.getLogger("agent_kit.sandbox")
_warn_once = functools.cache(logger.warning)

# Runs in the namespaces as their root (argv: workdir, hidden dirs joined by newlines, python,
# args): hide dirs, make every mount read-only but the workdir, drop every capability for good, exec
# the program.
_LAUNCHER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        sys.stderr.write(f"sandbox launcher: {what} failed: {os.strerror(err)}\n")
        os._exit(125)
class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]
def setattr_(path, set_, clr):
    attr = MountAttr(set_, clr, 0, 0)
    # 442 = mount_setattr on x86_64 and aarch64; AT_FDCWD=-100, AT_RECURSIVE=0x8000, RDONLY=1.
    check(libc.syscall(442, -100, path.encode(), 0x8000, ctypes.byref(attr), ctypes.sizeof(attr)),
          f"mount_setattr {path}")
workdir, hidden = sys.argv[1], [p for p in sys.argv[2].split("\n") if p]
for path in hidden:  # an empty tmpfs over each hidden directory
    check(libc.mount(b"tmpfs", path.encode(), b"tmpfs", 0, b"size=4k,mode=0555"), f"hiding {path}")
check(libc.mount(workdir.encode(), workdir.encode(), None, 4096 | 16384, None), "bind mount")
setattr_("/", 1, 0)
setattr_(workdir, 0, 1)
for cap in range(64):
    if libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # PR_CAPBSET_DROP
        check(-1, f"dropping capability {cap}")
check(libc.prctl(38, 1, 0, 0, 0), "no_new_privs")  # PR_SET_NO_NEW_PRIVS
os.chdir(workdir)
os.execv(sys.argv[3], sys.argv[3:])
"""

_UNSHARE = ["--user", "--map-root-user", "--mount", "--net", "--pid", "--fork", "--kill-child"]


@functools.cache
def fresh_proc_allowed() -> bool:
    """Whether a run may mount a /proc of its own here (not where an enclosing sandbox hides parts
    of its /proc).

    Logs a warning once when it may not (see :mod:`agent_kit.sandbox`).
    """
    unshare = shutil.which("unshare") or "unshare"
    try:
        done = subprocess.run(
            [unshare, *_UNSHARE, "--mount-proc", "true"],
            capture_output=True,
            text=True,  # noqa: S603
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        logger.warning("sandbox: probing `unshare --mount-proc` failed (%s)", error)
        return False
    if done.returncode == 0:
        return True
    logger.warning(
        "sandbox: cannot mount a /proc of the run's own here (%s; nested in another sandbox?): "
        "runs keep the enclosing /proc, read-only; user, mount, network and PID namespaces still "
        "apply",
        done.stderr.strip()[-300:],
    )
    return False


def namespace_prefix(workdir: Path, python: str, hidden: tuple[Path, ...]) -> list[str]:
    """The command line that runs ``python`` with the launcher in new namespaces (the program's
    own argv follows it).
    """
    unshare = shutil.which("unshare") or "unshare"
    dirs = [Path(p) for p in hidden if Path(p).is_dir()]
    # A folder inside another hidden one is covered with it (and could not be found once that one
    # is).
    outermost = [d for d in dirs if not any(o != d and d.is_relative_to(o) for o in dirs)]
    return [
        unshare,
        *_UNSHARE,
        *(["--mount-proc"] if fresh_proc_allowed() else []),
        "--",
        python,
        "-I",
        "-S",
        "-c",
        _LAUNCHER,
        str(workdir),
        "\n".join(str(d) for d in dict.fromkeys(outermost)),
    ]


def _cgroup_parent() -> Path | None:
    """This process's cgroup in a hierarchy with the ``pids`` controller, if we may create children
    there.
    """
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        memberships = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in memberships:
        _, controllers, path = line.split(":", 2)
        for mount in mounts:
            fields, _, tail = mount.partition(" - ")
            fstype, _, options = (tail.split() + ["", "", ""])[:3]
            root, mount_point = fields.split()[3:5]
            # The mount shows the hierarchy from `root` down (containers mount their own subtree).
            parent = Path(mount_point) / os.path.relpath(path, root)
            if (
                controllers
                and fstype == "cgroup"
                and "pids" in options.split(",")
                and "pids" in controllers.split(",")
            ):
                return parent
            if not controllers and fstype == "cgroup2":
                try:
                    if "pids" in (parent / "cgroup.subtree_control").read_text().split():
                        return parent
                except OSError:
                    pass
    return None


@functools.cache
def _usable_cgroup_parent() -> Path | None:
    parent = _cgroup_parent()
    if parent is None:
        return None
    probe = parent / f"autorl-sbx-probe-{os.getpid()}"
    try:
        probe.mkdir()
        (probe / "pids.max").write_text("8")
        probe.rmdir()
    except OSError:
        return None
    return parent


class TaskCap:
    """Caps a run's tasks with its own ``pids`` cgroup, or with ``RLIMIT_NPROC`` (see
    :mod:`agent_kit.sandbox`).
    """

    def __init__(self, max_tasks: int, run_uid: int) -> None:
        self.cgroup: Path | None = None
        self.nproc: int | None = None
        parent = _usable_cgroup_parent()
        if parent is not None:
            self.cgroup = parent / f"autorl-sbx-{os.getpid()}-{uuid.uuid4().hex[:12]}"
            self.cgroup.mkdir()
            (self.cgroup / "pids.max").write_text(str(max_tasks))
        elif run_uid != 0:
            self.nproc = _tasks_of(run_uid) + max_tasks
        else:
            _warn_once(
                "sandbox: running as root without a usable pids cgroup: the number of processes "
                "of a sandboxed program is not capped (only its time, memory and the timeout kill "
                "are)"
            )

    def enter(self) -> None:
        """In the child before exec: join the cgroup (or set ``RLIMIT_NPROC``)."""
        if self.cgroup is not None:
            (self.cgroup / "cgroup.procs").write_text(str(os.getpid()))
        elif self.nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (self.nproc, self.nproc))

    def kill_and_remove(self) -> None:
        """SIGKILL whatever is left in the cgroup and remove it."""
        if self.cgroup is None:
            return
        for _ in range(1000):  # 10 s at most
            try:
                pids = [int(p) for p in (self.cgroup / "cgroup.procs").read_text().split()]
            except OSError:
                pids = []
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            try:
                self.cgroup.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                time.sleep(0.01)  # killed tasks take a moment to leave the cgroup
                continue
            self.cgroup = None
            return
        logger.warning("sandbox: could not remove cgroup %s", self.cgroup)


def _tasks_of(uid: int) -> int:
    """Tasks (threads included) whose real uid is ``uid``: what ``RLIMIT_NPROC`` counts."""
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(
                line.split(":", 1) for line in status.read_text().splitlines() if ":" in line
            )
            if int(fields.get("Uid", "-1 0").split()[0]) == uid:
                count += int(fields.get("Threads", "1").strip())
        except (OSError, ValueError):
            continue
    return count
