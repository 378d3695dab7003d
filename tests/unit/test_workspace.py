"""Workspace layout, run_meta, code revisions and the tiny model build."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from autorl.grading.model_checks import check_loadable_model, weights_hash
from autorl.models.tiny import ensure_tiny_model
from autorl.records.types import CodeRevision
from autorl.tasks import build_task_data, get_task
from autorl.workspace.layout import build_workspace, write_instructions
from autorl.workspace.revisions import CodeRevisions
from autorl.workspace.run_meta import RunMeta


def test_tiny_model_is_deterministic_and_cached(tmp_path: Path, tiny_model_dir: Path) -> None:
    again = ensure_tiny_model(tmp_path / "other")
    assert weights_hash(check_loadable_model(again)) == weights_hash(check_loadable_model(tiny_model_dir))
    mtime = (again / "model.safetensors").stat().st_mtime
    assert ensure_tiny_model(tmp_path / "other") == again
    assert (again / "model.safetensors").stat().st_mtime == mtime


def test_workspace_holds_public_data_only(tmp_path: Path, tiny_model_dir: Path, cache_dir: Path) -> None:
    spec = get_task("gsm8k")
    data = build_task_data(spec, "fixture", cache_dir / "tasks", options={"train_size": 30, "eval_size": 10})
    paths = build_workspace(tmp_path / "cell", public_dir=data.public_dir, description_md=spec.description_md,
                            base_model_dir=tiny_model_dir, model_name="tiny")
    write_instructions(paths, budget_s=60, baseline=1.5, model_name="tiny", eval_settings={"num_shots": 0})
    assert {p.name for p in paths.root.iterdir()} == {"code", "output", "data", "models", "description.md", "instructions.md"}
    assert not os.access(paths.data / "train.jsonl", os.W_OK) or os.geteuid() == 0
    assert not (paths.data.stat().st_mode & 0o222)
    assert "1.50" in (paths.root / "instructions.md").read_text()
    everything = "\n".join(p.read_text(errors="ignore") for p in paths.root.rglob("*") if p.is_file() and not p.is_symlink())
    for line in (data.private_dir / "eval.jsonl").read_text().splitlines():
        assert json.loads(line)["question"] not in everything
    # A second attempt replaces the read-only tree without errors.
    build_workspace(tmp_path / "cell", public_dir=data.public_dir, description_md=spec.description_md,
                    base_model_dir=tiny_model_dir, model_name="tiny")


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
    (workspace / "run_meta.json.tmp").symlink_to(canary)  # the temporary name an older version wrote to
    meta.update(last_submit_time=1.0)
    assert canary.read_text() == "untouched"
    assert not (workspace / "run_meta.json").is_symlink()
    assert json.loads((workspace / "run_meta.json").read_text())["last_submit_time"] == 1.0
