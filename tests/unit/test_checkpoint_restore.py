"""Restoring a cell's checkpoint (autorl/workspace/checkpoint_restore.py) and the checkpoint
store's failures (autorl/workspace/checkpoint_store.py).

A restore writes into folders an agent may race on, from a manifest that may have been tampered
with: links planted in the target, paths and link targets that leave their root, corrupt blobs. A
store that is missing, read-only or full fails the checkpoint, never leaving a partial blob.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from autorl.workspace import checkpoint_restore as cr
from autorl.workspace.checkpoint import (
    CheckpointError,
    CheckpointStore,
    restore_snapshot,
    take_snapshot,
)
from tests.helpers.checkpoint_trees import cell, config, new_store, restored


@pytest.fixture
def store(tmp_path: Path) -> CheckpointStore:
    return new_store(tmp_path)


# ----------------------------------------------------------------------------------------------
# restore


def plant_after_open(monkeypatch: pytest.MonkeyPatch, plant: Callable[[Path], None]) -> None:
    """Plant something in a restore target right after the restore opened it (an agent racing)."""
    real = cr._fresh_root

    def fresh_then_plant(path: Path, owner: tuple[int, int] | None) -> int:
        fd = real(path, owner)
        plant(path)
        return fd

    monkeypatch.setattr(cr, "_fresh_root", fresh_then_plant)


def test_restore_never_writes_through_a_link_planted_in_the_target(
    tmp_path: Path, store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    roots = cell(tmp_path)
    take_snapshot(store, roots, config())
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config.json").write_text("host")

    def plant(path: Path) -> None:
        if path.name == "output":
            (path / "v1").symlink_to(outside, target_is_directory=True)

    plant_after_open(monkeypatch, plant)
    with pytest.raises(CheckpointError, match="File exists"):
        restored(tmp_path, store, roots)
    assert [p.name for p in outside.iterdir()] == ["config.json"]
    assert (outside / "config.json").read_text() == "host"


def test_restore_refuses_a_target_that_is_a_link_or_not_empty(
    tmp_path: Path, store: CheckpointStore
) -> None:
    roots = cell(tmp_path)
    take_snapshot(store, roots, config())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(CheckpointError, match="not a folder"):
        restore_snapshot(store, {"code": tmp_path / "link"})
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(CheckpointError, match="not empty"):
        restore_snapshot(store, {"code": tmp_path / "full"})
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("../escape", ""),
        ("/etc/cron.d/x", ""),
        ("a/../../escape", ""),
        ("a//b", ""),
        ("", ""),
        ("link", "/etc/passwd"),
        ("link", "../../escape"),
    ],
)
def test_a_manifest_path_or_link_that_leaves_its_root_is_refused(
    tmp_path: Path, store: CheckpointStore, path: str, target: str
) -> None:
    roots = cell(tmp_path)
    good = take_snapshot(store, roots, config())
    manifest = json.loads(good.manifest.read_text())
    blob = next(e for e in manifest["entries"] if e["kind"] == "file")
    bad = (
        {"root": "code", "path": path, "kind": "symlink", "mode": 0o777, "target": target}
        if target
        else {**blob, "root": "code", "path": path}
    )
    manifest["entries"].append(bad)
    store.write_manifest("000002", manifest)
    (tmp_path / "restored" / "deep").mkdir(parents=True)
    with pytest.raises(CheckpointError):
        restore_snapshot(store, {"code": tmp_path / "restored" / "deep" / "code"})
    assert not (tmp_path / "restored" / "escape").exists()
    assert not (tmp_path / "restored" / "deep" / "escape").exists()


def test_a_corrupt_blob_fails_the_restore(tmp_path: Path, store: CheckpointStore) -> None:
    roots = cell(tmp_path)
    take_snapshot(store, roots, config())
    blob = max((p for p in (store.root / "blobs").rglob("*") if p.is_file()), key=os.path.getsize)
    blob.write_bytes(b"\0" * blob.stat().st_size)
    with pytest.raises(CheckpointError, match="corrupt"):
        restored(tmp_path, store, roots)


def test_restore_gives_everything_to_the_new_cells_owner(
    tmp_path: Path, store: CheckpointStore
) -> None:
    roots = cell(tmp_path)
    take_snapshot(store, roots, config())
    dest = restored(tmp_path, store, roots, owner=(201234, 201234))
    owners = {p.lstat().st_uid for root in dest.values() for p in [root, *root.rglob("*")]}
    assert owners == {201234}


# ----------------------------------------------------------------------------------------------
# the store


def test_a_missing_or_read_only_store_is_a_checkpoint_error(tmp_path: Path) -> None:
    roots = cell(tmp_path)
    with pytest.raises(CheckpointError, match="missing or not a folder"):
        CheckpointStore(tmp_path / "not-mounted")
    ro = tmp_path / "ro"
    ro.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here")
    try:
        with pytest.raises(CheckpointError, match="Read-only file system"):
            take_snapshot(CheckpointStore(ro), roots, config())
    finally:
        subprocess.run(["umount", str(ro)], check=True)


@contextlib.contextmanager
def tiny_store(path: Path) -> Iterator[CheckpointStore]:
    """A 256 KiB tmpfs store (or, where none can be mounted, a folder whose writes fail ENOSPC)."""
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(path)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield CheckpointStore(path)
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_a_full_store_is_a_checkpoint_error_and_keeps_no_partial_blob(tmp_path: Path) -> None:
    roots = cell(tmp_path)  # a 1 MiB model: more than the store holds
    with tiny_store(tmp_path / "tiny") as store:
        with pytest.raises(CheckpointError, match=r"No space left on device while copying"):
            take_snapshot(store, roots, config())
        assert list(store.tmp.iterdir()) == [] and store.manifest_ids() == []


# ----------------------------------------------------------------------------------------------
# the freeze
