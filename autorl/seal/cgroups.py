"""The cell's cgroup (docs/design.md#a-cells-life, docs/threat-model.md): every process of the agent
is in it, limited and killable as one.

A :class:`CellCgroup` is created under the *current process's* cgroup (the Workspace actor's), in
each hierarchy it needs; the agent's first process joins it between fork and exec
(:meth:`CellCgroup.enter`), so everything the agent starts is in it too, also after ``setsid()``, a
double fork or a daemon's detach: a task cannot leave a cgroup whose files it may not write. At
the budget :meth:`CellCgroup.kill` freezes the group (no fork can race the kill), SIGKILLs every
member, thaws it and waits until it is empty.

Limits follow the cell's resources (:class:`CgroupLimits`): memory (no swap on top), a CPU quota
and a cap on tasks (processes and threads). :meth:`CellCgroup.limit_hit` says afterwards whether
the OOM killer killed something in the group (``"memory"``) or a fork was refused at the task cap
(``"pids"``).

Both cgroup versions are supported:

- **v1** (separate hierarchies, e.g. ``/sys/fs/cgroup/{pids,memory,cpu,freezer}``): one child per
  hierarchy. Files: ``memory.limit_in_bytes`` (+ ``memory.memsw.limit_in_bytes`` where swap is
  accounted), ``cpu.cfs_quota_us``, ``pids.max``, ``freezer.state``; the OOM kills are counted in
  ``memory.oom_control`` (``oom_kill``), refused forks in ``pids.events`` (``max``).
- **v2** (one unified tree): one child; its controllers must be enabled in the parent's
  ``cgroup.subtree_control`` (v2's no-internal-process rule means the parent is the root cgroup
  or a cgroup delegated for this purpose). Files: ``memory.max``, ``memory.swap.max``, ``cpu.max``,
  ``pids.max``, ``cgroup.freeze``, ``cgroup.kill`` (kernel >= 5.14, used when present),
  ``memory.events`` (``oom_kill``), ``pids.events`` (``max``).

A hybrid node (v1 controllers plus an empty unified mount, like this project's machines) is
treated as v1. :func:`cgroup_support` tells the preflight what is usable, and why not.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal

from autorl.errors import PrerequisiteError

logger = logging.getLogger(__name__)

Version = Literal["v1", "v2"]
#: The controllers a cell's cgroup may use; ``freezer`` is always needed (kill at the budget).
CONTROLLERS = ("pids", "memory", "cpu", "freezer")
_PROC_SELF = Path("/proc/self")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
_V2_CPU_PERIOD_US = 100_000
_OPT_OUT = "or run without the sandbox: sandbox.mode=none"


@dataclass(frozen=True)
class CgroupLimits:
    """Limits of one cell's cgroup; ``None`` leaves that resource unlimited.

    Attributes:
        memory_bytes: Memory of all the agent's processes together (page cache included); past it
            the kernel's OOM killer kills one of them. No swap is allowed on top.
        cpus: CPU time per wall-clock time, e.g. 0.5 or 2 (a CFS quota).
        max_processes: Tasks (processes and threads) at once; a fork past it fails with EAGAIN.
    """

    memory_bytes: int | None = None
    cpus: float | None = None
    max_processes: int | None = None

    def __post_init__(self) -> None:
        """Reject limits the kernel would refuse or that could never run anything."""
        for name, value in (
            ("memory_bytes", self.memory_bytes),
            ("cpus", self.cpus),
            ("max_processes", self.max_processes),
        ):
            if value is not None and not value > 0:
                raise ValueError(
                    f"CgroupLimits.{name} must be positive or None (unlimited), got {value!r}"
                )

    def controllers(self) -> tuple[str, ...]:
        """The controllers these limits need (``freezer`` always: the group is frozen to kill
        it)."""
        needed = ["freezer"]
        if self.memory_bytes is not None:
            needed.append("memory")
        if self.cpus is not None:
            needed.append("cpu")
        if self.max_processes is not None:
            needed.append("pids")
        return tuple(needed)


@dataclass(frozen=True)
class CgroupSupport:
    """What this node's cgroups allow (for the preflight).

    Attributes:
        version: ``"v1"``, ``"v2"`` or ``None`` (no cgroup filesystem mounted).
        controllers: The controllers of :data:`CONTROLLERS` a cell's cgroup can use here.
        missing: Each unusable controller, with a one-line reason that says how to fix it.
        parents: Where a cell's cgroup would be created, per usable controller (v2: the same
            folder).
    """

    version: Version | None
    controllers: tuple[str, ...]
    missing: dict[str, str] = field(default_factory=dict)
    parents: dict[str, Path] = field(default_factory=dict)

    def problems(self, needed: tuple[str, ...] = CONTROLLERS) -> list[str]:
        """``"<controller>: <reason>"`` for each controller of ``needed`` that is missing."""
        return [f"{name}: {self.missing[name]}" for name in needed if name in self.missing]


def _read(path: Path) -> str:
    return path.read_text(encoding="ascii", errors="replace")


def _write(path: Path, value: str) -> None:
    # Plain open/write/close: a control file takes one value per write.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _counter(path: Path, key: str) -> int | None:
    """The value of ``key`` in a flat-keyed file (``memory.events``, ``pids.events``,
    ``memory.oom_control``)."""
    try:
        for line in _read(path).splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == key:
                return int(parts[1])
    except (OSError, ValueError):
        return None
    return None


@dataclass(frozen=True)
class _Mount:
    root: str
    point: Path
    fstype: str
    options: frozenset[str]


def _mounts(proc_self: Path) -> list[_Mount]:
    mounts = []
    for line in _read(proc_self / "mountinfo").splitlines():
        fields, _, tail = line.partition(" - ")
        parts, rest = fields.split(), tail.split()
        if len(parts) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        # Mountinfo escapes spaces and the like as octal (\040).
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[4])
        mounts.append(_Mount(parts[3], Path(point), rest[0], frozenset(rest[2].split(","))))
    return mounts


def _visible(mount: _Mount, path: str) -> Path | None:
    """Where cgroup ``path`` of the mount's hierarchy appears in the filesystem (containers mount
    a subtree)."""
    relative = os.path.relpath(path, mount.root)
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return None
    return mount.point / relative if relative != os.curdir else mount.point


def _probe(parent: Path) -> str | None:
    """``None`` if a child cgroup can be made under ``parent`` (made and removed at once), else
    why not."""
    probe = parent / f"autorl-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError as error:
        return (
            f"cannot create a cgroup under {parent} ({error.strerror}); run the sweep as root or "
            "delegate that cgroup to the sweep's user"
        )
    with contextlib.suppress(OSError):
        probe.rmdir()
    return None


def cgroup_support(*, proc_self: Path = _PROC_SELF, probe: bool = True) -> CgroupSupport:
    """Which controllers a cell's cgroup can use on this node, and why the others cannot be used.

    Args:
        proc_self: Where ``mountinfo`` and ``cgroup`` of this process are read (tests pass a fake).
        probe: Also create and remove a child cgroup in each place to prove it may be written.
    """
    try:
        mounts = _mounts(proc_self)
        memberships = [
            line.split(":", 2)
            for line in _read(proc_self / "cgroup").splitlines()
            if line.count(":") >= 2
        ]
    except OSError as error:
        reason = f"cannot read this process's cgroups ({error}); is /proc mounted?"
        return CgroupSupport(None, (), dict.fromkeys(CONTROLLERS, reason))
    v1 = [m for m in mounts if m.fstype == "cgroup" and m.options & set(CONTROLLERS)]
    if v1:
        return _support_v1(v1, memberships, probe)
    unified = [m for m in mounts if m.fstype == "cgroup2"]
    own = next((path for hid, ctrls, path in memberships if hid == "0" and not ctrls), None)
    if unified and own is not None:
        return _support_v2(unified, own, probe)
    reason = (
        "no cgroup filesystem is mounted (see /proc/self/mountinfo); "
        "mount cgroup v2 at /sys/fs/cgroup"
    )
    return CgroupSupport(None, (), dict.fromkeys(CONTROLLERS, reason))


def _support_v1(mounts: list[_Mount], memberships: list[list[str]], probe: bool) -> CgroupSupport:
    usable: list[str] = []
    missing: dict[str, str] = {}
    parents: dict[str, Path] = {}
    probed: dict[Path, str | None] = {}
    for name in CONTROLLERS:
        hierarchy = [m for m in mounts if name in m.options]
        own = next((path for _, ctrls, path in memberships if name in ctrls.split(",")), None)
        if not hierarchy:
            missing[name] = (
                f"no cgroup v1 hierarchy with the {name} controller is mounted (mixed v1/v2 "
                f"setups are not supported); mount one at /sys/fs/cgroup/{name}"
            )
            continue
        if own is None:
            missing[name] = f"this process is in no {name} cgroup (see /proc/self/cgroup)"
            continue
        parent = next(
            (p for p in (_visible(m, own) for m in hierarchy) if p is not None and p.is_dir()), None
        )
        if parent is None:
            missing[name] = (
                f"this process's {name} cgroup {own} is not visible under "
                f"{', '.join(str(m.point) for m in hierarchy)}"
            )
            continue
        if probe:
            if parent not in probed:
                probed[parent] = _probe(parent)
            if probed[parent] is not None:
                missing[name] = str(probed[parent])
                continue
        usable.append(name)
        parents[name] = parent
    return CgroupSupport("v1", tuple(usable), missing, parents)


def _support_v2(mounts: list[_Mount], own: str, probe: bool) -> CgroupSupport:
    parent = next(
        (p for p in (_visible(m, own) for m in mounts) if p is not None and p.is_dir()), None
    )
    if parent is None:
        points = ", ".join(str(m.point) for m in mounts)
        reason = f"this process's cgroup {own} is not visible under {points}"
        return CgroupSupport("v2", (), dict.fromkeys(CONTROLLERS, reason))
    problem = _probe(parent) if probe else None
    try:
        enabled = set(_read(parent / "cgroup.subtree_control").split())
    except OSError as error:
        enabled = set()
        problem = problem or f"cannot read {parent / 'cgroup.subtree_control'} ({error.strerror})"
    is_root = any(parent == m.point and m.root == "/" for m in mounts)
    usable: list[str] = []
    missing: dict[str, str] = {}
    for name in CONTROLLERS:
        if problem is not None:
            missing[name] = problem
        elif name == "freezer":
            # Freezing is part of v2's core (cgroup.freeze, kernel >= 5.2); the root cgroup has no
            # such file.
            if is_root or (parent / "cgroup.freeze").exists():
                usable.append(name)
            else:
                missing[name] = (
                    f"{parent / 'cgroup.freeze'} is missing (cgroup v2 freezing needs Linux >= 5.2)"
                )
        elif name in enabled:
            usable.append(name)
        else:
            missing[name] = (
                f"the {name} controller is not enabled in {parent / 'cgroup.subtree_control'}; "
                f"enable it (echo +{name} > that file, possible only while the cgroup has no "
                "processes) or delegate a cgroup to the sweep (systemd: Delegate=yes)"
            )
    return CgroupSupport("v2", tuple(usable), missing, dict.fromkeys(usable, parent))


class CellCgroup:
    """One cell's cgroup: created with its limits, joined by the agent, frozen and killed at the
    budget.

    Example (as root, on a node with cgroups)::

        group = CellCgroup.create("autorl-cell-1234", CgroupLimits(memory_bytes=8 << 30, cpus=1,
        max_processes=512)) proc = subprocess.Popen(command, preexec_fn=group.enter)
        ...  # at the budget:
        group.kill(timeout_s=10)
        group.remove()
    """

    def __init__(
        self, name: str, version: Version, dirs: dict[str, Path], limits: CgroupLimits
    ) -> None:
        """Use :meth:`create`; this only holds the folders (``dirs``: controller -> the group's
        folder)."""
        self.name = name
        self.version: Version = version
        self.limits = limits
        self.dirs = dict(dirs)
        self._folders = tuple(dict.fromkeys(self.dirs.values()))
        # Precomputed so that enter() does no work but the writes between fork and exec.
        self._procs_files = tuple(str(folder / "cgroup.procs") for folder in self._folders)
        self._removed = False

    @classmethod
    def create(cls, name: str, limits: CgroupLimits, *, proc_self: Path = _PROC_SELF) -> CellCgroup:
        """Create cgroup ``name`` under this process's cgroup in every hierarchy ``limits`` need,
        with those limits.

        Args:
            name: The group's folder name, unique on the node (e.g. ``autorl-<cell id>``).
            limits: Its limits; each one that is set needs its controller.
            proc_self: Where ``mountinfo`` and ``cgroup`` are read (tests pass a fake tree).

        Raises:
            ValueError: ``name`` is not one plain path component.
            PrerequisiteError: a controller the limits need is missing, or the folder cannot be
                made; the message names it and how to fix it.
        """
        if not _NAME.fullmatch(name):
            raise ValueError(
                f"cgroup name {name!r} must be one path component of letters, digits, '.', '_' or "
                "'-'"
            )
        support = cgroup_support(proc_self=proc_self, probe=False)
        needed = limits.controllers()
        problems = support.problems(needed)
        if support.version is None or problems:
            raise PrerequisiteError(
                f"the cell's cgroup cannot be created: {'; '.join(problems)}. Fix the node's "
                f"cgroups, {_OPT_OUT}"
            )
        dirs = {ctrl: support.parents[ctrl] / name for ctrl in needed}
        made: list[Path] = []
        try:
            for folder in dict.fromkeys(dirs.values()):
                try:
                    folder.mkdir()
                except FileExistsError:
                    # A leftover of a crashed run is replaced (fresh counters, not frozen) if
                    # nothing runs in it.
                    if _read(folder / "cgroup.procs").split():
                        raise PrerequisiteError(
                            f"cgroup {folder} already exists and has processes; "
                            "cell cgroup names must be unique on a node"
                        ) from None
                    folder.rmdir()
                    folder.mkdir()
                made.append(folder)
            group = cls(name, support.version, dirs, limits)
            group._apply_limits({ctrl: support.parents[ctrl] for ctrl in needed})
        except OSError as error:
            for folder in made:
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise PrerequisiteError(
                f"cannot create or configure cgroup {name} ({error}); {_OPT_OUT}"
            ) from error
        logger.debug("cgroup %s (%s) created: %s", name, support.version, limits)
        return group

    def _apply_limits(self, parents: dict[str, Path]) -> None:
        limits = self.limits
        if self.version == "v1":
            if limits.memory_bytes is not None:
                _write(self.dirs["memory"] / "memory.limit_in_bytes", str(limits.memory_bytes))
                # memsw (memory + swap) exists only where swap is accounted; the same value means no
                # swap.
                if (parents["memory"] / "memory.memsw.limit_in_bytes").exists():
                    _write(
                        self.dirs["memory"] / "memory.memsw.limit_in_bytes",
                        str(limits.memory_bytes),
                    )
            if limits.cpus is not None:
                try:
                    period = int(_read(self.dirs["cpu"] / "cpu.cfs_period_us"))
                except (OSError, ValueError):
                    period = _V2_CPU_PERIOD_US  # the kernel's default period
                _write(
                    self.dirs["cpu"] / "cpu.cfs_quota_us",
                    str(max(1000, round(limits.cpus * period))),
                )
            if limits.max_processes is not None:
                _write(self.dirs["pids"] / "pids.max", str(limits.max_processes))
            return
        folder = self._folders[0]
        if limits.memory_bytes is not None:
            _write(folder / "memory.max", str(limits.memory_bytes))
            try:
                _write(folder / "memory.swap.max", "0")
            except OSError as error:  # no swap accounting on this kernel: nothing to forbid
                logger.debug("cgroup %s: memory.swap.max not set (%s)", self.name, error)
        if limits.cpus is not None:
            _write(
                folder / "cpu.max",
                f"{max(1000, round(limits.cpus * _V2_CPU_PERIOD_US))} {_V2_CPU_PERIOD_US}",
            )
        if limits.max_processes is not None:
            _write(folder / "pids.max", str(limits.max_processes))

    def enter(self) -> None:
        """Move the calling process into the group (every hierarchy): the ``preexec_fn`` between
        fork and exec."""
        pid = str(os.getpid()).encode()
        for path in self._procs_files:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def pids(self) -> set[int]:
        """The processes in the group now (exited ones are not listed, even before they are
        reaped)."""
        found: set[int] = set()
        for folder in self._folders:
            with contextlib.suppress(FileNotFoundError):
                found.update(int(pid) for pid in _read(folder / "cgroup.procs").split())
        return found

    def signal_all(self, sig: signal.Signals) -> None:
        """Send ``sig`` to every process in the group."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def wait_empty(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the group to have no process; whether it is empty."""
        deadline = time.monotonic() + timeout_s
        while self.pids():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def freeze(self, timeout_s: float = 5.0) -> bool:
        """Freeze every process of the group; whether the kernel reports it frozen within
        ``timeout_s``.

        A task in uninterruptible sleep can keep the group ``FREEZING`` for a while; the caller goes
        on.
        """
        if self.version == "v1":
            state = self.dirs["freezer"] / "freezer.state"
            _write(state, "FROZEN")
            return self._poll(lambda: _read(state).strip() == "FROZEN", timeout_s)
        folder = self._folders[0]
        _write(folder / "cgroup.freeze", "1")
        return self._poll(lambda: _counter(folder / "cgroup.events", "frozen") == 1, timeout_s)

    def thaw(self) -> None:
        """Let the group's processes run again."""
        if self.version == "v1":
            _write(self.dirs["freezer"] / "freezer.state", "THAWED")
        else:
            _write(self._folders[0] / "cgroup.freeze", "0")

    @staticmethod
    def _poll(done: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(OSError):
                if done():
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def kill(self, timeout_s: float = 10.0) -> bool:
        """SIGKILL every process of the group, so none survives; whether it is empty within
        ``timeout_s``.

        The group is frozen first: a process cannot fork, exit-and-respawn or detach while its
        siblings are being killed. A killed frozen task dies when the group is thawed. With v2's
        ``cgroup.kill`` the kernel does all of it at once.
        """
        deadline = time.monotonic() + timeout_s
        kill_file = self._folders[0] / "cgroup.kill"
        while True:
            if not self.pids():
                return True
            if self.version == "v2" and kill_file.exists():
                _write(kill_file, "1")
            else:
                self.freeze(timeout_s=max(0.0, min(2.0, deadline - time.monotonic())))
                try:
                    self.signal_all(signal.SIGKILL)
                finally:
                    self.thaw()
            if self.wait_empty(max(0.0, min(1.0, deadline - time.monotonic()))):
                return True
            if time.monotonic() >= deadline:
                logger.error(
                    "cgroup %s: processes %s still alive %.0f s after SIGKILL",
                    self.name,
                    sorted(self.pids()),
                    timeout_s,
                )
                return False

    def limit_hit(self, *, main_sigkilled: bool = False) -> str | None:
        """Which limit the group ran into: ``"memory"``, ``"pids"`` or ``None``.

        ``"memory"``: the OOM killer killed a process of the group (v1 kernels without an
        ``oom_kill`` count: the limit was reached and ``main_sigkilled``, the agent's main process
        died of SIGKILL). ``"pids"``: a fork was refused at ``max_processes``.
        """
        if "memory" in self.dirs:
            folder = self.dirs["memory"]
            if self.version == "v2":
                if (_counter(folder / "memory.events", "oom_kill") or 0) > 0:
                    return "memory"
            else:
                kills = _counter(folder / "memory.oom_control", "oom_kill")
                if kills is not None and kills > 0:
                    return "memory"
                if kills is None and main_sigkilled:
                    with contextlib.suppress(OSError, ValueError):
                        if int(_read(folder / "memory.failcnt")) > 0:
                            return "memory"
        if "pids" in self.dirs and (_counter(self.dirs["pids"] / "pids.events", "max") or 0) > 0:
            return "pids"
        return None

    def remove(self) -> None:
        """Kill what is left in the group and remove its folders; doing it again does nothing."""
        if self._removed:
            return
        if self.pids():
            self.kill(timeout_s=5.0)
        for folder in self._folders:
            for _ in range(100):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as error:
                    if error.errno != errno.EBUSY:
                        logger.warning("cgroup %s: cannot remove %s: %s", self.name, folder, error)
                        break
                    time.sleep(0.05)  # killed tasks take a moment to leave
            else:
                logger.warning("cgroup %s: %s still busy; left behind", self.name, folder)
        self._removed = True

    def __enter__(self) -> CellCgroup:
        """Use the group in a ``with`` block; it is removed at its end."""
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Remove the group (killing what is left in it)."""
        self.remove()

    def __repr__(self) -> str:
        """Name, version and folders."""
        return f"CellCgroup({self.name!r}, {self.version}, {[str(f) for f in self._folders]})"
