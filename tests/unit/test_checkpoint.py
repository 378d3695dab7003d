"""The cell checkpoint copier (autorl/workspace/checkpoint.py): round trips, increments, hostile
trees, a store that fails, and the freeze of a real cgroup.

The copier runs as root outside the sandbox on files the agent controls, so most tests here plant
what an agent could: links and hard links to files it must never carry, FIFOs, a sparse file of
50 GB, a file swapped for a FIFO between the listing and the copy, a link in the restore target.
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
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autorl.cell_schema import CheckpointConfig
from autorl.seal.cgroups import CellCgroup, CgroupLimits, cgroup_support
from autorl.workspace import checkpoint as ck
from autorl.workspace import checkpoint_restore as cr
from autorl.workspace.checkpoint import (
    CheckpointError,
    CheckpointStore,
    restore_snapshot,
    take_snapshot,
)

SECRET = b"PRIVATE-SPLIT-7f3a9c answer=42"
_SUPPORT = cgroup_support()
real_freezer = pytest.mark.skipif(
    _SUPPORT.version is None or "freezer" not in _SUPPORT.controllers,
    reason=f"needs root and a cgroup freezer (v1 freezer or v2 cgroup.freeze): "
    f"{_SUPPORT.problems(('freezer',))}",
)


def config(**caps: int) -> CheckpointConfig:
    values: dict[str, Any] = {
        "enabled": True,
        "every_s": 600.0,
        "max_bytes": 1 << 40,
        "max_files": 100_000,
        "max_file_bytes": 1 << 40,
    }
    return CheckpointConfig(**(values | caps))


def cell(tmp_path: Path) -> dict[str, Path]:
    """A small workspace and HOME: code, a model folder, a session file."""
    roots = {name: tmp_path / "cell" / name for name in ("code", "output", "home")}
    for path in roots.values():
        path.mkdir(parents=True)
    (roots["code"] / "train.py").write_text("print('train')\n")
    (roots["code"] / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(roots["code"] / "run.sh", 0o755)
    (roots["code"] / "pkg").mkdir()
    (roots["code"] / "pkg" / "__init__.py").write_text("")
    (roots["code"] / "latest").symlink_to("pkg/__init__.py")
    (roots["output"] / "v1").mkdir()
    (roots["output"] / "v1" / "model.safetensors").write_bytes(os.urandom(1 << 20))
    (roots["output"] / "v1" / "config.json").write_text('{"a": 1}')
    (roots["home"] / ".claude" / "projects").mkdir(parents=True)
    (roots["home"] / ".claude" / "projects" / "session.jsonl").write_text('{"turn": 1}\n')
    return roots


def tree(roots: dict[str, Path]) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under ``roots``: kind, permission bits, content (a link: its target)."""
    found: dict[str, tuple[str, int, bytes]] = {}
    for name, root in roots.items():
        for folder, dirs, files in os.walk(root):
            for entry in dirs + files:
                path = Path(folder) / entry
                rel = f"{name}/{path.relative_to(root)}"
                info = path.lstat()
                if stat.S_ISLNK(info.st_mode):
                    found[rel] = ("link", 0, os.fsencode(os.readlink(path)))
                elif stat.S_ISDIR(info.st_mode):
                    found[rel] = ("dir", stat.S_IMODE(info.st_mode), b"")
                else:
                    found[rel] = ("file", stat.S_IMODE(info.st_mode), path.read_bytes())
    return found


def stored(store_root: Path) -> bytes:
    """Everything the store holds (blobs and manifests), for grepping."""
    return b"".join(p.read_bytes() for p in sorted(store_root.rglob("*")) if p.is_file())


def restored(tmp_path: Path, store: CheckpointStore, names: Any, **kw: Any) -> dict[str, Path]:
    dest = {name: tmp_path / "restored" / name for name in names}
    (tmp_path / "restored").mkdir(exist_ok=True)
    restore_snapshot(store, dest, **kw)
    return dest


def in_thread(function: Callable[[], Any], timeout_s: float = 10) -> Any:
    """Run ``function`` with a time limit: a copier that blocked on a FIFO fails the test."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(function()), daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), f"blocked for over {timeout_s} s"
    assert result, "raised (see the thread's traceback above)"
    return result[0]


@pytest.fixture
def store(tmp_path: Path) -> CheckpointStore:
    (tmp_path / "store").mkdir()
    return CheckpointStore(tmp_path / "store")


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
