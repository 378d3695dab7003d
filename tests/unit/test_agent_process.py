"""The agent's budget: exit classes and that nothing the agent started survives it.

Without a cgroup (``sandbox.mode=none``) the process group is stopped; with the cell's cgroup (real
cgroups: needs root, as the sweep's nodes have) every process it started is, and the limits show.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from autorl.seal.cgroups import CellCgroup, CgroupLimits, cgroup_support
from autorl.workspace.process import AgentExit, run_agent


def _run(tmp_path: Path, code: str, budget_s: float = 30.0, cancel: threading.Event | None = None):
    return run_agent(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=dict(os.environ),
        log_path=tmp_path / "agent.log",
        budget_s=budget_s,
        grace_s=1.0,
        cancel=cancel or threading.Event(),
    )


def test_output_past_the_log_cap_is_read_and_dropped(tmp_path: Path) -> None:
    """The agent prints 20 MB to a log capped at 1 MB: it is never blocked (it exits by itself, at
    once), the log holds the first MB and one line saying the rest was dropped."""
    code = "import sys\nfor _ in range(20): sys.stdout.write('y' * (1 << 20))\nsys.stdout.flush()"
    result = run_agent(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=dict(os.environ),
        log_path=tmp_path / "agent.log",
        budget_s=60,
        grace_s=1.0,
        cancel=threading.Event(),
        max_log_bytes=1 << 20,
    )
    assert result.exit_class == "exited" and result.exit_code == 0
    log = (tmp_path / "agent.log").read_bytes()
    assert log.startswith(b"y" * (1 << 20)) and len(log) < (1 << 20) + 200
    assert b"past 1048576 bytes (cell.max_log_mb) is dropped" in log


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; it only waits for its parent to reap it.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def test_exit_code_is_recorded(tmp_path: Path) -> None:
    result = _run(tmp_path, "print('hi'); raise SystemExit(3)")
    assert (result.exit_class, result.exit_code) == ("exited", 3)
    assert "hi" in (tmp_path / "agent.log").read_text()


def test_budget_kills_the_whole_process_group(tmp_path: Path) -> None:
    # The agent starts a grandchild that ignores SIGTERM, then sleeps past its budget.
    code = (
        "import subprocess, sys, time;"
        "p = subprocess.Popen([sys.executable, '-c',"
        " 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)']);"
        f"open({str(tmp_path / 'child.pid')!r}, 'w').write(str(p.pid)); time.sleep(300)"
    )
    started = time.monotonic()
    result = _run(tmp_path, code, budget_s=2.0)
    assert result.exit_class == "timeout"
    assert time.monotonic() - started < 15
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)


def test_cancel_gives_killed(tmp_path: Path) -> None:
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    result = _run(tmp_path, "import time; time.sleep(300)", cancel=cancel)
    assert result.exit_class == "killed"


def test_death_by_signal_is_a_crash(tmp_path: Path) -> None:
    result = _run(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert result.exit_class == "crashed" and result.exit_code == -11


def test_without_a_cgroup_no_limit_is_reported(tmp_path: Path) -> None:
    assert _run(tmp_path, "pass").limit_hit is None


# ------------------------------------------------------------------------- with the cell's cgroup
# (real v1)

_SUPPORT = cgroup_support()
real_cgroups = pytest.mark.skipif(
    _SUPPORT.version is None or bool(_SUPPORT.missing),
    reason=f"needs root and cgroups with pids, memory, cpu and freezer: {_SUPPORT.problems()}",
)


def _run_sealed(tmp_path: Path, code: str, group: CellCgroup, budget_s: float = 30.0) -> AgentExit:
    return run_agent(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=dict(os.environ),
        log_path=tmp_path / "agent.log",
        budget_s=budget_s,
        grace_s=1.0,
        cancel=threading.Event(),
        cgroup=group,
    )


_SETSID_CHILD = (
    "import subprocess; subprocess.Popen(['setsid', 'sh', '-c', 'echo $$ > {pid}; exec sleep 100'])"
)
_DAEMON = (
    "import os, signal, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "        open({pid!r}, 'w').write(str(os.getpid())); time.sleep(300)\n"
    "    os._exit(0)\n"
)


def _written_pid(path: Path) -> int:
    deadline = time.monotonic() + 10
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} was never written"
        time.sleep(0.05)
    return int(path.read_text())


@real_cgroups
def test_nothing_outlives_an_agent_that_exits(
    tmp_path: Path, make_group: Callable[[CgroupLimits], CellCgroup]
) -> None:
    group = make_group(CgroupLimits(max_processes=64))
    # The agent leaves a setsid child and a daemon behind, waits until both are running, and exits
    # 0.
    code = (
        _SETSID_CHILD.format(pid=tmp_path / "setsid.pid")
        + "\n"
        + _DAEMON.format(pid=str(tmp_path / "daemon.pid"))
        + f"import pathlib\nwhile not pathlib.Path({str(tmp_path / 'daemon.pid')!r}).exists(): "
        "time.sleep(0.05)\n"
    )
    result = _run_sealed(tmp_path, code, group)
    assert (result.exit_class, result.exit_code, result.limit_hit) == ("exited", 0, None)
    survivors = [_written_pid(tmp_path / "setsid.pid"), _written_pid(tmp_path / "daemon.pid")]
    assert not any(_alive(pid) for pid in survivors)
    assert group.pids() == set()


@real_cgroups
def test_at_the_budget_the_whole_cgroup_is_killed(
    tmp_path: Path, make_group: Callable[[CgroupLimits], CellCgroup]
) -> None:
    group = make_group(CgroupLimits(max_processes=64))
    code = _DAEMON.format(pid=str(tmp_path / "daemon.pid")) + "time.sleep(300)\n"
    started = time.monotonic()
    result = _run_sealed(tmp_path, code, group, budget_s=2.0)
    assert result.exit_class == "timeout" and time.monotonic() - started < 15
    assert not _alive(
        _written_pid(tmp_path / "daemon.pid")
    )  # it ignored SIGTERM and left the session
    assert group.pids() == set()


@real_cgroups
def test_the_memory_limit_is_the_exit_class(
    tmp_path: Path, make_group: Callable[[CgroupLimits], CellCgroup]
) -> None:
    group = make_group(CgroupLimits(memory_bytes=100 << 20))
    result = _run_sealed(tmp_path, "b = b'\\x01' * (400 << 20)", group)
    assert (result.exit_class, result.exit_code, result.limit_hit) == (
        "memory",
        -signal.SIGKILL,
        "memory",
    )


@real_cgroups
def test_a_refused_fork_is_recorded(
    tmp_path: Path, make_group: Callable[[CgroupLimits], CellCgroup]
) -> None:
    group = make_group(CgroupLimits(max_processes=20))
    code = (
        "import os, time\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(300); os._exit(0)\n"
        "except BlockingIOError:\n"
        "    raise SystemExit(7)\n"
    )
    result = _run_sealed(tmp_path, code, group)
    assert (result.exit_class, result.exit_code, result.limit_hit) == ("exited", 7, "pids")
    assert group.pids() == set()  # the forked children are gone with the agent


@real_cgroups
def test_the_agent_runs_inside_the_cgroup(
    tmp_path: Path, make_group: Callable[[CgroupLimits], CellCgroup]
) -> None:
    group = make_group(CgroupLimits())
    seen = tmp_path / "seen"
    code = (
        f"import pathlib; pathlib.Path({str(seen)!r})"
        ".write_text(pathlib.Path('/proc/self/cgroup').read_text())"
    )
    result = _run_sealed(tmp_path, code, group)
    assert result.exit_class == "exited"
    assert (
        f"freezer:/{group.name}\n" in seen.read_text() or f"::/{group.name}\n" in seen.read_text()
    )
