"""The sealed launch's pieces on the real bubblewrap: its command line, what a sandbox shows, the
forwarder.

A whole sealed cell (Workspace actor, grading API over the forwarder, hostile agent) is
tests/integration/test_hostile_agent.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autorl.schema import SandboxNetwork
from autorl.seal import forward
from autorl.seal.bwrap import Mount, SandboxSpec, bwrap_command
from autorl.serving import ServerThread, bind_tcp, bind_unix

BWRAP = shutil.which(
    "bwrap"
)  # `make test` installs it (apt-get install bubblewrap); without it these tests fail
AS_ROOT = os.geteuid() == 0
AGENT_UID = 200_777


def _sandbox(
    tmp_path: Path,
    script: str,
    *,
    network: SandboxNetwork = SandboxNetwork.none,
    extra: tuple[Mount, ...] = (),
) -> tuple[subprocess.Popen[str], Path]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    uid = AGENT_UID if AS_ROOT else None
    if uid is not None:
        os.chown(workspace, uid, uid)
    assert BWRAP is not None
    spec = SandboxSpec(BWRAP, (Mount(workspace, writable=True), *extra), workspace, network, uid)
    proc = subprocess.Popen(
        bwrap_command(spec, ["/bin/sh", "-c", script]),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    return proc, workspace


def test_command_line_mounts_ancestors_then_paths_and_drops_the_uid() -> None:
    spec = SandboxSpec(
        "/usr/bin/bwrap",
        (Mount(Path("/a/b/model")), Mount(Path("/a/ws"), writable=True)),
        Path("/a/ws"),
        SandboxNetwork.host,
        200_001,
    )
    argv = bwrap_command(spec, ["run"])
    assert "--unshare-net" not in argv and "--unshare-pid" in argv and "--unshare-user" not in argv
    dirs = [argv[i + 1] for i, a in enumerate(argv) if a == "--dir"]
    assert dirs == [
        "/etc",
        "/a",
        "/a/b",
    ]  # created empty (0755); /a/ws and /a/b/model are mounts, not bare folders
    assert argv[argv.index("--ro-bind", argv.index("/a/b")) + 1] == "/a/b/model"
    setpriv = argv.index("/usr/bin/setpriv")
    assert (
        argv[setpriv - 1] == "--"
        and "--reuid=200001" in argv[setpriv:]
        and argv[-2:] == ["--", "run"]
    )


def test_unprivileged_launch_uses_a_user_namespace_and_no_setpriv() -> None:
    spec = SandboxSpec("bwrap", (), Path("/w"), SandboxNetwork.none, None)
    argv = bwrap_command(spec, ["run"])
    assert (
        "--unshare-user" in argv
        and "--unshare-net" in argv
        and not any("setpriv" in a for a in argv)
    )


def test_sandbox_shows_only_its_mounts_and_runs_as_a_non_root_host_uid(tmp_path: Path) -> None:
    secret = tmp_path / "private" / "eval.jsonl"
    secret.parent.mkdir()
    secret.write_text("answer")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    script = (
        f"sleep 1; cat {secret} && echo LEAK-private; echo x > {model}/config.json && echo "
        "LEAK-model-writable; "
        f"cat {model}/config.json >/dev/null && echo model-readable; echo ok > $PWD/out && echo "
        "ws-writable; "
        "ls /proc | grep -cE '^[0-9]+$'; cat /proc/net/dev | tail -n +3 | cut -d: -f1; "
        "test -e /root/.ray && echo LEAK-ray; echo x > /etc/x 2>/dev/null && echo LEAK-etc; "
        "python3 -c 'import autorl' 2>/dev/null && echo LEAK-autorl; id -u"
    )
    proc, workspace = _sandbox(tmp_path, script, extra=(Mount(model),))
    time.sleep(0.5)
    if AS_ROOT:  # seen from outside: the agent's shell is the dropped uid on the host
        uids = {
            int(Path(f"/proc/{pid}/status").read_text().split("Uid:")[1].split()[0])
            for pid in _descendants(proc.pid)
            if Path(f"/proc/{pid}/status").exists()
        }
        assert AGENT_UID in uids
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert "LEAK" not in output, output
    assert "model-readable" in output and "ws-writable" in output, output
    lines = output.split()
    assert lines[-1] == str(AGENT_UID if AS_ROOT else os.getuid())
    interfaces = [
        line.strip() for line in output.splitlines() if line.strip() in ("lo", "eth0", "ens3")
    ]
    assert interfaces == ["lo"], output  # a network namespace of its own: loopback only
    assert (workspace / "out").read_text() == "ok\n"


def test_pid_namespace_hides_every_other_process(tmp_path: Path) -> None:
    proc, _ = _sandbox(
        tmp_path,
        "ls /proc | grep -E '^[0-9]+$' | wc -l; cat /proc/1/environ >/dev/null 2>&1 && echo LEAK",
    )
    output, _ = proc.communicate(timeout=30)
    assert "LEAK" not in output
    assert int(output.split()[0]) <= 6, output  # bwrap's init, the shell and its pipeline


def _descendants(pid: int) -> list[int]:
    found, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        for task in Path(f"/proc/{parent}/task").glob("*/children"):
            with_children = [int(c) for c in task.read_text().split()]
            found += with_children
            frontier += with_children
    return found


def test_forwarder_serves_a_unix_socket_at_a_loopback_port(tmp_path: Path) -> None:
    # type: ignore[misc]
    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        assert scope["type"] == "http"
        body = f"{scope['method']} {scope['path']}".encode()
        # type: ignore[operator]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})  # type: ignore[operator]

    probe = bind_tcp("127.0.0.1")
    port = probe.getsockname()[1]
    # the forwarder listens there (a race with other programs is possible but unlikely)
    probe.close()
    with ServerThread(app, bind_unix(tmp_path / "api.sock"), name="unix-api", lifespan="off"):
        client = (
            "import urllib.request; "
            f"print(urllib.request.urlopen('http://127.0.0.1:{port}/submit', "
            "data=b'{}').read().decode())"
        )
        done = subprocess.run(
            [
                sys.executable,
                "-I",
                "-S",
                forward.__file__,
                f"--forward={port}={tmp_path / 'api.sock'}",
                "--",
                sys.executable,
                "-c",
                client,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "POST /submit"


def test_forwarder_finishes_a_request_whose_client_hung_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that closes while its request is still served: the forwarder still relays, then
    closes (before the fix the connection's task was garbage-collected mid-flight and the upstream
    left open)."""
    import asyncio
    import gc

    async def scenario() -> bool:
        request_seen = asyncio.Event()
        upstream_eof = asyncio.Event()

        async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readexactly(5)
            request_seen.set()
            await asyncio.sleep(0.3)  # still serving when the client hangs up
            writer.write(b"reply")
            await writer.drain()
            if await reader.read() == b"":  # the forwarder closed its side
                upstream_eof.set()
            writer.close()

        api = await asyncio.start_unix_server(upstream, str(tmp_path / "api.sock"))
        relay = await asyncio.start_server(
            forward._handler(str(tmp_path / "api.sock")), "127.0.0.1", 0
        )
        port = relay.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"hello")
        await writer.drain()
        await request_seen.wait()
        writer.close()  # hang up before the reply
        for _ in range(10):
            gc.collect()
            await asyncio.sleep(0.05)
        await asyncio.wait_for(upstream_eof.wait(), timeout=10)
        relay.close()
        api.close()
        return upstream_eof.is_set()

    with caplog.at_level("ERROR", logger="asyncio"):
        closed = asyncio.run(scenario())
        gc.collect()
    assert closed
    assert not [r for r in caplog.records if "destroyed but it is pending" in r.getMessage()]


def test_forwarder_returns_the_command_exit_status(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            forward.__file__,
            "--",
            sys.executable,
            "-c",
            "raise SystemExit(3)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3


def test_sweep_without_bubblewrap_stops_before_any_cell_naming_it_and_the_opt_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from autorl.sweep import main

    code = main(["sandbox.bwrap=/nonexistent", f"out_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2
    assert "bubblewrap" in err and "sandbox.mode=none" in err and "/nonexistent" in err
    assert not any(tmp_path.iterdir())  # no sweep folder: nothing started


def test_node_check_names_each_missing_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autorl.config import compose
    from autorl.seal import preflight
    from autorl.seal.cgroups import CgroupSupport

    monkeypatch.setattr(
        preflight,
        "cgroup_support",
        lambda: CgroupSupport("v2", ("pids",), {"memory": "not in cgroup.subtree_control"}),
    )
    cfg = compose([f"sandbox.toolchain={tmp_path / 'no-toolchain'}"])
    problems = preflight.sandbox_problems(cfg)
    assert any("memory: not in cgroup.subtree_control" in p for p in problems), problems
    assert any("no-toolchain" in p for p in problems), problems
    assert all("sandbox.mode=none" in p for p in problems)
    assert (
        preflight.sandbox_problems(compose(["sandbox.mode=none", "sandbox.bwrap=/nonexistent"]))
        == []
    )


def test_sealed_agent_environment_keeps_nothing_of_the_node_but_locale(tmp_path: Path) -> None:
    from autorl.config import compose
    from autorl.seal.launch import CellSeal

    node = {
        "LANG": "C.UTF-8",
        "AWS_SECRET_ACCESS_KEY": "s3cret",
        "RAY_ADDRESS": "10.0.0.1:6379",
        "PATH": "/root/.pyenv/shims:/usr/bin",
        "CUDA_VISIBLE_DEVICES": "1",
    }
    sealed = CellSeal(compose([]), "c1", tmp_path)
    env = sealed.base_env(node, tmp_path / "home")
    assert "AWS_SECRET_ACCESS_KEY" not in env and "RAY_ADDRESS" not in env
    assert env["PATH"].split(":")[0] == str(
        Path(sealed.python).parent
    )  # the toolchain first; no pyenv shims
    # A cell without GPUs gets none of the node's (tests/unit/test_seal_gpus.py: one with GPUs).
    assert (
        "CUDA_VISIBLE_DEVICES" not in env
        and env["HF_HUB_OFFLINE"] == "1"
        and env["HOME"] == str(tmp_path / "home")
    )
    assert (
        sealed.mode_label() == "bwrap" and (sealed.uid or 0) >= 200_000
        if AS_ROOT
        else sealed.uid is None
    )

    unsealed = CellSeal(compose(["sandbox.mode=none"]), "c1", tmp_path)
    assert unsealed.base_env(node, tmp_path) == node and unsealed.mode_label() == "none"
    assert unsealed.wrap(
        ["run"], workspace=tmp_path, home=tmp_path, base_model=tmp_path, read_only=[]
    ) == ["run"]
    assert unsealed.cgroup() is None and unsealed.python == sys.executable
    host_net = CellSeal(compose(["sandbox.network=host"]), "c1", tmp_path)
    assert host_net.mode_label() == "bwrap+host-network"
    sock = host_net.bind("grading")  # the node's network: plain loopback TCP, URL unchanged
    try:
        assert host_net.agent_url("grading", "http://127.0.0.1:1") == "http://127.0.0.1:1"
    finally:
        sock.close()


def test_sealed_services_are_unix_sockets_the_agent_reaches_at_fixed_loopback_ports(
    tmp_path: Path,
) -> None:
    from autorl.config import compose
    from autorl.seal.launch import SERVICE_PORTS, CellSeal

    cell_dir = tmp_path / ("long-" * 30)  # longer than a unix socket path may be
    cell_dir.mkdir()
    seal = CellSeal(compose([]), "c1", cell_dir)
    sock = seal.bind("grading")
    try:
        assert (cell_dir / "sockets" / "grading.sock").is_socket()
        assert (
            seal.agent_url("grading", "http+unix://x")
            == f"http://127.0.0.1:{SERVICE_PORTS['grading']}"
        )
    finally:
        sock.close()


def test_code_snapshots_of_a_sealed_cell_never_follow_the_agents_links(tmp_path: Path) -> None:
    from autorl.config import compose
    from autorl.seal.launch import CellSeal
    from autorl.workspace.revisions import CodeRevisions

    secret = tmp_path / "cache" / "private"
    secret.mkdir(parents=True)
    (secret / "eval.jsonl").write_text('{"answer": 42}\n')
    workspace = tmp_path / "cell" / "workspace"
    (workspace / "code").mkdir(parents=True)
    (workspace / "code" / "train.py").write_text("print('hi')\n")
    seal = CellSeal(compose([]), "c1", tmp_path / "cell")
    seal.hand_over(workspace)
    history = tmp_path / "cell" / "code_history.git"
    revisions: list[object] = []
    repo = CodeRevisions(
        history,
        workspace / "code",
        "c1",
        revisions.append,
        owner=seal.uid,
        contain=lambda command: seal.contain(command, read_only=[workspace], writable=[history]),
    )
    assert repo.snapshot("first") is not None and len(revisions) == 1
    # The agent swaps code/ for a link to the private split: the snapshot is skipped...
    shutil.rmtree(workspace / "code")
    (workspace / "code").symlink_to(secret)
    head = repo.snapshot("after the swap")
    assert len(revisions) == 1 and head is not None
    # ...and were the swap to happen after that check, git sees the link from inside its own
    # sandbox, where the host path it names does not exist.
    with pytest.raises(subprocess.CalledProcessError) as failed:
        repo._git("add", "-A")
    assert "eval.jsonl" not in failed.value.stderr + failed.value.stdout
