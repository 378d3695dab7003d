"""A hostile agent in a real cell (issue #11): sealed, it finds nothing; unsealed, the same probe
finds plenty.

The agent is ``tests/helpers/hostile_probe.py``, run by ``agent=command`` in a real sweep
(``python -m autorl.sweep`` in a subprocess) with CI's cache layout: the task cache, private splits
included, lives in a folder outside the repository named by ``AUTORL_CACHE_DIR``. The sweep joins a
Ray head started with ``ray start`` (token auth on), so the test knows the GCS port the probe tries.
A second cell's grading API is stood in for by a loopback HTTP server of this test with its own
token.

- The negative control (``sandbox.mode=none``) shows that the probe really probes: unsealed, it
reads
  the private split, imports autorl, takes the record store's write lock, reaches Ray and the other
  API, and its ``setsid`` child outlives the cell.
- The sealed cell (the default ``sandbox.mode=bwrap``): every attempt fails, the cell completes with
  its submission and its sandbox mode recorded, no process of the agent's uid is left, the
  ``setsid``
  marker never appears, and the base model, the task cache, Ray's token and a canary file outside
  the workspace are unchanged. Network isolation is shown from inside only (no interface but ``lo``,
  no route); nothing is sent off this machine.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import secrets
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from autorl.config import compose
from autorl.models.tiny import ensure_tiny_model
from autorl.tasks import build_task_data, get_task
from tests.integration.conftest import query, sweep_env

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "tests" / "helpers" / "hostile_probe.py"
# The probe's files, copied side by side into the agent's HOME (the entry point imports the other
# two).
PROBE_FILES = [PROBE, *(PROBE.parent / f"hostile_{part}.py" for part in ("files", "processes"))]
CELL = "gsm8k.command.none.tiny.s0"
BUDGET_S = 60
SETSID_SLEEP_S = BUDGET_S + 20  # the child would touch its marker well after the budget


class OtherCellApi:
    """A stand-in for another cell's grading API on this node's loopback: 200 with its token, counts
    requests."""

    def __init__(self) -> None:
        self.token = secrets.token_urlsafe(16)
        self.requests: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                api.requests.append(self.path)
                ok = self.headers.get("Authorization") == f"Bearer {api.token}"
                body = json.dumps(
                    {"submissions": []} if ok else {"detail": "unauthorized"}
                ).encode()
                self.send_response(200 if ok else 401)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def other_cell() -> Iterator[OtherCellApi]:
    api = OtherCellApi()
    yield api
    api.close()


@dataclass
class ProbeRun:
    """One sweep whose single cell is the hostile probe, and what the test knows around it."""

    result: subprocess.CompletedProcess[str]
    sweep_dir: Path
    cell_dir: Path
    report: dict
    settings: dict
    canary: Path

    def attempts(self) -> dict[str, dict]:
        return {a["name"]: a for a in self.report["attempts"]}


def _node_address() -> str | None:
    """This node's own non-loopback address (a UDP connect picks the route's source and sends
    nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))  # TEST-NET-1: never reached, nothing is sent
        except OSError:
            return None
        address = str(sock.getsockname()[0])
    return None if address.startswith("127.") else address


def _tree_digest(root: Path) -> str:
    """Names, modes, link targets and contents of everything under ``root``."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        digest.update(
            f"{path.relative_to(root)}\0{stat.S_IMODE(info.st_mode)}\0{info.st_uid}\0".encode()
        )
        if path.is_symlink():
            digest.update(os.readlink(path).encode())
        elif path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _outside_state(cache_dir: Path, canary: Path) -> dict[str, str]:
    """Digests of what the agent must not change: the cache (base model, task data), Ray's token,
    the canary."""
    state = {
        "cache": _tree_digest(cache_dir),
        "canary": hashlib.sha256(canary.read_bytes()).hexdigest(),
    }
    token = Path.home() / ".ray" / "auth_token"
    if token.exists():
        state["ray_token"] = hashlib.sha256(token.read_bytes()).hexdigest()
    return state


def _run_probe(
    tmp_path: Path,
    ray_tmp: Path,
    cache_dir: Path,
    ray_address: str,
    other: OtherCellApi,
    sweep_id: str,
    *extra: str,
    **settings: object,
) -> tuple[ProbeRun, dict[str, str], dict[str, str]]:
    """Build the task data and model, run one sweep of the probe; returns the run and the outside
    state before/after."""
    ensure_tiny_model(cache_dir / "models")
    fixture_options = compose([]).task.build["fixture"]
    data = build_task_data(
        get_task("gsm8k"), "fixture", cache_dir / "tasks", options=fixture_options
    )
    private_files = sorted(str(p) for p in data.private_dir.rglob("*") if p.is_file())
    eval_lines = (data.private_dir / "eval.jsonl").read_text().splitlines()
    needles = [json.loads(line)["question"] for line in eval_lines[:5]]
    out_dir = tmp_path / "out"  # deep, as pytest's folders are: the cell's unix sockets must cope
    sweep_dir = out_dir / sweep_id
    canary = tmp_path / "outside" / "canary.txt"
    canary.parent.mkdir()
    canary.write_text("a file outside every workspace; nothing may change it\n")
    gcs_port = int(ray_address.rsplit(":", 1)[1])
    probe_settings = {
        "private_files": private_files,
        "needles_reversed": [n[::-1] for n in needles],
        "records": str(sweep_dir / "records.sqlite"),
        "host_paths": {
            "repo": str(REPO),
            "cache": str(cache_dir),
            "sweep_dir": str(sweep_dir),
            "out_dir": str(out_dir),
            "ray_tmp": str(ray_tmp),
            "outside": str(canary.parent),
        },
        "gcs_port": gcs_port,
        "host_ip": _node_address(),
        "other_cell": {"url": other.url, "token": other.token},
        "canary": str(canary),
        "setsid_sleep_s": SETSID_SLEEP_S,
        "walk_seconds": 10,
        "submit_wait_s": 15,
        "linger": True,
        **settings,
    }
    settings_file = tmp_path / "probe_settings.json"
    settings_file.write_text(json.dumps(probe_settings))
    before = _outside_state(cache_dir, canary)
    command = [
        sys.executable,
        "-m",
        "autorl.sweep",
        f"out_dir={out_dir}",
        f"sweep_id={sweep_id}",
        "progress=false",
        f"cluster.address={ray_address}",
        f"cluster.temp_dir={ray_tmp}",
        "cluster.include_dashboard=false",
        # The actors run on a head this sweep did not start: they get the path here.
        f"cache_dir={cache_dir}",
        # The grader's own write to the cache (a baseline for later sweeps) would change the digest
        # of what the agent must leave alone: off here, so that any change is the agent's.
        "grader.baseline_cache=false",
        "agent=command",
        f"agent.files=[{','.join(map(str, PROBE_FILES))},{settings_file}]",
        "agent.command=[python3,-I,'{home}/hostile_probe.py','{home}/probe_settings.json']",
        f"budget.seconds={BUDGET_S}",
        "budget.kill_grace_s=5",
        *extra,
    ]
    result = subprocess.run(
        command, env=sweep_env(cache_dir), capture_output=True, text=True, timeout=900
    )
    after = _outside_state(cache_dir, canary)
    cell_dir = sweep_dir / "cells" / CELL
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report_file = cell_dir / "workspace" / "output" / "hostile_report.json"
    log = (
        (cell_dir / "agent.log").read_text(errors="replace")
        if (cell_dir / "agent.log").exists()
        else ""
    )
    assert report_file.exists(), f"the probe wrote no report; agent.log:\n{log[-4000:]}"
    report = json.loads(report_file.read_text())
    assert report["done"], f"the probe did not finish within the budget; agent.log:\n{log[-4000:]}"
    return ProbeRun(result, sweep_dir, cell_dir, report, probe_settings, canary), before, after


def _row(sweep_dir: Path) -> dict[str, str]:
    with open(sweep_dir / "results.csv") as handle:
        (row,) = list(csv.DictReader(handle))
    return row


def _leftovers(uid: int, marker: str) -> list[tuple[int, str]]:
    """Processes on this node that are the agent's: its uid (when the sweep runs as root, the agent
    has a uid of its own: real, effective, saved or filesystem), or a command line naming the
    probe's
    marker."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = (proc / "status").read_text()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        uids = next(
            (line.split()[1:] for line in status.splitlines() if line.startswith("Uid:")), []
        )
        if (os.geteuid() == 0 and str(uid) in uids) or marker in cmdline:
            found.append((int(proc.name), cmdline[:120]))
    return found


def _kill_probe_children(pids: list[int], marker: str) -> None:
    """Stop what the unsealed probe left behind: the sessions of its children, checked by their
    command line."""
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            if marker in cmdline:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def test_unsealed_probe_finds_what_a_seal_must_hide(
    tmp_path: Path, ray_tmp: Path, cache_dir: Path, external_ray_head: str, other_cell: OtherCellApi
) -> None:
    # The negative control: the same probe with the sandbox off must succeed, or the sealed test
    # proves nothing.
    run, before, after = _run_probe(
        tmp_path,
        ray_tmp,
        cache_dir,
        external_ray_head,
        other_cell,
        "hostile-unsealed",
        "sandbox.mode=none",
        fork_count=200,
        alloc_mb=256,
    )
    left = run.report["left_children"]
    marker = left["marker"]
    children = [int(left["setsid_pid"]), int(left["daemon_pid"])]
    try:
        attempts = run.attempts()
        expected = [
            "read_private_files_by_host_path",
            "list_host_folders",
            "import_autorl",
            "import_task_builder",
            "open_record_store_for_writing",
            "write_base_model",
            "write_outside_workspace",
            "write_shared_toolchain_or_sandbox_files",
            "read_ray_token_and_sessions",
            "connect_ray_gcs",
            "list_other_processes",
            "read_other_process_environ",
            "call_other_cell_grading_api",
            "scan_loopback_ports",
            "network_interfaces_besides_lo",
            "network_routes",
            "fork_bomb_past_pids_limit",
            "allocate_past_memory_limit",
        ]
        failed = {
            name: attempts[name]["detail"] for name in expected if not attempts[name]["succeeded"]
        }
        assert not failed, (
            f"unsealed, these attempts should have worked: {json.dumps(failed, indent=1)[:4000]}"
        )
        assert other_cell.requests, "the unsealed probe never reached the other cell's API"
        assert run.report["uid"] == 0  # the agent ran as the sweep's user, root
        # The setsid child and the daemon outlived the cell (the budget stopped one process group).
        assert _row(run.sweep_dir)["sandbox"] == "none"
        alive = [pid for pid in children if Path(f"/proc/{pid}").exists()]
        assert alive == children, (
            f"unsealed, the probe's children should outlive the cell: alive {alive} of {children}"
        )
    finally:
        _kill_probe_children(children, marker)


def test_sealed_hostile_agent_finds_nothing_and_leaves_nothing(
    tmp_path: Path, ray_tmp: Path, cache_dir: Path, external_ray_head: str, other_cell: OtherCellApi
) -> None:
    run, before, after = _run_probe(
        tmp_path,
        ray_tmp,
        cache_dir,
        external_ray_head,
        other_cell,
        "hostile-sealed",
        "cell.memory_gb=1",
        "cell.max_processes=256",
        fork_count=600,
        alloc_mb=1536,
    )
    report, attempts = run.report, run.attempts()
    worked = {a["name"]: a["detail"] for a in report["attempts"] if a["succeeded"]}
    assert not worked, (
        f"sealed, these attempts worked: {json.dumps(worked, indent=1, default=str)[:6000]}"
    )
    expected = {
        "read_private_files_by_host_path",
        "walk_filesystem_for_private_data",
        "list_host_folders",
        "import_autorl",
        "import_autorl_tasks",
        "import_task_builder",
        "open_record_store_for_writing",
        "write_base_model",
        "write_outside_workspace",
        "write_shared_toolchain_or_sandbox_files",
        "read_ray_token_and_sessions",
        "connect_ray_gcs",
        "list_other_processes",
        "read_other_process_environ",
        "signal_other_process",
        "call_other_cell_grading_api",
        "scan_loopback_ports",
        "network_interfaces_besides_lo",
        "network_routes",
        "tcp_to_host_address",
        "open_cgroup_files_for_writing",
        "fork_bomb_past_pids_limit",
        "allocate_past_memory_limit",
        "setsid_child_outlives_budget",
        "host_writes_through_run_meta_link",
        "host_reads_through_code_link",
    }
    assert expected <= set(attempts), (
        f"attempts missing from the report: {expected - set(attempts)}"
    )
    assert other_cell.requests == []
    # The limits were there and were hit, not merely absent from the probe's view.
    fork = attempts["fork_bomb_past_pids_limit"]["detail"]
    assert fork["forked"] < 256 and "EAGAIN" in fork["stopped_by"], fork
    memory = attempts["allocate_past_memory_limit"]["detail"]
    assert memory["returncode"] == -signal.SIGKILL, memory
    assert attempts["network_interfaces_besides_lo"]["detail"]["interfaces"] == ["lo"]

    # Run by root, the agent had a non-root uid of its own (bubblewrap without a user namespace: the
    # same uid on the host); run by another user, bubblewrap's user namespace keeps that user's uid.
    uid = int(report["uid"])
    assert report["euid"] == uid and (uid >= 200000 if os.geteuid() == 0 else uid == os.getuid())

    # The cell completed with its records, sealed.
    row = _row(run.sweep_dir)
    assert row["status"] == "completed" and row["sandbox"] == "bwrap", row
    assert row["exit_class"] in ("timeout", "exited", "memory"), row
    assert row["limit_hit"] in ("memory", "pids"), row
    db = run.sweep_dir / "records.sqlite"
    subs = query(db, "SELECT submission_id, status, score FROM submissions WHERE cell_id = ?", CELL)
    assert subs and subs[0][1] in ("scored", "copy_of_base") and subs[0][2] is not None, subs
    assert query(db, "SELECT cell_id FROM cells") == [(CELL,)]
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)

    # Nothing of the agent is left: no process of its uid now, and the setsid marker never appears.
    marker = Path(report["left_children"]["marker"])
    assert _leftovers(uid, str(marker)) == []
    time.sleep(max(0.0, report["started"] + SETSID_SLEEP_S + 5 - time.time()))
    assert not marker.exists() and not Path(f"{marker}.daemon").exists()
    assert _leftovers(uid, str(marker)) == []

    # Nothing outside the workspace changed: the cache (base model, task data), Ray's token (the
    # canary: below).
    changed = {
        k: (before[k], after.get(k)) for k in before if k != "canary" and before[k] != after.get(k)
    }
    assert not changed, changed

    # Links the probe planted for the host to follow (host-side code, the same sealed or not):
    # run_meta.json.tmp → the canary outside the workspace (the host rewrites run_meta.json at every
    # submission), code/ → the private split (the host snapshots code/ into the records).
    followed = []
    if before["canary"] != after["canary"]:
        followed.append(
            f"the host wrote through workspace/run_meta.json.tmp into {run.canary}: "
            f"it now holds {run.canary.read_text()[:120]!r}"
        )
    texts = [
        str(r[0]) for r in query(db, "SELECT diff FROM code_revisions WHERE cell_id = ?", CELL)
    ]
    texts += [
        p.read_text(errors="replace") for p in (run.sweep_dir / "report").rglob("*") if p.is_file()
    ]
    needles = [n[::-1] for n in run.settings["needles_reversed"]]
    if leaked := [n for n in needles if any(n in text for text in texts)]:
        followed.append(
            "the host followed the code/ link: private eval text is in the records or report: "
            f"{leaked[:1]}"
        )
    assert not followed, "\n".join(followed)
