"""Sweeps as Ray Jobs without a cluster: the job's command line and runtime env, the job-only
options,
the log board that rebuilds the cell table, the archive the job packs, and the exit codes."""

from __future__ import annotations

import dataclasses
import shlex
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from autorl.errors import ConfigError
from autorl.jobs.client import LogBoard, exit_code
from autorl.jobs.entry import ARCHIVE_LINE, pack, uploaded_plugins
from autorl.jobs.spec import EXCLUDES, PLUGINS_ENV, entrypoint, runtime_env, take_job_options
from autorl.schema import ClusterConfig

CLUSTER = ClusterConfig(
    name="jobs-local",
    description="",
    address=None,
    num_cpus=None,
    num_gpus=None,
    include_dashboard=False,
    dashboard_port=8265,
    temp_dir=None,
    namespace_prefix="autorl",
    auth_mode="token",
    auth_token_path="/my/token",  # type: ignore[arg-type]
    jobs_address="http://127.0.0.1:8265",
    python="/opt/venv/bin/python",
    job_out_dir="/data/jobs",
    job_stop_wait_s=90,
)


def test_job_options_are_split_off_and_checked() -> None:
    assert take_job_options(["task=gsm8k", "attach=j1", "detach=false"]) == (
        take_job_options(["attach=j1"])[0],
        ["task=gsm8k"],
    )
    assert take_job_options(["detach=true"])[0].detach
    with pytest.raises(ConfigError, match="detach takes true or false"):
        take_job_options(["detach=yes"])
    with pytest.raises(ConfigError, match="needs a job id"):
        take_job_options(["attach="])


def test_entrypoint_runs_the_same_sweep_inside_the_cluster() -> None:
    argv = [
        "cluster=jobs-local",
        "task=gsm8k",
        "out_dir=/local/out",
        "cluster.address=h:1",
        "agent.command=[sh,-c,'exit 0']",
    ]
    words = shlex.split(entrypoint(argv, CLUSTER, "s1", "autorl-s1-x"))
    assert words[:3] == [
        "/opt/venv/bin/python",
        "-m",
        "autorl.jobs.entry",
    ]  # absolute: ray start's PATH is not ours
    assert words[words.index("--sweep-dir") + 1] == "/data/jobs/s1"
    overrides = words[words.index("--") + 1 :]
    assert "agent.command=[sh,-c,'exit 0']" in overrides and "task=gsm8k" in overrides
    assert (
        "out_dir=/local/out" not in overrides and "cluster.address=h:1" not in overrides
    )  # the local side's only
    assert overrides[-5:] == [
        "cluster.address=auto",
        "cluster.jobs_address=null",
        "cluster.auth_token_path=null",
        "out_dir=/data/jobs",
        "sweep_id=s1",
    ]
    default = shlex.split(entrypoint([], dataclasses.replace(CLUSTER, python=None), "s1", "j"))
    assert Path(default[0]).is_absolute()


def test_runtime_env_carries_code_and_plugins_but_not_outputs_or_caches(tmp_path: Path) -> None:
    env = runtime_env(CLUSTER, [], project_dir=tmp_path)
    assert env["working_dir"] == str(tmp_path) and "py_modules" not in env
    for pattern in ("/outputs/", ".venv*", ".cache/", "caches/", ".git/", "environments/"):
        assert pattern in EXCLUDES and pattern in env["excludes"]  # type: ignore[operator]
    assert env["env_vars"] == {"RAY_JOB_STOP_WAIT_TIME_S": "90", "HYDRA_FULL_ERROR": "1"}
    plugins = [tmp_path / "a" / "myplug", tmp_path / "b" / "other"]
    env = runtime_env(CLUSTER, plugins, project_dir=tmp_path)
    assert env["py_modules"] == [str(p) for p in plugins]
    assert env["env_vars"][PLUGINS_ENV] == "myplug:other"  # type: ignore[index]
    with pytest.raises(ConfigError, match="distinct names"):
        runtime_env(CLUSTER, [tmp_path / "a" / "p", tmp_path / "b" / "p"], project_dir=tmp_path)


def test_uploaded_plugins_are_found_on_the_path(tmp_path: Path) -> None:
    (tmp_path / "pkg_hash" / "myplug").mkdir(parents=True)
    assert uploaded_plugins(
        ["myplug"], ["", str(tmp_path / "nothing"), str(tmp_path / "pkg_hash")]
    ) == [tmp_path / "pkg_hash" / "myplug"]
    with pytest.raises(RuntimeError, match="not on this node's PYTHONPATH"):
        uploaded_plugins(["missing"], [str(tmp_path)])


def test_log_board_rebuilds_cells_and_skips_what_a_re_tail_repeats() -> None:
    console = Console(record=True, width=200)
    board = LogBoard(console, "sweep s1")
    log = (
        "start\n[autorl] gsm8k.a.none.tiny.s0: running best=- subs=0\n"
        "[autorl] gsm8k.a.none.tiny.s0: completed best=0.40 subs=2\n"
        f"{ARCHIVE_LINE} j.tar.gz 123 abcd\n"
    )
    offset = board.feed_chunk(log[:30], 0)
    board.feed_chunk(log[30:], offset)
    board.feed_chunk(log, 0)  # a new tail from the log's start: nothing is shown twice
    board.feed(log)
    assert board.cells == {"gsm8k.a.none.tiny.s0": ("completed", "0.40", "2")}
    assert board.archive == ("j.tar.gz", 123, "abcd")
    assert console.export_text().count("completed best=0.40") == 1


def test_pack_keeps_records_and_leaves_workspaces_and_links(tmp_path: Path) -> None:
    sweep = tmp_path / "s1"
    cell = sweep / "cells" / "c1"
    for folder in ("workspace", "home", "agent_code"):
        (cell / folder).mkdir(parents=True)
    (sweep / "results.csv").write_text("x\n")
    (cell / "agent.log").write_text("log\n")
    (cell / "workspace" / "model.bin").write_bytes(b"0" * 100)
    (cell / "agent_code" / "link").symlink_to("/etc/passwd")
    size, digest = pack(sweep, tmp_path / "logs" / "j.tar.gz")
    assert size == (tmp_path / "logs" / "j.tar.gz").stat().st_size and len(digest) == 64
    with tarfile.open(tmp_path / "logs" / "j.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"s1/results.csv", "s1/cells/c1/agent.log", "s1/cells/c1/agent_code"} <= names
    assert not any("workspace" in n or "home" in n or n.endswith("link") for n in names)


def test_exit_code_follows_the_job() -> None:
    assert exit_code("SUCCEEDED", None) == 0
    assert exit_code("STOPPED", None) == 130
    assert exit_code("FAILED", SimpleNamespace(driver_exit_code=2)) == 2
    assert exit_code("FAILED", SimpleNamespace(driver_exit_code=None)) == 1
