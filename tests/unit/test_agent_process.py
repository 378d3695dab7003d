"""The agent's budget: exit classes and that nothing the agent started survives it."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from autorl.workspace.process import run_agent


def _run(tmp_path: Path, code: str, budget_s: float = 30.0, cancel: threading.Event | None = None):
    return run_agent(
        [sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ), log_path=tmp_path / "agent.log",
        budget_s=budget_s, grace_s=1.0, cancel=cancel or threading.Event(),
    )


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
        "p = subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)']);"
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
