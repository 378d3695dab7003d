"""The cell's cgroup: the files written for v1 and v2 (fake trees), and real v1 cgroups on this
machine.

The fake trees stand in for /proc/self/{mountinfo,cgroup} and the cgroup mounts; the real tests
need root and cgroup v1 (``pids``, ``memory``, ``cpu``, ``freezer``), as the sweep's nodes have.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from autorl.errors import PrerequisiteError
from autorl.seal.cgroups import CellCgroup, CgroupLimits, cgroup_support

MB = 1 << 20

# ----------------------------------------------------------------------------------------------
# fake trees


def _fake_v1(
    tmp_path: Path, controllers: tuple[str, ...] = ("pids", "memory", "cpu,cpuacct", "freezer")
) -> Path:
    """A v1 node like this project's: the memory cgroup is a container's, the others the root."""
    sys_root, proc = tmp_path / "sys", tmp_path / "proc"
    proc.mkdir()
    mounts, members = [f"31 23 0:28 / {sys_root} rw - tmpfs tmpfs rw"], []
    for number, ctrls in enumerate(controllers, start=1):
        own = "/process_api/abc" if ctrls == "memory" else "/"
        (sys_root / ctrls / own.lstrip("/")).mkdir(parents=True)
        mounts.append(
            f"{40 + number} 31 0:{40 + number} / {sys_root / ctrls} rw,relatime - cgroup cgroup "
            f"rw,{ctrls}"
        )
        members.append(f"{number}:{ctrls}:{own}")
    mounts.append(f"60 31 0:60 / {sys_root / 'unified'} rw - cgroup2 cgroup2 rw")
    members.append("0::/")
    if "memory" in controllers:
        (sys_root / "memory/process_api/abc/memory.memsw.limit_in_bytes").write_text(
            "9223372036854771712\n"
        )
    (proc / "mountinfo").write_text("\n".join(mounts) + "\n")
    (proc / "cgroup").write_text("\n".join(members) + "\n")
    return proc


def _fake_v2(tmp_path: Path, enabled: str = "cpu memory pids") -> Path:
    """A pure v2 node whose process sits in a delegated cgroup /workers/w1 (controllers enabled for
    children)."""
    sys_root, proc = tmp_path / "sys", tmp_path / "proc"
    proc.mkdir()
    parent = sys_root / "workers/w1"
    parent.mkdir(parents=True)
    (parent / "cgroup.subtree_control").write_text(enabled + "\n")
    (parent / "cgroup.freeze").write_text("0\n")
    (proc / "mountinfo").write_text(
        f"35 24 0:30 / {sys_root} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    )
    (proc / "cgroup").write_text("0::/workers/w1\n")
    return proc


def _limits() -> CgroupLimits:
    return CgroupLimits(memory_bytes=100 * MB, cpus=0.5, max_processes=20)


def test_v1_support_finds_each_hierarchy_under_this_process_cgroup(tmp_path: Path) -> None:
    proc = _fake_v1(tmp_path)
    support = cgroup_support(proc_self=proc)
    assert support.version == "v1" and support.missing == {}
    assert set(support.controllers) == {"pids", "memory", "cpu", "freezer"}
    assert support.parents["memory"] == tmp_path / "sys/memory/process_api/abc"
    assert support.parents["cpu"] == tmp_path / "sys/cpu,cpuacct"
    assert list((tmp_path / "sys/pids").iterdir()) == []  # the probe child was removed


def test_v1_limits_are_written_to_each_hierarchy(tmp_path: Path) -> None:
    group = CellCgroup.create("cell-a", _limits(), proc_self=_fake_v1(tmp_path))
    memory = tmp_path / "sys/memory/process_api/abc/cell-a"
    assert group.version == "v1" and group.dirs["memory"] == memory
    assert (memory / "memory.limit_in_bytes").read_text() == str(100 * MB)
    assert (memory / "memory.memsw.limit_in_bytes").read_text() == str(100 * MB)  # no swap on top
    assert (
        tmp_path / "sys/cpu,cpuacct/cell-a/cpu.cfs_quota_us"
    ).read_text() == "50000"  # of the default period
    assert (tmp_path / "sys/pids/cell-a/pids.max").read_text() == "20"
    assert (tmp_path / "sys/freezer/cell-a").is_dir()


def test_a_cgroup_in_use_is_not_taken_over(tmp_path: Path) -> None:
    proc = _fake_v1(tmp_path)
    (tmp_path / "sys/freezer/cell-b").mkdir()
    (tmp_path / "sys/freezer/cell-b/cgroup.procs").write_text("4242\n")
    with pytest.raises(PrerequisiteError, match="already exists and has processes"):
        CellCgroup.create("cell-b", CgroupLimits(), proc_self=proc)


def test_v1_only_the_needed_hierarchies_are_joined(tmp_path: Path) -> None:
    group = CellCgroup.create("cell-c", CgroupLimits(), proc_self=_fake_v1(tmp_path))
    assert set(group.dirs) == {"freezer"}
    assert not (tmp_path / "sys/pids/cell-c").exists()


def test_enter_writes_the_pid_to_every_hierarchy(tmp_path: Path) -> None:
    group = CellCgroup.create("cell-d", _limits(), proc_self=_fake_v1(tmp_path))
    for folder in group.dirs.values():
        (folder / "cgroup.procs").write_text("")
    group.enter()
    for folder in group.dirs.values():
        assert (folder / "cgroup.procs").read_text() == str(os.getpid())
    assert group.pids() == {os.getpid()}


def test_v1_freeze_and_thaw(tmp_path: Path) -> None:
    group = CellCgroup.create("cell-e", _limits(), proc_self=_fake_v1(tmp_path))
    state = tmp_path / "sys/freezer/cell-e/freezer.state"
    assert group.freeze(timeout_s=1) and state.read_text() == "FROZEN"
    group.thaw()
    assert state.read_text() == "THAWED"


def test_v1_limit_hit(tmp_path: Path) -> None:
    group = CellCgroup.create("cell-f", _limits(), proc_self=_fake_v1(tmp_path))
    oom, pids = group.dirs["memory"] / "memory.oom_control", group.dirs["pids"] / "pids.events"
    oom.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    pids.write_text("max 0\n")
    assert group.limit_hit() is None
    pids.write_text("max 3\n")
    assert group.limit_hit() == "pids"
    oom.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert group.limit_hit() == "memory"
    # An old kernel without the oom_kill count: the limit was reached and the main process got
    # SIGKILL.
    oom.write_text("oom_kill_disable 0\nunder_oom 0\n")
    pids.write_text("max 0\n")
    (group.dirs["memory"] / "memory.failcnt").write_text("5\n")
    assert group.limit_hit() is None
    assert group.limit_hit(main_sigkilled=True) == "memory"


def test_v1_missing_controller(tmp_path: Path) -> None:
    proc = _fake_v1(tmp_path, controllers=("pids", "cpu,cpuacct", "freezer"))
    support = cgroup_support(proc_self=proc)
    assert set(support.missing) == {"memory"} and "memory controller" in support.missing["memory"]
    with pytest.raises(PrerequisiteError, match=r"memory: .*sandbox\.mode=none"):
        CellCgroup.create("cell-g", _limits(), proc_self=proc)
    assert not (tmp_path / "sys/pids/cell-g").exists()
    # Limits that need no memory controller still work.
    assert CellCgroup.create(
        "cell-g", CgroupLimits(cpus=1, max_processes=5), proc_self=proc
    ).dirs.keys() == {"cpu", "pids", "freezer"}


def test_a_cgroup_outside_the_mount_is_reported(tmp_path: Path) -> None:
    proc = _fake_v1(tmp_path)
    (proc / "cgroup").write_text(
        (proc / "cgroup").read_text().replace("1:pids:/", "1:pids:/../elsewhere")
    )
    mountinfo = (proc / "mountinfo").read_text()
    (proc / "mountinfo").write_text(
        mountinfo.replace(
            " / " + str(tmp_path / "sys/pids"), " /jail " + str(tmp_path / "sys/pids")
        )
    )
    assert "not visible" in cgroup_support(proc_self=proc).missing["pids"]


def test_no_cgroup_filesystem(tmp_path: Path) -> None:
    (tmp_path / "mountinfo").write_text("22 1 0:21 / /proc rw - proc proc rw\n")
    (tmp_path / "cgroup").write_text("0::/\n")
    support = cgroup_support(proc_self=tmp_path)
    assert support.version is None and set(support.missing) == {"pids", "memory", "cpu", "freezer"}
    with pytest.raises(PrerequisiteError, match="no cgroup filesystem"):
        CellCgroup.create("cell-h", CgroupLimits(), proc_self=tmp_path)


def test_bad_names_and_limits() -> None:
    with pytest.raises(ValueError, match="one path component"):
        CellCgroup.create("../escape", CgroupLimits())
    with pytest.raises(ValueError, match="max_processes must be positive"):
        CgroupLimits(max_processes=0)


def test_v2_limits_are_written(tmp_path: Path) -> None:
    group = CellCgroup.create("cell-i", _limits(), proc_self=_fake_v2(tmp_path))
    folder = tmp_path / "sys/workers/w1/cell-i"
    assert group.version == "v2" and set(group.dirs.values()) == {folder}
    assert (folder / "memory.max").read_text() == str(100 * MB)
    assert (folder / "memory.swap.max").read_text() == "0"
    assert (folder / "cpu.max").read_text() == "50000 100000"
    assert (folder / "pids.max").read_text() == "20"


def test_v2_controller_not_delegated(tmp_path: Path) -> None:
    proc = _fake_v2(tmp_path, enabled="cpu")
    support = cgroup_support(proc_self=proc)
    assert set(support.missing) == {"memory", "pids"}
    assert "cgroup.subtree_control" in support.missing["memory"]
    with pytest.raises(PrerequisiteError, match=r"pids: the pids controller is not enabled"):
        CellCgroup.create("cell-j", _limits(), proc_self=proc)


def test_v2_freeze_thaw_and_limit_hit(tmp_path: Path) -> None:
    group = CellCgroup.create("cell-k", _limits(), proc_self=_fake_v2(tmp_path))
    folder = tmp_path / "sys/workers/w1/cell-k"
    (folder / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    assert not group.freeze(timeout_s=0.1)  # the kernel has not reported it frozen
    assert (folder / "cgroup.freeze").read_text() == "1"
    (folder / "cgroup.events").write_text("populated 1\nfrozen 1\n")
    assert group.freeze(timeout_s=1)
    group.thaw()
    assert (folder / "cgroup.freeze").read_text() == "0"
    (folder / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 0\n")
    (folder / "pids.events").write_text("max 0\n")
    assert group.limit_hit() is None
    (folder / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n")
    assert group.limit_hit() == "memory"


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process of ours (in no cell cgroup) that a fake cgroup lists as its member."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def test_v2_kill_uses_cgroup_kill_when_present(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    group = CellCgroup.create("cell-l", _limits(), proc_self=_fake_v2(tmp_path))
    folder = tmp_path / "sys/workers/w1/cell-l"
    (folder / "cgroup.procs").write_text(f"{sleeper.pid}\n")
    (folder / "cgroup.kill").write_text("")
    assert not group.kill(timeout_s=0.3)  # the fake file keeps listing it
    assert (folder / "cgroup.kill").read_text() == "1"
    assert sleeper.poll() is None  # the kernel kills, not us


def test_v2_kill_without_cgroup_kill_freezes_and_signals(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    group = CellCgroup.create("cell-m", _limits(), proc_self=_fake_v2(tmp_path))
    folder = tmp_path / "sys/workers/w1/cell-m"
    (folder / "cgroup.procs").write_text(f"{sleeper.pid}\n")
    (folder / "cgroup.events").write_text("populated 1\nfrozen 1\n")
    assert not group.kill(timeout_s=0.3)
    assert sleeper.wait(timeout=5) == -signal.SIGKILL
    assert (folder / "cgroup.freeze").read_text() == "0"  # thawed after the kill


# ----------------------------------------------------------------------------------------------
# real v1

_SUPPORT = cgroup_support()
real_v1 = pytest.mark.skipif(
    _SUPPORT.version != "v1" or bool(_SUPPORT.missing),
    reason=f"needs root and cgroup v1 with pids, memory, cpu and freezer: {_SUPPORT.problems()}",
)


def _alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    try:
        return "zombie" not in status.read_text()
    except FileNotFoundError:
        return False


def _run_in(
    group: CellCgroup, code: str, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in ``group`` until its main process exits (files, not pipes: its children may
    keep them open)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", code], preexec_fn=group.enter, stdout=out, stderr=err
        )
        code_ = proc.wait(timeout=timeout_s)
        out.seek(0), err.seek(0)
        return subprocess.CompletedProcess(
            proc.args, code_, out.read().decode(), err.read().decode()
        )


def _wait_for(path: Path, timeout_s: float = 10) -> int:
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} was never written"
        time.sleep(0.05)
    return int(path.read_text())


@real_v1
def test_kill_ends_setsid_children_and_daemons(
    tmp_path: Path, make_group: Callable[[CgroupLimits], CellCgroup]
) -> None:
    group = make_group(CgroupLimits(max_processes=50))
    setsid_pid, daemon_pid = tmp_path / "setsid.pid", tmp_path / "daemon.pid"
    code = (
        "import os, subprocess, time\n"
        f"subprocess.Popen(['setsid', 'sh', '-c', 'echo $$ > {setsid_pid}; exec sleep 100'])\n"
        "if os.fork() == 0:\n"  # the classic daemon: fork, setsid, fork, parent exits
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        open({str(daemon_pid)!r}, 'w').write(str(os.getpid())); time.sleep(100)\n"
        "    os._exit(0)\n"
    )
    assert _run_in(group, code).returncode == 0  # the agent has exited; its offspring has not
    survivors = {_wait_for(setsid_pid), _wait_for(daemon_pid)}
    assert all(_alive(pid) for pid in survivors) and survivors <= group.pids()
    assert group.kill(timeout_s=10)
    assert not any(_alive(pid) for pid in survivors) and group.pids() == set()


@real_v1
def test_memory_limit_oom_kills(make_group: Callable[[CgroupLimits], CellCgroup]) -> None:
    group = make_group(CgroupLimits(memory_bytes=100 * MB))
    assert (group.dirs["memory"] / "memory.limit_in_bytes").read_text().strip() == str(100 * MB)
    # Bytes that are written, so every page is charged (a zeroed bytearray may stay untouched).
    result = _run_in(group, "b = b'\\x01' * (400 << 20); print('allocated')")
    assert result.returncode == -signal.SIGKILL and "allocated" not in result.stdout
    assert group.limit_hit() == "memory"


@real_v1
def test_process_cap_refuses_forks(make_group: Callable[[CgroupLimits], CellCgroup]) -> None:
    group = make_group(CgroupLimits(max_processes=20))
    code = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    while n < 200:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60); os._exit(0)\n"
        "        n += 1\n"
        "except BlockingIOError:\n"
        "    print('refused after', n)\n"
    )
    result = _run_in(group, code)
    assert "refused after" in result.stdout, result.stderr
    assert int(result.stdout.split()[-1]) < 20
    assert group.limit_hit() == "pids"
    assert 0 < len(group.pids()) < 20  # the forked children are still there ...
    assert group.kill(timeout_s=10) and group.pids() == set()  # ... until the kill


@real_v1
def test_cpu_quota_throttles(make_group: Callable[[CgroupLimits], CellCgroup]) -> None:
    group = make_group(CgroupLimits(cpus=0.5))
    assert (group.dirs["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "50000"
    assert (group.dirs["cpu"] / "cpu.cfs_period_us").read_text().strip() == "100000"
    _run_in(group, "import time\nend = time.monotonic() + 0.5\nwhile time.monotonic() < end: pass")
    stat = dict(line.split() for line in (group.dirs["cpu"] / "cpu.stat").read_text().splitlines())
    assert int(stat["nr_throttled"]) > 0
    assert group.limit_hit() is None


@real_v1
def test_frozen_processes_do_not_run(
    tmp_path: Path, make_group: Callable[[CgroupLimits], CellCgroup]
) -> None:
    group = make_group(CgroupLimits())
    ticks = tmp_path / "ticks"
    code = f"import time\nwhile True:\n    open({str(ticks)!r}, 'a').write('.'); time.sleep(0.05)"
    proc = subprocess.Popen([sys.executable, "-c", code], preexec_fn=group.enter)
    try:
        _wait_for_ticks(ticks)
        assert group.freeze(timeout_s=5)
        before = ticks.read_text()
        time.sleep(0.5)
        assert ticks.read_text() == before
        group.thaw()
        _wait_for_ticks(ticks, more_than=len(before))
    finally:
        assert group.kill(timeout_s=10)
        assert proc.wait(timeout=5) == -signal.SIGKILL


def _wait_for_ticks(path: Path, more_than: int = 0) -> None:
    deadline = time.monotonic() + 10
    while not (path.exists() and len(path.read_text()) > more_than):
        assert time.monotonic() < deadline
        time.sleep(0.05)


@real_v1
def test_remove_is_idempotent_and_cleans_up(
    make_group: Callable[[CgroupLimits], CellCgroup],
) -> None:
    group = make_group(CgroupLimits(memory_bytes=64 * MB, cpus=1, max_processes=8))
    proc = subprocess.Popen(["sleep", "100"], preexec_fn=group.enter)
    group.remove()  # kills what is in it first
    assert proc.wait(timeout=5) == -signal.SIGKILL
    assert not any(folder.exists() for folder in group.dirs.values())
    group.remove()
