"""agent_kit.sandbox: hostile programs are stopped and harm nothing; ordinary programs just run."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_kit.sandbox import Sandbox, SandboxError, SandboxLimits, detect_mode
from tests.helpers.procs import processes_mentioning


@pytest.fixture(scope="module")
def box() -> Sandbox:
    """For programs expected to finish: a generous timeout (the machine may be busy)."""
    return Sandbox(SandboxLimits(timeout_s=60, cpu_s=60, max_processes=16))


@pytest.fixture(scope="module")
def kill() -> Sandbox:
    """For programs expected to be killed: a short timeout, small output and file limits."""
    return Sandbox(
        SandboxLimits(
            timeout_s=2, cpu_s=2, max_processes=16, max_file_bytes=1 << 20, max_output_bytes=4096
        )
    )


@pytest.fixture()
def real_home_canary() -> Iterator[Path]:
    """A file in the test user's real home directory (not $HOME, which tests may point
    elsewhere)."""
    path = Path(pwd.getpwuid(os.getuid()).pw_dir) / f".autorl-sandbox-canary-{uuid.uuid4().hex[:8]}"
    path.write_text("alive")
    yield path
    path.unlink(missing_ok=True)


def test_namespaces_work_on_this_machine(box: Sandbox) -> None:
    assert detect_mode() == "namespaces"
    assert box.mode == "namespaces"


def test_runs_a_program_in_a_fresh_private_directory(box: Sandbox) -> None:
    result = box.run_python(
        "import os, sys\nprint(os.getcwd() == os.environ['HOME'] == os.environ['TMPDIR'])\n"
        "print(sorted(os.listdir('.')))\nsys.exit(3)"
    )
    assert result.returncode == 3 and not result.timed_out and not result.ok
    assert result.output.splitlines() == ["True", "['program.py']"]
    again = box.run_python("print(6 * 7)")
    assert again.ok and again.output == "42\n"


def test_infinite_loop_is_killed_at_the_timeout(kill: Sandbox) -> None:
    result = kill.run_python("while True:\n    pass\n")
    assert result.timed_out and result.returncode is None and not result.ok


def test_fork_bomb_is_capped_and_leaves_no_process(box: Sandbox, kill: Sandbox) -> None:
    counted = box.run_python(
        "import os, time\nn = 0\ntry:\n    while n < 1000:\n        if os.fork() == 0:\n"
        "            time.sleep(60)\n        n += 1\nexcept OSError:\n    pass\nprint(n)\n"
    )
    assert counted.ok and 0 < int(counted.output.split()[-1]) < 16, counted.output
    # each child becomes a sleeper whose command line carries the marker
    marker = f"bomb-{uuid.uuid4().hex}"
    bomb = kill.run_python(
        f"import os\nwhile True:\n    try:\n        if os.fork() == 0:\n"
        f"            os.execv('/bin/sleep', [{marker!r}, '300'])\n"
        "    except OSError:\n        pass\n"
    )
    assert not bomb.ok and bomb.timed_out
    assert processes_mentioning(marker) == []


def test_setsid_child_dies_with_the_run(kill: Sandbox) -> None:
    marker = f"escape-{uuid.uuid4().hex}"
    result = kill.run_python(
        f"import os, time\nif os.fork() == 0:\n    os.setsid()\n"
        f"    os.execv('/bin/sleep', [{marker!r}, '300'])\ntime.sleep(300)\n"
    )
    assert result.timed_out
    assert processes_mentioning(marker) == []


def test_rm_rf_home_harms_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_home_canary: Path, box: Sandbox
) -> None:
    fake_home = tmp_path / "home"
    fake_home.mkdir()
    (fake_home / "canary").write_text("alive")
    monkeypatch.setenv("HOME", str(fake_home))  # what a leaked $HOME would point rm -rf ~ at
    result = box.run_python(
        f"import os\nos.system('rm -rf ~')\nos.remove({str(real_home_canary)!r})\n"
    )
    assert not result.ok and "Read-only file system" in result.output
    assert (fake_home / "canary").read_text() == "alive"
    assert real_home_canary.read_text() == "alive"


def test_filesystem_is_read_only_outside_the_run_directory(tmp_path: Path, box: Sandbox) -> None:
    target = tmp_path / "shared"
    target.mkdir(mode=0o777)
    os.chmod(target, 0o777)
    result = box.run_python(f"open({str(target / 'x')!r}, 'w').write('pwned')\n")
    assert not result.ok and "Read-only file system" in result.output
    assert list(target.iterdir()) == []


def test_hidden_directories_are_empty_inside(tmp_path: Path) -> None:
    secret = tmp_path / "private" / "eval.jsonl"
    secret.parent.mkdir()
    secret.write_text("the hidden tests")
    program = (
        f"import os\nprint(os.listdir({str(secret.parent)!r}))\n"
        f"print(open({str(secret)!r}).read())\n"
    )
    seen = Sandbox(SandboxLimits(timeout_s=60, cpu_s=60)).run_python(program)
    assert seen.ok and "the hidden tests" in seen.output  # readable unless hidden ...
    hidden = Sandbox(SandboxLimits(timeout_s=60, cpu_s=60), hidden=(secret.parent,)).run_python(
        program
    )
    assert not hidden.ok and "[]" in hidden.output and "the hidden tests" not in hidden.output
    assert secret.read_text() == "the hidden tests"  # ... and untouched outside


def test_network_is_unreachable(box: Sandbox) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    accepted: list[object] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            accepted.append(listener.accept())

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        # Reachable from here, so a failure inside the sandbox is the sandbox's doing.
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        thread.join()
        assert len(accepted) == 1
        result = box.run_python(
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
            "print('connected')\n"
        )
        assert not result.ok and "connected" not in result.output
        with pytest.raises(OSError):
            listener.accept()
    finally:
        listener.close()


def test_output_flood_is_capped(kill: Sandbox) -> None:
    result = kill.run_python("while True:\n    print('x' * 65536)\n")
    assert not result.ok
    assert result.output_truncated and len(result.output) <= 4096


def test_memory_limit(box: Sandbox) -> None:
    result = box.run_python("block = bytearray(3 << 30)\nprint('allocated')\n")
    assert not result.ok and "MemoryError" in result.output


def test_run_many_keeps_order(box: Sandbox) -> None:
    results = box.run_many([f"print({i} * {i})" for i in range(5)], workers=3)
    assert [r.output.strip() for r in results] == ["0", "1", "4", "9", "16"]


def test_started_program_keeps_only_the_passed_pipes_and_finish_kills_and_cleans_up(
    box: Sandbox, tmp_path: Path
) -> None:
    """start_python: two runs can be up at once, talk over passed pipes, and finish() reaps them."""
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    not_passed_r, not_passed_w = os.pipe()  # open here, never passed: the program must not hold it
    marker = f"sleeper-{uuid.uuid4().hex}"
    program = (
        f"import os\nmessage = os.read({to_r}, 100)\ntry:\n    os.fstat({not_passed_w})\n    "
        "leaked = b'leaked'\n"
        f"except OSError:\n    leaked = b'closed'\nos.write({from_w}, message.upper() + b' ' + "
        "leaked)\n"
        f"os.execv('/bin/sleep', [{marker!r}, '300'])\n"
    )
    try:
        run = box.start_python(program, pass_fds=(to_r, from_w), tmp_root=tmp_path)
        assert run.workdir.parent == tmp_path and (run.workdir / "program.py").is_file()
        os.close(to_r)
        os.close(from_w)
        os.write(to_w, b"ping")
        assert os.read(from_r, 100) == b"PING closed"
        assert run.wait(0.2) is None and processes_mentioning(
            marker
        )  # still running: the caller decides
        result = run.finish(timed_out=True)
    finally:
        for fd in (to_w, from_r, not_passed_r, not_passed_w):
            os.close(fd)
    assert result.timed_out and result.returncode is None and not result.ok
    assert run.finish() is result  # idempotent
    assert processes_mentioning(marker) == [] and list(tmp_path.iterdir()) == []


def test_started_program_sees_extra_hidden_directories_empty(box: Sandbox, tmp_path: Path) -> None:
    secret = tmp_path / "judge"
    secret.mkdir()
    (secret / "tests.py").write_text("assert hidden")
    with box.start_python(
        f"import os\nprint(os.listdir({str(secret)!r}))", hidden=(secret,)
    ) as run:
        assert run.wait(60) == 0
    assert run.finish().output == "[]\n"
    with box.start_python(f"import os\nprint(os.listdir({str(secret)!r}))") as run:
        assert run.wait(60) == 0
    assert run.finish().output == "['tests.py']\n"


def test_check_fails_loudly_when_the_interpreter_cannot_run(tmp_path: Path, box: Sandbox) -> None:
    box.check()
    with pytest.raises(SandboxError, match="cannot run a trivial program"):
        Sandbox(SandboxLimits(timeout_s=30), python=str(tmp_path / "no-python")).check()


def _python_for_nobody() -> str:
    """In rlimit mode as root the program runs as uid 65534: it needs an interpreter it can
    execute."""
    if os.geteuid() != 0:
        return shutil.which("python3") or "python3"
    return "/usr/bin/python3"


def test_rlimit_fallback_still_limits_time_memory_and_output(tmp_path: Path) -> None:
    python = _python_for_nobody()
    box = Sandbox(
        SandboxLimits(timeout_s=60, cpu_s=60, max_processes=64), mode="rlimits", python=python
    )
    box.check()
    assert box.run_python("import os; print(os.getcwd() == os.environ['HOME'])").output == "True\n"
    assert "MemoryError" in box.run_python("block = bytearray(3 << 30)").output
    fast = Sandbox(
        SandboxLimits(timeout_s=2, cpu_s=2, max_output_bytes=1024), mode="rlimits", python=python
    )
    spin = fast.run_python("while True:\n    pass\n")
    # On a busy machine RLIMIT_CPU (SIGKILL) may fire before the wall-clock timeout; either stops
    # it.
    assert not spin.ok and (spin.timed_out or spin.returncode == -9) and spin.elapsed_s < 15, spin
    flood = fast.run_python("while True:\n    print('x' * 65536)\n")
    assert not flood.ok and flood.output_truncated
    forks = box.run_python(
        "import os, time\nn = 0\ntry:\n    while n < 1000:\n        if os.fork() == 0:\n"
        "            time.sleep(60)\n        n += 1\nexcept OSError:\n    pass\nprint(n)\n"
    )
    assert 0 < int(forks.output.split()[-1]) < 64, forks.output
    if os.geteuid() == 0:
        root_only = tmp_path / "root-only"
        root_only.mkdir(mode=0o755)
        denied = box.run_python(f"open({str(root_only / 'x')!r}, 'w')")
        assert "Permission denied" in denied.output and not (root_only / "x").exists()


# ---- nested: inside a sealed cell's bubblewrap sandbox, as the cell's non-root uid
# ---------------------

NESTED_UID = 100123  # not a user of this machine, like a sealed cell's uid
NESTED_PROGRAM = r"""
import importlib.util, json, os, socket
from agent_kit.sandbox import Sandbox, SandboxLimits, fresh_proc_allowed
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(4)
port = listener.getsockname()[1]
socket.create_connection(("127.0.0.1", port), timeout=5).close()  # reachable from the agent itself
box = Sandbox(SandboxLimits(timeout_s=60, cpu_s=60, max_processes=16))
ran = box.run_python("import os\nprint(6 * 7, os.getuid())")
net = box.run_python(
    f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
    "print('connected')"
)
write = box.run_python("open('/tmp/outside-the-run', 'w').write('x')")
forks = box.run_python(
    "import os, time\nn = 0\ntry:\n    while n < 1000:\n        if os.fork() == 0:\n"
    "            time.sleep(60)\n        n += 1\nexcept OSError:\n    pass\nprint(n)\n"
)
from agent_kit.function_judge import FunctionJudge, Problem
problem = Problem(
    "def f(x):\n    'Twice x.'\n",
    "def check(c):\n    assert c(2) == 4\n    assert c(5) == 10\n",
    "f",
)
with FunctionJudge(box) as judge:
    judge.check()
    judged = {name: judge.judge(problem, problem.prompt + body) for name, body in {
        "right": "    return 2 * x\n",
        "exit": "    import os\n    os._exit(0)\n",
        # Nested, the enclosing /proc would show the agent's processes, the judge's among them.
        "proc": "    import os\n    print('proc:', os.listdir('/proc'))\n    return 2 * x\n",
    }.items()}
print(json.dumps({
    "uid": os.getuid(), "mode": box.mode, "fresh_proc": fresh_proc_allowed(),
    "autorl": importlib.util.find_spec("autorl") is not None,
    "ran": [ran.ok, ran.output], "net": [net.ok, net.output],
    "write": [write.ok, write.output, os.path.exists("/tmp/outside-the-run")],
    "forks": [forks.ok, forks.output],
    "judged": {name: [v.passed, v.reason, v.output] for name, v in judged.items()},
}))
"""


def _bwrap_as_cell(binds: list[Path], code_root: Path, argv: list[str]) -> list[str]:
    """A sealed cell's sandbox, as autorl.seal builds it: bwrap as root without a user namespace,
    then setpriv to a non-root uid (bwrap with --unshare-user where the tests do not run as
    root)."""
    command = [
        "bwrap",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for link in ("bin", "lib", "lib64", "sbin"):
        if Path(f"/usr/{link}").exists():
            command += ["--symlink", f"usr/{link}", f"/{link}"]
    for etc in ("/etc/alternatives", "/etc/ld.so.cache"):
        if Path(etc).exists():
            command += ["--ro-bind", etc, etc]
    command += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
    made: set[Path] = {Path("/"), Path("/tmp"), Path("/usr")}
    for path in [*binds, code_root]:
        for parent in reversed(path.parents):
            if parent not in made:
                command += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        command += ["--ro-bind", str(path), str(path)]
    command += ["--chdir", "/tmp"]
    if os.geteuid() == 0:
        return command + [
            "setpriv",
            f"--reuid={NESTED_UID}",
            f"--regid={NESTED_UID}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
            *argv,
        ]
    return command[:1] + ["--unshare-user"] + command[1:] + argv


def test_nested_in_a_sealed_cell_as_its_uid_programs_run_without_network(tmp_path: Path) -> None:
    """The scripted HumanEval reward judges completions in this sandbox inside the agent's sandbox,
    with the agent's toolchain: there a fresh /proc cannot be mounted, and everything else must
    still
    hold."""
    from autorl.seal.toolchain import (
        check_toolchain,
        toolchain_dir,
        toolchain_mounts,
        toolchain_python,
    )
    from autorl.tasks import get_task
    from autorl.workspace.layout import copy_agent_code

    directory = toolchain_dir(None)
    check_toolchain(
        directory
    )  # fails with the build command when `make test-deps` has not built it
    package = copy_agent_code(get_task("humaneval"), tmp_path / "agent_code")
    assert package is not None
    argv = [str(toolchain_python(directory)), "-c", NESTED_PROGRAM]
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(package.parent),
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
    }
    done = subprocess.run(
        _bwrap_as_cell(toolchain_mounts(directory), package.parent, argv),
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["uid"] == (NESTED_UID if os.geteuid() == 0 else os.getuid()) and not seen["autorl"]
    # Nested, the kernel refuses a new /proc (bwrap covers parts of its own): this is the case under
    # test.
    assert seen["mode"] == "namespaces" and seen["fresh_proc"] is False, (seen, done.stderr[-2000:])
    assert seen["ran"][0] and seen["ran"][1].split()[0] == "42", seen
    assert not seen["net"][0] and "connected" not in seen["net"][1], seen
    assert (
        not seen["write"][0]
        and "Read-only file system" in seen["write"][1]
        and not seen["write"][2]
    ), seen
    assert seen["forks"][0] and 0 < int(seen["forks"][1].split()[-1]) < 16, seen
    # The HumanEval reward's judge works there too, and its candidate sees no /proc at all.
    assert seen["judged"]["right"][0] and not seen["judged"]["exit"][0], seen["judged"]
    assert seen["judged"]["proc"][0] and set(seen["judged"]["proc"][2].splitlines()) == {
        "proc: []"
    }, seen["judged"]
