"""Rebuild a cell's workspace and HOME from a checkpoint (:mod:`autorl.workspace.checkpoint`).

The manifest is the harness's own record, but it names paths the agent chose, so restoring trusts
none of them: each entry's path must be relative, without ``.``, ``..`` or empty components (else
the whole restore is refused); every folder is opened one component at a time with ``O_NOFOLLOW``
from the root's descriptor, and every file is created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` in a
root that was empty, so nothing is written through a link, whoever planted it. Only regular
files, folders and links (with a target that stays inside, checked again) are made; modes keep the
permission bits only (no set-uid, set-gid or sticky bit). Each blob's sha256 is checked as it is
copied: a corrupt store fails the restore, it never restores other bytes.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from autorl.workspace.checkpoint_store import (
    CheckpointError,
    CheckpointStore,
    Entry,
    link_stays_inside,
)
from autorl.workspace.safe_fs import OPEN_DIR, open_under, printable

__all__ = ["RestoreResult", "entry_parts", "restore_snapshot"]

_CHUNK = 1 << 20
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class RestoreResult:
    """What a restore made.

    Attributes:
        checkpoint_id: The checkpoint restored.
        files: Regular files written.
        dirs: Folders made (roots not counted).
        symlinks: Links made.
        bytes: Bytes written.
    """

    checkpoint_id: str
    files: int
    dirs: int
    symlinks: int
    bytes: int


def entry_parts(path: str) -> tuple[str, ...]:
    """The components of a manifest path; a path that could leave its root is refused.

    Examples:
        >>> entry_parts("output/v1/config.json")
        ('output', 'v1', 'config.json')
        >>> entry_parts("../etc/passwd")
        Traceback (most recent call last):
        ...
        autorl.workspace.checkpoint_store.CheckpointError: manifest path '../etc/passwd' is not \
relative inside its root (no /, ., .. or empty parts)
    """
    parts = tuple(path.split("/"))
    if not path or "\0" in path or any(p in ("", ".", "..") for p in parts):
        raise CheckpointError(
            f"manifest path {printable(path)!r} is not relative inside its root "
            "(no /, ., .. or empty parts)"
        )
    return parts


def restore_snapshot(
    store: CheckpointStore,
    dest: Mapping[str, Path],
    checkpoint_id: str | None = None,
    *,
    owner: tuple[int, int] | None = None,
) -> RestoreResult:
    """Rebuild the roots of checkpoint ``checkpoint_id`` (default: the latest) under ``dest``.

    Args:
        store: The cell's checkpoint store.
        dest: Root name -> a folder that does not exist yet (its parent must) or is empty; the
            manifest's entries of roots not named here are not restored.
        checkpoint_id: Which checkpoint.
        owner: ``(uid, gid)`` given to everything made (the new cell's agent); None: the caller's.

    Returns:
        What was made.

    Raises:
        CheckpointError: The manifest is malformed or names an unsafe path, a blob is missing or
            corrupt, a destination is not empty, or writing failed (naming the path).
    """
    manifest = store.read_manifest(checkpoint_id)
    roots = manifest.get("roots")
    if not isinstance(roots, dict) or not set(dest) <= set(roots):
        raise CheckpointError(
            f"checkpoint {manifest.get('id')} has roots {sorted(roots or [])}, not {sorted(dest)}"
        )
    if not all(isinstance(roots[name], int) for name in dest):
        raise CheckpointError(f"checkpoint {manifest.get('id')} has a root mode that is no number")
    entries: list[Entry] = [e for e in manifest["entries"] if e.root in dest]
    parsed = [(e, entry_parts(e.path)) for e in entries]
    fds = {name: _fresh_root(Path(path), owner) for name, path in dest.items()}
    counts = {"file": 0, "dir": 0, "symlink": 0}
    written = 0
    try:
        # Folders first (parents before children), then files, then links: no link exists in the
        # tree while anything is written into it.
        order = {"dir": 0, "file": 1, "symlink": 2}
        parsed.sort(key=lambda ep: (order[ep[0].kind], len(ep[1]), ep[1]))
        for entry, parts in parsed:
            written += _make(store, fds[entry.root], entry, parts, owner)
            counts[entry.kind] += 1
        # Folder modes last (a read-only folder would refuse its children), deepest first.
        for entry, parts in sorted(parsed, key=lambda ep: -len(ep[1])):
            if entry.kind == "dir":
                _chmod_dir(fds[entry.root], parts, entry.mode)
        for name, fd in fds.items():
            os.fchmod(fd, int(roots[name]) & 0o777)
    except OSError as error:
        raise CheckpointError(
            f"restore of checkpoint {manifest.get('id')} failed: {error}"
        ) from error
    finally:
        for fd in fds.values():
            os.close(fd)
    return RestoreResult(
        str(manifest.get("id")), counts["file"], counts["dir"], counts["symlink"], written
    )


def _fresh_root(path: Path, owner: tuple[int, int] | None) -> int:
    """Open (making it if missing) an empty destination folder that is not a link."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise CheckpointError(f"cannot make restore destination {path}: {error}") from error
    try:
        fd = os.open(path, OPEN_DIR)
    except OSError as error:
        raise CheckpointError(f"restore destination {path} is not a folder ({error})") from error
    if os.listdir(fd):
        os.close(fd)
        raise CheckpointError(f"restore destination {path} is not empty")
    if owner is not None:
        os.fchown(fd, *owner)
    return fd


def _make(
    store: CheckpointStore,
    root_fd: int,
    entry: Entry,
    parts: tuple[str, ...],
    owner: tuple[int, int] | None,
) -> int:
    """Make one entry; the bytes written."""
    parent = open_under(root_fd, parts[:-1], OPEN_DIR)
    name = parts[-1]
    try:
        if entry.kind == "dir":
            os.mkdir(name, 0o700, dir_fd=parent)
            if owner is not None:
                os.chown(name, *owner, dir_fd=parent, follow_symlinks=False)
            return 0
        if entry.kind == "symlink":
            if not link_stays_inside(entry.target, len(parts) - 1):
                raise CheckpointError(f"manifest link {printable(entry.path)!r} leaves its root")
            os.symlink(entry.target, name, dir_fd=parent)
            if owner is not None:
                os.chown(name, *owner, dir_fd=parent, follow_symlinks=False)
            return 0
        fd = os.open(name, _CREATE, 0o600, dir_fd=parent)
        try:
            _copy_blob(store, entry, fd)
            if owner is not None:
                os.fchown(fd, *owner)
            os.fchmod(fd, entry.mode & 0o777)
        finally:
            os.close(fd)
        return entry.size
    finally:
        os.close(parent)


def _copy_blob(store: CheckpointStore, entry: Entry, out: int) -> None:
    """Copy the entry's blob into ``out``, checking its size and sha256."""
    try:
        blob = os.open(store.blob_path(entry.sha256), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise CheckpointError(
            f"blob {entry.sha256[:12]} of {printable(entry.path)!r}: {error}"
        ) from error
    try:
        if not stat.S_ISREG(os.fstat(blob).st_mode):
            raise CheckpointError(f"blob {entry.sha256[:12]} is not a regular file")
        hasher = hashlib.sha256()
        size = 0
        while chunk := os.read(blob, _CHUNK):
            hasher.update(chunk)
            size += len(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
    finally:
        os.close(blob)
    if size != entry.size or hasher.hexdigest() != entry.sha256:
        raise CheckpointError(
            f"blob {entry.sha256[:12]} of {printable(entry.path)!r} is corrupt (size {size}, "
            f"expected {entry.size})"
        )


def _chmod_dir(root_fd: int, parts: tuple[str, ...], mode: int) -> None:
    fd = open_under(root_fd, parts, OPEN_DIR)
    try:
        os.fchmod(fd, mode & 0o777)
    finally:
        os.close(fd)
