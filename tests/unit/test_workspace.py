"""Workspace layout, run_meta, code revisions and the tiny model build."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import pytest

from autorl.grading.model_checks import check_loadable_model, weights_hash
from autorl.models.tiny import ensure_tiny_model
from autorl.records.types import CodeRevision
from autorl.tasks import build_task_data, get_task
from autorl.workspace.environment import CellEnvironment, Gpu, toolchain_versions, visible_gpus
from autorl.workspace.layout import build_workspace, write_instructions
from autorl.workspace.revisions import CodeRevisions
from autorl.workspace.run_meta import RunMeta


def test_tiny_model_is_deterministic_and_cached(tmp_path: Path, tiny_model_dir: Path) -> None:
    again = ensure_tiny_model(tmp_path / "other")
    assert weights_hash(check_loadable_model(again)) == weights_hash(
        check_loadable_model(tiny_model_dir)
    )
    mtime = (again / "model.safetensors").stat().st_mtime
    assert ensure_tiny_model(tmp_path / "other") == again
    assert (again / "model.safetensors").stat().st_mtime == mtime


def test_workspace_holds_public_data_only(
    tmp_path: Path, tiny_model_dir: Path, cache_dir: Path
) -> None:
    spec = get_task("gsm8k")
    data = build_task_data(
        spec, "fixture", cache_dir / "tasks", options={"train_size": 30, "eval_size": 10}
    )
    paths = build_workspace(
        tmp_path / "cell",
        public_dir=data.public_dir,
        description_md=spec.description_md,
        base_model_dir=tiny_model_dir,
        model_name="tiny",
    )
    write_instructions(
        paths,
        budget_s=60,
        baseline=1.5,
        model_name="tiny",
        eval_settings={"num_shots": 0},
        environment=_environment(),
    )
    assert {p.name for p in paths.root.iterdir()} == {
        "code",
        "output",
        "data",
        "models",
        "description.md",
        "instructions.md",
    }
    assert not os.access(paths.data / "train.jsonl", os.W_OK) or os.geteuid() == 0
    assert not (paths.data.stat().st_mode & 0o222)
    assert "1.50" in (paths.root / "instructions.md").read_text()
    everything = "\n".join(
        p.read_text(errors="ignore")
        for p in paths.root.rglob("*")
        if p.is_file() and not p.is_symlink()
    )
    for line in (data.private_dir / "eval.jsonl").read_text().splitlines():
        assert json.loads(line)["question"] not in everything
    # A second attempt replaces the read-only tree without errors.
    build_workspace(
        tmp_path / "cell",
        public_dir=data.public_dir,
        description_md=spec.description_md,
        base_model_dir=tiny_model_dir,
        model_name="tiny",
    )


def test_run_meta_remaining(tmp_path: Path) -> None:
    meta = RunMeta(tmp_path / "run_meta.json", 100, tmp_path)
    assert meta.remaining() is None
    meta.update(start_time=1000.0)
    assert meta.remaining(now=1030.0) == pytest.approx(70.0)
    assert meta.remaining(now=5000.0) == 0.0
    assert json.loads((tmp_path / "run_meta.json").read_text())["start_time"] == 1000.0


def test_code_revisions_commit_changes_with_diffs(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    seen: list[CodeRevision] = []
    revisions = CodeRevisions(tmp_path / "history.git", code, "cell-a", seen.append)
    assert revisions.snapshot("empty") is None
    (code / "train.py").write_text("lr = 1e-3\n")
    first = revisions.snapshot("submission 1")
    assert first and seen[-1].revision == first and "+lr = 1e-3" in seen[-1].diff
    assert revisions.snapshot("unchanged") == first and len(seen) == 1
    (code / "train.py").write_text("lr = 3e-4\n")
    second = revisions.snapshot("submission 2")
    assert second != first and "-lr = 1e-3" in seen[-1].diff and "+lr = 3e-4" in seen[-1].diff
    assert seen[-1].files_changed == 1
    assert not (code / ".git").exists()


def test_run_meta_never_writes_through_a_link_the_agent_planted(tmp_path: Path) -> None:
    canary = tmp_path / "outside" / "records.sqlite"
    canary.parent.mkdir()
    canary.write_text("untouched")
    workspace, cell = tmp_path / "ws", tmp_path / "cell"
    workspace.mkdir()
    cell.mkdir()
    meta = RunMeta(workspace / "run_meta.json", 100, cell)
    (workspace / "run_meta.json").unlink()
    (workspace / "run_meta.json").symlink_to(canary)  # what a hostile agent may do in its workspace
    # The temporary name an older version wrote to.
    (workspace / "run_meta.json.tmp").symlink_to(canary)
    meta.update(last_submit_time=1.0)
    assert canary.read_text() == "untouched"
    assert not (workspace / "run_meta.json").is_symlink()
    assert json.loads((workspace / "run_meta.json").read_text())["last_submit_time"] == 1.0


def _environment(**changes: Any) -> CellEnvironment:
    fields: dict[str, Any] = dict(
        cpus=1.0,
        memory_gb=8.0,
        max_processes=2048,
        disk_free_gb=12.5,
        gpus=(),
        toolchain=toolchain_versions(sys.executable),
        sealed=True,
        isolated_network=True,
        budget_s=600.0,
    )
    return CellEnvironment(**(fields | changes))


def test_the_machine_section_states_each_fact_of_the_cell() -> None:
    """Each field of the section comes from its own setting: change one, and only its line
    changes."""
    base = _environment().markdown()
    assert "- CPUs: 1 " in base and "- Memory: 8 GB" in base and "at most 2048 processes" in base
    assert "12.5 GB free" in base and "- GPUs: none" in base and "600 seconds" in base
    assert "no package index" in base and "only the grading API" in base
    assert (
        f"torch {importlib.metadata.version('torch')}" in base
        and f"trl {importlib.metadata.version('trl')}" in base
    )
    assert f"Python {platform.python_version()}" in base
    changes = {
        "cpus": (0.5, "- CPUs: 0.5 "),
        "memory_gb": (3.0, "- Memory: 3 GB"),
        "max_processes": (64, "at most 64 "),
        "disk_free_gb": (1.25, "1.2 GB free"),
        "budget_s": (42.0, "42 seconds"),
        "gpus": (
            (Gpu("NVIDIA H100 80GB HBM3", 81559),),
            "- GPUs: 1: NVIDIA H100 80GB HBM3 (80 GB)",
        ),
        "isolated_network": (False, "the node's own"),
        "sealed": (False, "not enforced"),
    }
    for field, (value, expected) in changes.items():
        text = _environment(**{field: value}).markdown()
        assert expected in text and expected not in base, (field, text)
        assert len(set(text.splitlines()) - set(base.splitlines())) <= 3, field


def test_visible_gpus_are_matched_by_index_or_uuid_as_nvidia_smi_lists_them(
    tmp_path: Path, monkeypatch: Any
) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\necho '0, GPU-aaaa, NVIDIA H100 80GB HBM3, 81559'\n"
        "echo '1, GPU-bbbb, NVIDIA H100 80GB HBM3, 81559'\necho '2, GPU-cccc, NVIDIA A10G, 23028'\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert visible_gpus("2,GPU-aaaa") == (
        Gpu("NVIDIA A10G", 23028),
        Gpu("NVIDIA H100 80GB HBM3", 81559),
    )
    assert visible_gpus("") == () and visible_gpus(None) == ()
    monkeypatch.setenv("PATH", "/nonexistent")
    assert visible_gpus("0") == ()  # no driver on the node: no GPU to tell of
