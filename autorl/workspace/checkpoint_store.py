"""Where a cell's checkpoints are kept: content-addressed blobs, one JSON manifest per checkpoint.

```
<store>/
  blobs/<sha256[:2]>/<sha256>      each distinct file content once, whichever cell file held it
  manifests/<NNNNNN>.json          one per checkpoint: the files, folders and links it took
  tmp/                             blobs being written (renamed into blobs/ when complete)
```

A manifest is written to ``tmp/`` and renamed into ``manifests/`` after its blobs, so a manifest
that exists names only blobs that exist; restoring checks each blob's hash as it reads it. The
store's folder must exist: a missing one is a storage root that is not mounted, which must fail
loudly rather than fill a local folder of the same name. Every failure of the store (missing,
read-only, full) is one :class:`CheckpointError` naming what was written where: the caller records
it and the cell goes on. A store has one writer: a cell's checkpoints are taken one at a time (ids
are numbered from the manifests present).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

from autorl.errors import AutorlError

__all__ = [
    "MANIFEST_VERSION",
    "CheckpointError",
    "CheckpointStore",
    "Entry",
    "link_stays_inside",
]

MANIFEST_VERSION = 1
_HASH = re.compile(r"[0-9a-f]{64}")
_MANIFEST = re.compile(r"([0-9]{6})\.json")
EntryKind = Literal["file", "dir", "symlink"]


class CheckpointError(AutorlError):
    """A checkpoint could not be taken or restored: the store is missing, read-only or full, a cap
    was exceeded, or a manifest is malformed. The message says what, where, and which setting."""


@dataclass(frozen=True)
class Entry:
    """One thing a checkpoint took, relative to its root.

    Attributes:
        root: The root's name (``code``, ``output``, ``home``).
        path: ``/``-separated, relative, without ``.`` or ``..``; odd bytes of a name are kept as
            Python's ``surrogateescape`` characters (JSON keeps them as ``\\udcXX`` escapes).
        kind: ``file``, ``dir`` or ``symlink``.
        mode: The permission bits (``0o777`` at most: set-id and sticky bits are never taken).
        size: A file's bytes (0 otherwise).
        sha256: A file's blob; empty otherwise.
        target: A symlink's target (relative, inside its root); empty otherwise.
        key: ``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)`` when it was taken: a file with
            the same key in the next checkpoint is not read again.
    """

    root: str
    path: str
    kind: EntryKind
    mode: int
    size: int = 0
    sha256: str = ""
    target: str = ""
    key: tuple[int, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The manifest's form of the entry."""
        data: dict[str, Any] = {"root": self.root, "path": self.path, "kind": self.kind}
        data["mode"] = self.mode
        if self.kind == "file":
            data |= {"size": self.size, "sha256": self.sha256, "key": list(self.key)}
        if self.kind == "symlink":
            data["target"] = self.target
        return data

    @classmethod
    def from_json(cls, data: Any) -> Entry:
        """Parse one manifest entry; a wrong type or field is a :class:`CheckpointError`."""
        try:
            kind = data["kind"]
            if kind not in ("file", "dir", "symlink"):
                raise ValueError(f"kind {kind!r}")
            entry = cls(
                root=_str(data["root"]),
                path=_str(data["path"]),
                kind=kind,
                mode=_int(data["mode"]) & 0o777,
                size=_int(data.get("size", 0)),
                sha256=_str(data.get("sha256", "")),
                target=_str(data.get("target", "")),
                key=tuple(_int(v) for v in data.get("key", [])),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise CheckpointError(f"malformed manifest entry {data!r:.200}: {error}") from None
        if kind == "file" and not _HASH.fullmatch(entry.sha256):
            raise CheckpointError(f"manifest entry {entry.path!r} has no valid sha256")
        return entry


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError(f"expected a non-negative integer, got {value!r}")
    return value


def link_stays_inside(target: str, depth: int) -> bool:
    """Whether a link at ``depth`` folders below its root, pointing at ``target``, stays inside.

    Only relative targets of the form ``../`` × k then names, with k at most ``depth``, are inside:
    a ``..`` after a name would climb from wherever that name leads (a link elsewhere in the tree),
    so it is refused even where it reads as harmless.

    Examples:
        >>> link_stays_inside("../lib/x.py", 1), link_stays_inside("../../x", 1)
        (True, False)
        >>> link_stays_inside("/etc/passwd", 3), link_stays_inside("a/../b", 3)
        (False, False)
    """
    if not target or target.startswith("/") or "\0" in target:
        return False
    ups, named = 0, False
    for part in target.split("/"):
        if part == "..":
            if named:
                return False
            ups += 1
        elif part not in ("", "."):
            named = True
    return ups <= depth


class TempBlob(NamedTuple):
    """A blob being written in ``tmp/``: its open descriptor and its path."""

    fd: int
    path: Path


class CheckpointStore:
    """One cell's checkpoint folder (see the module docstring for its layout)."""

    def __init__(self, root: Path) -> None:
        """Open the store at ``root``, which must exist; its sub-folders are made if missing.

        Raises:
            CheckpointError: ``root`` is missing, not a folder, or not writable.
        """
        self.root = Path(root)
        if not self.root.is_dir():
            raise CheckpointError(
                f"checkpoint store {self.root} is missing or not a folder (is the storage root "
                "mounted?)"
            )
        self.blobs = self.root / "blobs"
        self.manifests = self.root / "manifests"
        self.tmp = self.root / "tmp"
        for folder in (self.blobs, self.manifests, self.tmp):
            with self.failing(f"creating {folder.name}/"):
                folder.mkdir(exist_ok=True)
            if not os.access(folder, os.W_OK):
                raise CheckpointError(f"checkpoint store {folder} is not writable")

    @contextlib.contextmanager
    def failing(self, what: str) -> Any:
        """Turn an ``OSError`` of the store (``ENOSPC``, ``EROFS``, ``EACCES``, ...) into a
        :class:`CheckpointError` naming ``what`` and the store."""
        try:
            yield
        except OSError as error:
            reason = os.strerror(error.errno) if error.errno else str(error)
            raise CheckpointError(f"checkpoint store {self.root}: {reason} while {what}") from error

    def blob_path(self, sha256: str) -> Path:
        """Where the blob of ``sha256`` is (or would be)."""
        if not _HASH.fullmatch(sha256):
            raise CheckpointError(f"not a sha256: {sha256!r:.80}")
        return self.blobs / sha256[:2] / sha256

    def has_blob(self, sha256: str, size: int) -> bool:
        """Whether the blob is in the store with ``size`` bytes (a short one is written again)."""
        try:
            info = os.lstat(self.blob_path(sha256))
        except OSError:
            return False
        return stat.S_ISREG(info.st_mode) and info.st_size == size

    def new_blob(self) -> TempBlob:
        """A fresh temporary file in ``tmp/`` (descriptor and path) for a blob being written."""
        with self.failing("creating a blob"):
            for attempt in range(100):
                path = self.tmp / f"blob-{os.getpid()}-{os.urandom(6).hex()}-{attempt}"
                try:
                    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                    return TempBlob(os.open(path, flags, 0o600), path)
                except FileExistsError:
                    continue
        raise CheckpointError(f"checkpoint store {self.tmp}: no fresh name for a blob")

    def commit_blob(self, tmp: Path, sha256: str) -> None:
        """Move a complete blob from ``tmp/`` to its place (one that is already there is kept)."""
        dest = self.blob_path(sha256)
        with self.failing(f"storing blob {sha256[:12]}"):
            dest.parent.mkdir(exist_ok=True)
            os.replace(tmp, dest)

    def discard(self, tmp: Path) -> None:
        """Remove a temporary blob (best effort: the store may be the thing that failed)."""
        with contextlib.suppress(OSError):
            tmp.unlink()

    def manifest_ids(self) -> list[str]:
        """The checkpoints in the store, oldest first."""
        try:
            names = os.listdir(self.manifests)
        except OSError as error:
            raise CheckpointError(f"checkpoint store {self.manifests}: {error}") from error
        return sorted(m[1] for name in names if (m := _MANIFEST.fullmatch(name)))

    def next_id(self) -> str:
        """The id the next checkpoint gets."""
        ids = self.manifest_ids()
        return f"{int(ids[-1]) + 1 if ids else 1:06d}"

    def write_manifest(self, checkpoint_id: str, manifest: dict[str, Any]) -> Path:
        """Write ``manifest`` as checkpoint ``checkpoint_id``, durably and atomically."""
        if not _MANIFEST.fullmatch(f"{checkpoint_id}.json"):
            raise CheckpointError(f"bad checkpoint id {checkpoint_id!r}")
        dest = self.manifests / f"{checkpoint_id}.json"
        fd, tmp = self.new_blob()
        try:
            with self.failing(f"writing manifest {checkpoint_id}"):
                data = json.dumps(manifest, ensure_ascii=True, separators=(",", ":")).encode()
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
                os.close(fd)
                fd = -1
                os.replace(tmp, dest)
        finally:
            if fd >= 0:
                os.close(fd)
            self.discard(tmp)
        return dest

    def manifest_path(self, checkpoint_id: str | None = None) -> Path:
        """The manifest file of checkpoint ``checkpoint_id`` (default: the latest).

        Raises:
            CheckpointError: The store has no such checkpoint.
        """
        ids = self.manifest_ids()
        if checkpoint_id is None:
            if not ids:
                raise CheckpointError(f"checkpoint store {self.root} has no checkpoint")
            checkpoint_id = ids[-1]
        if checkpoint_id not in ids:
            raise CheckpointError(f"checkpoint store {self.root} has no checkpoint {checkpoint_id}")
        return self.manifests / f"{checkpoint_id}.json"

    def read_manifest(self, checkpoint_id: str | None = None) -> dict[str, Any]:
        """The manifest of ``checkpoint_id`` (default: the latest), with its entries parsed.

        Raises:
            CheckpointError: No such checkpoint, or a manifest that is not one.
        """
        path = self.manifest_path(checkpoint_id)
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError) as error:
            raise CheckpointError(f"cannot read manifest {path}: {error}") from error
        if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
            raise CheckpointError(f"{path} is not a version {MANIFEST_VERSION} manifest")
        entries = data.get("entries")
        if not isinstance(entries, list):
            raise CheckpointError(f"{path} has no entry list")
        data["entries"] = [Entry.from_json(e) for e in entries]
        return data
