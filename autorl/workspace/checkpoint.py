"""Checkpoints of a running cell: incremental, content-addressed snapshots of its workspace and
HOME.

:func:`take_snapshot` copies the trees it is given (a cell's ``code/``, ``output/`` and the
agent's HOME, each under a name) into a :class:`CheckpointStore`; :func:`restore_snapshot`
(:mod:`autorl.workspace.checkpoint_restore`) rebuilds them from a manifest. A file
whose ``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)`` equals its entry in the store's latest
manifest is neither read nor copied again, and a content already in the store is stored once, so a
model folder travels once however many checkpoints follow.

**Consistency.** The listing (every entry and its ``stat``) is taken while the cell's cgroup is
frozen, so it is one instant of the agent's files; then the cgroup is thawed and the files that are
new or changed are read, hashed and copied. Each one is read only if it is still the inode that was
listed, and a file whose size or times moved while it was read is counted in ``changed`` (its
content is what was read). ``ctime`` is part of the key because the agent can set a file's
``mtime`` back (``touch -d``) but not its ``ctime``. Hashing is not done frozen: a new 16 GB model
would take longer to hash than the freeze may last. The freeze never lasts more than
:data:`MAX_FREEZE_S`: a listing that runs longer thaws the cell and goes on unfrozen, and the
manifest says ``frozen: false``; the cell is thawed whatever the listing raises.

**Hostile input.** The copier runs as root outside the sandbox on files the agent controls:

- every path is opened one component at a time with ``O_NOFOLLOW`` (:mod:`autorl.workspace.safe_fs`)
  and a file with ``O_NONBLOCK``; its descriptor is ``fstat``\\ ed and read only if it is a regular
  file and the inode that was listed (a swap to a FIFO, a link or another file is skipped and
  counted);
- a symlink is never followed; it is taken as a link (its target string) only if the target is
  relative and stays inside its root by construction (leading ``..`` no more than the link's depth,
  no ``..`` after a name, so no chain of such links leaves the root either); else it is skipped and
  counted (``symlink_out``);
- FIFOs, sockets and devices are never opened (``special``), other file systems are not entered
  (``other_fs``), folders deeper than :data:`MAX_DEPTH` are skipped (``too_deep``);
- a regular file with more links than the roots hold (``st_nlink`` above the number of paths of its
  inode found in the roots) has a name outside them, possibly a host file: it is skipped and counted
  (``hardlink_out``), never read; a file whose links are all inside is read once per path through
  its own path and stored once (its content is one blob);
- ``cell.checkpoint.max_files``, ``max_bytes`` and ``max_file_bytes`` are checked on the listing's
  ``stat`` before any byte is read, by apparent size (a sparse file of terabytes is refused at
  once, not read); a cap exceeded fails the checkpoint with a :class:`CheckpointError` naming it;
- names with any bytes are kept (``surrogateescape``); unreadable files are skipped and counted.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import logging
import os
import stat
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from autorl.cell_schema import CheckpointConfig
from autorl.workspace.checkpoint_restore import RestoreResult, restore_snapshot
from autorl.workspace.checkpoint_store import (
    MANIFEST_VERSION,
    CheckpointError,
    CheckpointStore,
    Entry,
    link_stays_inside,
)
from autorl.workspace.safe_fs import OPEN_DIR, OPEN_FILE, open_failure, open_under, printable

__all__ = [
    "MAX_DEPTH",
    "MAX_FREEZE_S",
    "CheckpointError",
    "CheckpointStore",
    "Freezer",
    "RestoreResult",
    "SnapshotResult",
    "link_stays_inside",
    "restore_snapshot",
    "take_snapshot",
]

logger = logging.getLogger(__name__)

#: The longest the cell is kept frozen for a listing (issue #43: never more than 5 s).
MAX_FREEZE_S = 5.0
#: Folder levels below a root that are taken; deeper ones are skipped and counted.
MAX_DEPTH = 256
_CHUNK = 1 << 20
_CLOCK_EVERY = 256  # entries listed between two looks at the freeze deadline


class Freezer(Protocol):
    """What pauses the cell while it is listed: :class:`autorl.seal.cgroups.CellCgroup`."""

    def freeze(self, timeout_s: float = ...) -> bool:
        """Freeze every process; whether the kernel reports it frozen within ``timeout_s``."""
        ...

    def thaw(self) -> None:
        """Let the processes run again."""
        ...


@dataclass(frozen=True)
class SnapshotResult:
    """One checkpoint's figures (also in its manifest).

    Attributes:
        checkpoint_id: The manifest's id in the store.
        manifest: The manifest's path.
        files: Regular files taken.
        dirs: Folders taken (roots not counted).
        symlinks: Links taken (as links).
        bytes_total: Bytes of the files taken.
        bytes_new: Bytes written to the store as new blobs.
        files_read: Files read and hashed (the rest matched the previous manifest).
        frozen: The whole listing was taken with the cell frozen.
        frozen_s: How long the cell was frozen.
        total_s: The checkpoint's wall time.
        changed: Files that changed between the listing and the end of their copy.
        skipped: Reason -> count of what was not taken (``symlink_out``, ``hardlink_out``,
            ``special``, ``other_fs``, ``too_deep``, ``unreadable``, ``missing``, ``replaced``;
            a root that could not be opened: ``root_not_a_folder`` (a link), ``root_missing``).
    """

    checkpoint_id: str
    manifest: Path
    files: int
    dirs: int
    symlinks: int
    bytes_total: int
    bytes_new: int
    files_read: int
    frozen: bool
    frozen_s: float
    total_s: float
    changed: int
    skipped: dict[str, int] = field(default_factory=dict)


@dataclass
class _Listed:
    """A regular file in the listing, with the ``stat`` it had."""

    root: str
    parts: tuple[str, ...]
    info: os.stat_result


def _key(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


class _Lister:
    """One checkpoint's walk of its roots: entries, caps, skips, and the freeze deadline."""

    def __init__(self, cfg: CheckpointConfig, deadline_hit: Callable[[], None]) -> None:
        self.cfg = cfg
        self.deadline_hit = deadline_hit
        self.entries: list[Entry] = []
        self.files: list[_Listed] = []
        self.skipped: Counter[str] = Counter()
        self.links: dict[tuple[int, int], list[int]] = {}  # inode -> indexes in self.files
        self.count = 0
        self.bytes = 0
        self.roots: dict[str, int] = {}

    def _cap(self, what: str, value: int, key: str, limit: int) -> None:
        raise CheckpointError(
            f"checkpoint refused: {what} ({value}) exceeds cell.checkpoint.{key} = {limit}; "
            f"raise cell.checkpoint.{key} or have the agent keep less in its workspace and HOME"
        )

    def list_root(self, name: str, path: Path) -> int | None:
        """Walk one root (iteratively: a deep tree cannot exhaust the stack); its open fd."""
        try:
            root_fd = os.open(path, OPEN_DIR)
        except OSError as error:
            # O_DIRECTORY | O_NOFOLLOW on a link (or a file) fails with ENOTDIR.
            reason = "not_a_folder" if error.errno == errno.ENOTDIR else open_failure(error)
            self.skipped[f"root_{reason}"] += 1
            self.roots[name] = 0o700
            return None
        info = os.fstat(root_fd)
        self.roots[name] = stat.S_IMODE(info.st_mode) & 0o777
        # One open folder per level of the path being walked (never one per pending folder: a
        # folder with 100 000 sub-folders must not exhaust the descriptors).
        frames: list[tuple[int, tuple[str, ...], list[tuple[str, os.stat_result]]]] = [
            (os.dup(root_fd), (), self._list_dir(name, root_fd, ()))
        ]
        try:
            while frames:
                dir_fd, rel, pending = frames[-1]
                if not pending:
                    frames.pop()
                    os.close(dir_fd)
                    continue
                child_name, child_info = pending.pop()
                parts = (*rel, child_name)
                child = self._open_dir(dir_fd, child_name, parts, child_info, info.st_dev)
                if child is None:
                    continue
                mode = stat.S_IMODE(child_info.st_mode) & 0o777
                self.entries.append(Entry(name, "/".join(parts), "dir", mode))
                try:
                    frames.append((child, parts, self._list_dir(name, child, parts)))
                except BaseException:
                    os.close(child)
                    raise
        finally:
            for dir_fd, _, _ in frames:
                os.close(dir_fd)
        return root_fd

    def _list_dir(
        self, root: str, dir_fd: int, rel: tuple[str, ...]
    ) -> list[tuple[str, os.stat_result]]:
        """List one open folder; its sub-folders to walk (name and ``stat``)."""
        try:
            with os.scandir(dir_fd) as listing:
                names = sorted(entry.name for entry in listing)
        except OSError as error:
            self.skipped[open_failure(error)] += 1
            return []
        self.deadline_hit()
        children: list[tuple[str, os.stat_result]] = []
        for name in names:
            self.count += 1
            if self.count > self.cfg.max_files:
                self._cap("the workspace's entries", self.count, "max_files", self.cfg.max_files)
            if self.count % _CLOCK_EVERY == 0:
                self.deadline_hit()
            parts = (*rel, name)
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError as error:
                self.skipped[open_failure(error)] += 1
                continue
            mode = stat.S_IMODE(info.st_mode) & 0o777
            if stat.S_ISLNK(info.st_mode):
                self._link(root, dir_fd, name, parts, mode)
            elif stat.S_ISDIR(info.st_mode):
                children.append((name, info))
            elif stat.S_ISREG(info.st_mode):
                self._file(root, parts, info)
            else:  # FIFO, socket, device: never opened
                self.skipped["special"] += 1
        return children

    def _link(self, root: str, dir_fd: int, name: str, parts: tuple[str, ...], mode: int) -> None:
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError as error:
            self.skipped[open_failure(error)] += 1
            return
        if link_stays_inside(target, len(parts) - 1):
            self.entries.append(Entry(root, "/".join(parts), "symlink", mode, target=target))
        else:
            self.skipped["symlink_out"] += 1

    def _open_dir(
        self, dir_fd: int, name: str, parts: tuple[str, ...], info: os.stat_result, device: int
    ) -> int | None:
        if info.st_dev != device:
            self.skipped["other_fs"] += 1
            return None
        if len(parts) > MAX_DEPTH:
            self.skipped["too_deep"] += 1
            return None
        try:
            fd = os.open(name, OPEN_DIR, dir_fd=dir_fd)
        except OSError as error:
            self.skipped[open_failure(error)] += 1
            return None
        opened = os.fstat(fd)
        if (opened.st_ino, opened.st_dev) != (info.st_ino, info.st_dev):
            os.close(fd)  # replaced between the stat and the open
            self.skipped["replaced"] += 1
            return None
        return fd

    def _file(self, root: str, parts: tuple[str, ...], info: os.stat_result) -> None:
        cfg = self.cfg
        if info.st_size > cfg.max_file_bytes:
            what = f"file {root}/{printable('/'.join(parts))}"
            self._cap(what, info.st_size, "max_file_bytes", cfg.max_file_bytes)
        self.bytes += info.st_size
        if self.bytes > cfg.max_bytes:
            self._cap("the workspace's bytes", self.bytes, "max_bytes", cfg.max_bytes)
        if info.st_nlink > 1:
            self.links.setdefault((info.st_dev, info.st_ino), []).append(len(self.files))
        self.files.append(_Listed(root, parts, info))

    def drop_outside_links(self) -> None:
        """Skip every multi-link file with a name outside the roots (see the module docstring)."""
        dropped: set[int] = set()
        for indexes in self.links.values():
            if len(indexes) < self.files[indexes[0]].info.st_nlink:
                dropped.update(indexes)
        if dropped:
            self.skipped["hardlink_out"] += len(dropped)
            for index in dropped:
                self.bytes -= self.files[index].info.st_size
            self.files = [f for i, f in enumerate(self.files) if i not in dropped]


class _Freeze:
    """Keeps the cell frozen for the listing, at most ``limit_s``; thawing is idempotent."""

    def __init__(self, freezer: Freezer | None, limit_s: float) -> None:
        self.freezer = freezer
        self.limit_s = limit_s
        self.started = 0.0
        self.frozen_s = 0.0
        self.active = False
        self.whole = freezer is not None

    def __enter__(self) -> _Freeze:
        if self.freezer is None:
            return self
        self.started = time.monotonic()
        self.active = True
        try:
            frozen = self.freezer.freeze(timeout_s=min(1.0, self.limit_s))
        except OSError as error:
            logger.warning("checkpoint: the cell cannot be frozen (%s); listing it running", error)
            frozen = False
        if not frozen:
            logger.warning("checkpoint: the cell is not frozen; listing it running")
            self.thaw(whole=False)
        return self

    def check(self) -> None:
        """Thaw if the listing has run past the limit (it goes on unfrozen)."""
        if self.active and time.monotonic() - self.started >= self.limit_s:
            logger.warning("checkpoint: listing took over %.1f s; thawed, going on", self.limit_s)
            self.thaw(whole=False)

    def thaw(self, *, whole: bool = True) -> None:
        """Let the cell run again (``whole=False``: before the listing ended)."""
        if not self.active:
            return
        self.active = False
        self.whole = self.whole and whole
        assert self.freezer is not None
        try:
            self.freezer.thaw()
        finally:
            self.frozen_s = time.monotonic() - self.started

    def __exit__(self, *exc: object) -> None:
        self.thaw()


def take_snapshot(
    store: CheckpointStore,
    roots: Mapping[str, Path],
    cfg: CheckpointConfig,
    *,
    freezer: Freezer | None = None,
    max_freeze_s: float = MAX_FREEZE_S,
) -> SnapshotResult:
    """Take one checkpoint of ``roots`` into ``store`` (incremental against its latest manifest).

    Args:
        store: The cell's checkpoint store.
        roots: Name (``code``, ``output``, ``home``) -> the folder; a root that is missing or is a
            link is taken as an empty folder and counted in ``skipped`` (``root_...``).
        cfg: ``cell.checkpoint`` (its caps; ``enabled`` and ``every_s`` are the caller's).
        freezer: The cell's cgroup, frozen for the listing; None: listed running (``frozen`` false).
        max_freeze_s: The longest freeze (:data:`MAX_FREEZE_S`; tests pass less).

    Returns:
        The checkpoint's figures; the manifest is in the store under ``checkpoint_id``.

    Raises:
        CheckpointError: A cap is exceeded (naming its ``cell.checkpoint`` key), or the store is
            unreachable, read-only or full. The cell is thawed and left as it was.
    """
    started = time.monotonic()
    for name in roots:
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"checkpoint root name {name!r} must be one plain path component")
    previous = _previous(store)
    root_fds: dict[str, int] = {}
    freeze = _Freeze(freezer, max_freeze_s)
    lister = _Lister(cfg, freeze.check)
    try:
        with freeze:
            for name, path in roots.items():
                fd = lister.list_root(name, Path(path))
                if fd is not None:
                    root_fds[name] = fd
        lister.drop_outside_links()
        copier = _Copier(store, lister, previous, root_fds)
        copier.copy_all()
    finally:
        for fd in root_fds.values():
            os.close(fd)
    entries = sorted(lister.entries + copier.taken, key=lambda e: (e.root, e.path))
    checkpoint_id = store.next_id()
    result = SnapshotResult(
        checkpoint_id=checkpoint_id,
        manifest=store.manifests / f"{checkpoint_id}.json",
        files=len(copier.taken),
        dirs=sum(e.kind == "dir" for e in entries),
        symlinks=sum(e.kind == "symlink" for e in entries),
        bytes_total=sum(e.size for e in copier.taken),
        bytes_new=copier.bytes_new,
        files_read=copier.files_read,
        frozen=freeze.whole,
        frozen_s=round(freeze.frozen_s, 4),
        total_s=round(time.monotonic() - started, 4),
        changed=copier.changed,
        skipped=dict(sorted(lister.skipped.items())),
    )
    figures = {
        k: v
        for k, v in dataclasses.asdict(result).items()
        if k not in ("manifest", "checkpoint_id")
    }
    manifest = {
        "version": MANIFEST_VERSION,
        "parent": previous.get("id"),
        "created": time.time(),
        "roots": lister.roots,
        **figures,
        "id": checkpoint_id,
        "entries": [e.as_json() for e in entries],
    }
    store.write_manifest(checkpoint_id, manifest)
    logger.info("checkpoint %s: %s", checkpoint_id, figures)
    return result


def _previous(store: CheckpointStore) -> dict[str, object]:
    """The latest manifest of ``store`` ({} if none; a broken one is logged and not used)."""
    if not store.manifest_ids():
        return {}
    try:
        return store.read_manifest()
    except CheckpointError as error:
        logger.warning("checkpoint: the previous manifest is not used: %s", error)
        return {}


class _Copier:
    """Reads, hashes and stores the listed files that the previous manifest does not hold."""

    def __init__(
        self,
        store: CheckpointStore,
        lister: _Lister,
        previous: Mapping[str, object],
        root_fds: Mapping[str, int],
    ) -> None:
        self.store = store
        self.lister = lister
        self.root_fds = root_fds
        entries = previous.get("entries", [])
        assert isinstance(entries, list)
        self.known = {(e.root, e.path): e for e in entries if e.kind == "file"}
        self.taken: list[Entry] = []
        self.bytes_new = 0
        self.files_read = 0
        self.changed = 0

    def copy_all(self) -> None:
        """Take every listed file (an unchanged one from the previous manifest)."""
        for listed in self.lister.files:
            path = "/".join(listed.parts)
            mode = stat.S_IMODE(listed.info.st_mode) & 0o777
            old = self.known.get((listed.root, path))
            key = _key(listed.info)
            if old is not None and old.key == key and self.store.has_blob(old.sha256, old.size):
                self.taken.append(
                    Entry(listed.root, path, "file", mode, old.size, old.sha256, key=key)
                )
                continue
            entry = self._read(listed, path, mode)
            if entry is not None:
                self.taken.append(entry)

    def _read(self, listed: _Listed, path: str, mode: int) -> Entry | None:
        try:
            fd = open_under(self.root_fds[listed.root], listed.parts, OPEN_FILE)
        except OSError as error:
            # ENOTDIR: a folder on the way became a link or a file after the listing.
            reason = "replaced" if error.errno == errno.ENOTDIR else open_failure(error)
            self.lister.skipped[reason] += 1
            return None
        try:
            info = os.fstat(fd)
            same = (info.st_dev, info.st_ino) == (listed.info.st_dev, listed.info.st_ino)
            if not stat.S_ISREG(info.st_mode) or not same:
                # A FIFO, a link or another file took its place after the listing.
                self.lister.skipped["replaced"] += 1
                return None
            # No more than was listed (and checked against the caps), whatever it has grown to.
            limit = min(info.st_size, listed.info.st_size)
            digest, size = self._store(fd, limit, path)
            if _key(os.fstat(fd)) != _key(listed.info) or size != listed.info.st_size:
                self.changed += 1
        except OSError as error:  # reading the agent's file (the store's errors are raised)
            self.lister.skipped[open_failure(error)] += 1
            return None
        finally:
            os.close(fd)
        self.files_read += 1
        return Entry(listed.root, path, "file", mode, size, digest, key=_key(listed.info))

    def _store(self, fd: int, limit: int, path: str) -> tuple[str, int]:
        """Copy up to ``limit`` bytes of ``fd`` into a new blob; its sha256 and size."""
        hasher = hashlib.sha256()
        out, tmp = self.store.new_blob()
        size = 0
        try:
            while size < limit:
                chunk = os.read(fd, min(_CHUNK, limit - size))
                if not chunk:
                    break  # shrank since it was listed
                hasher.update(chunk)
                with self.store.failing(f"copying {printable(path)}"):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(out, view) :]
                size += len(chunk)
            with self.store.failing(f"closing the blob of {printable(path)}"):
                os.close(out)
            out = -1
            digest = hasher.hexdigest()
            if self.store.has_blob(digest, size):
                self.store.discard(tmp)
            else:
                self.store.commit_blob(tmp, digest)
                self.bytes_new += size
            return digest, size
        finally:
            if out >= 0:
                os.close(out)
            self.store.discard(tmp)
