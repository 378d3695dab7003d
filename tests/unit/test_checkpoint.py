"""The cell checkpoint copier (autorl/workspace/checkpoint.py): round trips, increments, hostile
trees and the freeze of a real cgroup (restoring and the store: test_checkpoint_restore.py).

The copier runs as root outside the sandbox on files the agent controls, so most tests here plant
what an agent could: links and hard links to files it must never carry, FIFOs, a sparse file of
50 GB, a file swapped for a FIFO between the listing and the copy.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autorl.seal.cgroups import CellCgroup, CgroupLimits
from autorl.workspace import checkpoint as ck
from autorl.workspace.checkpoint import (
    CheckpointError,
    CheckpointStore,
    restore_snapshot,
    take_snapshot,
)
from tests.helpers.checkpoint_trees import (
    SECRET,
    cell,
    config,
    in_thread,
    new_store,
    real_freezer,
    restored,
    stored,
    tree,
)


@pytest.fixture
def store(tmp_path: Path) -> CheckpointStore:
    return new_store(tmp_path)


# ----------------------------------------------------------------------------------------------
# round trip and increments


def test_round_trip_restores_the_tree_and_its_safe_modes(
    tmp_path: Path, store: CheckpointStore
) -> None:
    roots = cell(tmp_path)
    (roots["code"] / "empty").mkdir()
    (roots["code"] / "ro").mkdir()
    (roots["code"] / "ro" / "f").write_text("x")
    os.chmod(roots["code"] / "ro", 0o555)
    setuid = roots["code"] / "suid"
    setuid.write_text("s")
    os.chmod(setuid, 0o4755 | stat.S_ISGID)
    os.chmod(roots["code"] / "pkg", 0o1777)  # sticky
    odd = os.fsdecode(b"caf\xe9\xff-name")
    (roots["home"] / odd).write_bytes(b"odd")
    result = take_snapshot(store, roots, config())
    dest = restored(tmp_path, store, roots)
    before, after = tree(roots), tree(dest)
    before["code/suid"] = ("file", 0o755, b"s")
    before["code/pkg"] = ("dir", 0o777, b"")
    assert after == before
    assert result.files == 9 and result.symlinks == 1 and result.bytes_total == result.bytes_new
    assert result.skipped == {} and result.changed == 0


def test_second_snapshot_reads_and_copies_only_the_changed_file(
    tmp_path: Path, store: CheckpointStore
) -> None:
    roots = cell(tmp_path)
    first = take_snapshot(store, roots, config())
    (roots["code"] / "train.py").write_text("print('train harder')\n")
    second = take_snapshot(store, roots, config())
    assert first.files_read == first.files == second.files
    assert second.files_read == 1 and second.bytes_new == len("print('train harder')\n")
    manifest = json.loads(second.manifest.read_text())
    assert manifest["parent"] == first.checkpoint_id and manifest["bytes_new"] == second.bytes_new
    dest = restored(tmp_path, store, roots)
    assert tree(dest) == tree(roots)


def test_a_model_folder_is_stored_once_across_checkpoints(
    tmp_path: Path, store: CheckpointStore
) -> None:
    roots = cell(tmp_path)
    weights = roots["output"] / "v1" / "model.safetensors"
    first = take_snapshot(store, roots, config())
    (roots["output"] / "v2").mkdir()  # the same weights under another folder
    (roots["output"] / "v2" / "model.safetensors").write_bytes(weights.read_bytes())
    second = take_snapshot(store, roots, config())
    third = take_snapshot(store, roots, config())
    assert first.bytes_new >= 1 << 20
    assert second.files_read == 1 and second.bytes_new == 0
    assert third.files_read == 0 and third.bytes_new == 0
    blobs = [p for p in (store.root / "blobs").rglob("*") if p.is_file()]
    assert sum(p.stat().st_size == 1 << 20 for p in blobs) == 1


def test_a_touched_back_file_is_read_again(tmp_path: Path, store: CheckpointStore) -> None:
    roots = cell(tmp_path)
    path = roots["code"] / "train.py"
    take_snapshot(store, roots, config())
    info = path.stat()
    path.write_text("print('tamper')\n"[: info.st_size].ljust(info.st_size))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))  # same size and mtime: ctime moved
    assert take_snapshot(store, roots, config()).files_read == 1
    assert tree(restored(tmp_path, store, roots)) == tree(roots)


# ----------------------------------------------------------------------------------------------
# hostile trees


def test_links_out_of_the_tree_are_never_followed_nor_stored(
    tmp_path: Path, store: CheckpointStore
) -> None:
    roots = cell(tmp_path)
    private = tmp_path / "private" / "test.jsonl"
    private.parent.mkdir()
    private.write_bytes(SECRET)
    (roots["code"] / "split").symlink_to(private)
    (roots["code"] / "split_dir").symlink_to(private.parent, target_is_directory=True)
    (roots["output"] / "passwd").symlink_to("/etc/passwd")
    (roots["output"] / "v1" / "up").symlink_to("../../../private/test.jsonl")
    (roots["home"] / "sneaky").symlink_to("a/../../private/test.jsonl")  # .. after a name
    result = take_snapshot(store, roots, config())
    data = stored(store.root)
    assert SECRET not in data and b"root:x:0:0" not in data
    assert result.skipped == {"symlink_out": 5} and result.symlinks == 1
    dest = restored(tmp_path, store, roots)
    assert os.readlink(dest["code"] / "latest") == "pkg/__init__.py"
    assert not (dest["code"] / "split").exists() and not (dest["output"] / "passwd").is_symlink()


def test_a_root_replaced_by_a_link_is_taken_as_an_empty_folder(
    tmp_path: Path, store: CheckpointStore
) -> None:
    roots = cell(tmp_path)
    private = tmp_path / "private"
    private.mkdir()
    (private / "test.jsonl").write_bytes(SECRET)
    os.rename(roots["code"], tmp_path / "code.old")
    roots["code"].symlink_to(private, target_is_directory=True)
    result = take_snapshot(store, roots, config())
    assert SECRET not in stored(store.root) and result.skipped == {"root_not_a_folder": 1}
    dest = restored(tmp_path, store, roots)
    assert list(dest["code"].iterdir()) == [] and not dest["code"].is_symlink()


def test_a_hardlink_to_an_outside_file_is_never_read(
    tmp_path: Path, store: CheckpointStore
) -> None:
    roots = cell(tmp_path)
    outside = tmp_path / "host_file"
    outside.write_bytes(SECRET)
    os.link(outside, roots["output"] / "v1" / "tokenizer.json")
    inside = roots["code"] / "train.py"
    os.link(inside, roots["home"] / "train_copy.py")  # both names inside: taken
    result = take_snapshot(store, roots, config())
    assert SECRET not in stored(store.root)
    assert result.skipped == {"hardlink_out": 1}
    dest = restored(tmp_path, store, roots)
    assert not (dest["output"] / "v1" / "tokenizer.json").exists()
    assert (dest["home"] / "train_copy.py").read_text() == inside.read_text()
    assert (dest["home"] / "train_copy.py").stat().st_nlink == 1  # restored as its own file


def test_fifos_sockets_and_devices_are_skipped_without_blocking(
    tmp_path: Path, store: CheckpointStore
) -> None:
    roots = cell(tmp_path)
    os.mkfifo(roots["code"] / "pipe")
    os.mkfifo(roots["home"] / "model.safetensors")
    with contextlib.closing(socket.socket(socket.AF_UNIX)) as sock:
        sock.bind(str(roots["output"] / "sock"))
        specials = 3
        with contextlib.suppress(PermissionError):
            os.mknod(roots["output"] / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            specials += 1
        result = in_thread(lambda: take_snapshot(store, roots, config()))
    assert result.skipped == {"special": specials}
    assert "pipe" not in json.dumps(json.loads(result.manifest.read_text())["entries"])


def test_a_huge_sparse_file_is_refused_by_the_cap_without_being_read(
    tmp_path: Path, store: CheckpointStore
) -> None:
    roots = cell(tmp_path)
    sparse = roots["output"] / "v1" / "pytorch_model.bin"
    with sparse.open("wb") as handle:
        handle.truncate(50 << 30)  # 50 GB apparent, nothing on disk
    started = time.monotonic()
    with pytest.raises(CheckpointError, match=r"cell\.checkpoint\.max_file_bytes = 1073741824"):
        take_snapshot(store, roots, config(max_file_bytes=1 << 30))
    with pytest.raises(CheckpointError, match=r"cell\.checkpoint\.max_bytes"):
        take_snapshot(store, roots, config(max_bytes=10 << 30))
    assert time.monotonic() - started < 5
    assert store.manifest_ids() == [] and not any((store.root / "blobs").iterdir())


def test_too_many_files_fails_the_checkpoint_naming_the_cap(
    tmp_path: Path, store: CheckpointStore
) -> None:
    roots = cell(tmp_path)
    with pytest.raises(CheckpointError, match=r"cell\.checkpoint\.max_files = 5"):
        take_snapshot(store, roots, config(max_files=5))


class SwapOnThaw:
    """A freezer whose thaw (between the listing and the copy) swaps files as an agent could."""

    def __init__(self, swap: Callable[[], None]) -> None:
        self.swap = swap
        self.calls: list[str] = []

    def freeze(self, timeout_s: float = 5.0) -> bool:
        self.calls.append("freeze")
        return True

    def thaw(self) -> None:
        self.calls.append("thaw")
        self.swap()


def test_a_file_swapped_for_a_fifo_or_a_link_after_the_listing_is_not_read(
    tmp_path: Path, store: CheckpointStore
) -> None:
    roots = cell(tmp_path)
    weights = roots["output"] / "v1" / "model.safetensors"
    config_json = roots["output"] / "v1" / "config.json"
    private = tmp_path / "private.txt"
    private.write_bytes(SECRET)

    def swap() -> None:
        weights.unlink()
        os.mkfifo(weights)
        config_json.unlink()
        config_json.symlink_to(private)

    freezer = SwapOnThaw(swap)
    result = in_thread(lambda: take_snapshot(store, roots, config(), freezer=freezer))
    assert freezer.calls == ["freeze", "thaw"] and result.frozen
    assert result.skipped == {"replaced": 1, "symlink": 1}
    assert SECRET not in stored(store.root)


def test_a_folder_swapped_for_a_link_after_the_listing_is_not_entered(
    tmp_path: Path, store: CheckpointStore
) -> None:
    roots = cell(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model.safetensors").write_bytes(SECRET)

    def swap() -> None:
        v1 = roots["output"] / "v1"
        v1.rename(roots["output"] / "old")
        v1.symlink_to(outside, target_is_directory=True)

    result = take_snapshot(store, roots, config(), freezer=SwapOnThaw(swap))
    assert SECRET not in stored(store.root) and result.skipped == {"replaced": 2}


def test_unreadable_files_are_skipped_and_counted(
    tmp_path: Path, store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    roots = cell(tmp_path)
    real = ck.open_under

    def refuse(root_fd: int, parts: Any, flags: int = ck.OPEN_FILE) -> int:
        if parts[-1] == "train.py":
            raise PermissionError(13, "Permission denied")
        return real(root_fd, parts, flags)

    monkeypatch.setattr(ck, "open_under", refuse)
    result = take_snapshot(store, roots, config())
    assert result.skipped == {"unreadable": 1} and result.files == 5


def test_deep_trees_and_odd_names_need_no_recursion(tmp_path: Path, store: CheckpointStore) -> None:
    roots = cell(tmp_path)
    fd = os.open(roots["code"], os.O_RDONLY)
    try:  # deeper than a path may be long: made by descriptor
        for _ in range(ck.MAX_DEPTH + 20):
            os.mkdir("d", dir_fd=fd)
            fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
            os.close(old)
        os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    finally:
        os.close(fd)
    for raw in (b"\xff\xfe", b"new\nline", b"tab\there", b"-rf", b"\x1b[31mred"):
        (roots["home"] / os.fsdecode(raw)).write_bytes(raw)
    result = take_snapshot(store, roots, config())
    assert result.skipped == {"too_deep": 1} and result.dirs >= ck.MAX_DEPTH
    dest = restored(tmp_path, store, ["home"])
    assert tree(dest) == tree({"home": roots["home"]})


def test_a_wide_tree_keeps_one_descriptor_per_level(tmp_path: Path, store: CheckpointStore) -> None:
    roots = cell(tmp_path)
    for i in range(300):
        (roots["home"] / ".cache" / f"pkg{i}" / "lib").mkdir(parents=True)
        (roots["home"] / ".cache" / f"pkg{i}" / "lib" / "m.py").write_text(str(i))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))  # fewer than the folders
    try:
        result = take_snapshot(store, roots, config())
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert result.skipped == {} and result.files == 306


def _ticker(group: CellCgroup, ticks: Path) -> subprocess.Popen[bytes]:
    code = f"import time\nwhile True:\n    open({str(ticks)!r}, 'a').write('.'); time.sleep(0.02)"
    proc = subprocess.Popen([sys.executable, "-c", code], preexec_fn=group.enter)
    deadline = time.monotonic() + 10
    while not (ticks.exists() and ticks.stat().st_size > 2):
        assert time.monotonic() < deadline, "the ticker never ticked"
        time.sleep(0.02)
    return proc


def _ticks_advance(ticks: Path, timeout_s: float = 5) -> bool:
    before = ticks.stat().st_size
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ticks.stat().st_size > before:
            return True
        time.sleep(0.02)
    return False


@real_freezer
def test_the_cell_is_frozen_while_it_is_listed(
    tmp_path: Path,
    store: CheckpointStore,
    make_group: Callable[[CgroupLimits], CellCgroup],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    roots = cell(tmp_path)
    group = make_group(CgroupLimits())
    ticks = tmp_path / "ticks"
    proc = _ticker(group, ticks)
    seen: list[int] = []
    real = ck._Lister.list_root

    def slow_list(self: ck._Lister, name: str, path: Path) -> int | None:
        seen.append(ticks.stat().st_size)
        time.sleep(0.3)
        seen.append(ticks.stat().st_size)
        return real(self, name, path)

    monkeypatch.setattr(ck._Lister, "list_root", slow_list)
    try:
        result = take_snapshot(store, roots, config(), freezer=group)
        assert len(set(seen)) == 1, f"the ticker ran while frozen: {seen}"
        assert result.frozen and 0.9 < result.frozen_s < ck.MAX_FREEZE_S
        assert _ticks_advance(ticks)
    finally:
        group.kill()
        proc.wait(timeout=5)


@real_freezer
def test_the_freeze_is_released_when_the_listing_raises(
    tmp_path: Path, store: CheckpointStore, make_group: Callable[[CgroupLimits], CellCgroup]
) -> None:
    roots = cell(tmp_path)
    group = make_group(CgroupLimits())
    ticks = tmp_path / "ticks"
    proc = _ticker(group, ticks)
    try:
        with pytest.raises(CheckpointError, match="max_files"):
            take_snapshot(store, roots, config(max_files=3), freezer=group)
        assert _ticks_advance(ticks), "the cell stayed frozen"
    finally:
        group.kill()
        proc.wait(timeout=5)


@real_freezer
def test_a_listing_past_the_freeze_limit_thaws_and_says_so(
    tmp_path: Path,
    store: CheckpointStore,
    make_group: Callable[[CgroupLimits], CellCgroup],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    roots = cell(tmp_path)
    for i in range(60):
        (roots["code"] / f"d{i}").mkdir()
        (roots["code"] / f"d{i}" / "f").write_text(str(i))
    group = make_group(CgroupLimits())
    ticks = tmp_path / "ticks"
    proc = _ticker(group, ticks)
    sizes: list[int] = []
    real = ck._Lister._list_dir

    def slow_dir(self: ck._Lister, *args: Any) -> Any:
        sizes.append(ticks.stat().st_size)
        time.sleep(0.01)  # a slow file system: 60 folders take longer than the limit
        return real(self, *args)

    monkeypatch.setattr(ck._Lister, "_list_dir", slow_dir)
    try:
        result = take_snapshot(store, roots, config(), freezer=group, max_freeze_s=0.2)
        assert not result.frozen and 0.2 <= result.frozen_s < 0.4 and result.files == 66
        assert json.loads(result.manifest.read_text())["frozen"] is False
        assert sizes[-1] > sizes[0], "the cell did not run again during the rest of the listing"
    finally:
        group.kill()
        proc.wait(timeout=5)


# ----------------------------------------------------------------------------------------------
# property: any tree of files and folders comes back as it was

_names = st.text(st.characters(codec="utf-8", exclude_characters="/\0"), min_size=1, max_size=8)
_names = _names.filter(lambda n: n not in (".", ".."))
_trees = st.recursive(
    st.binary(max_size=300),
    lambda children: st.dictionaries(_names, children, max_size=4),
    max_leaves=12,
)


def _write(path: Path, node: Any) -> None:
    if isinstance(node, bytes):
        path.write_bytes(node)
        return
    path.mkdir()
    for name, child in node.items():
        _write(path / name, child)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.dictionaries(_names, _trees, max_size=5))
def test_any_generated_tree_round_trips(
    tmp_path_factory: pytest.TempPathFactory, spec: Any
) -> None:
    base = tmp_path_factory.mktemp("prop")
    _write(base / "code", spec)
    (base / "store").mkdir()
    store = CheckpointStore(base / "store")
    take_snapshot(store, {"code": base / "code"}, config())
    take_snapshot(store, {"code": base / "code"}, config())  # the second reuses the first
    restore_snapshot(store, {"code": base / "back"})
    assert tree({"code": base / "back"}) == tree({"code": base / "code"})
