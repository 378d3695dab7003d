"""Submissions and base models that travel between nodes: from the cell's node to the grader's.

The cell side hands the GraderPool a :class:`ModelRef` instead of a bare path. The grader turns it
into a local folder (:meth:`ModelFetcher.local`) before it loads the model:

- **same node** as the folder (or a plain ``str`` path, as before): the path is used as it is;
- **shared storage** (``storage.root`` set): the cell side copied the files under
  ``<root>/submissions/<digest>/`` (base models under ``<root>/models/<digest>/``), every node
  mounts the root, and the grader reads them there after checking their hashes;
- **another node**: the files are streamed through Ray's object store by small tasks pinned to the
  source node (:func:`read_chunk`; :class:`autorl.actors.model_source.RaySource` runs them), a few
  chunks in flight at a time, so a multi-GB model never sits whole in one Python object. They land
  in a cache folder on the grader's node keyed by the files' digest (:class:`DigestCache`): requests
  for the same digest share one download (a file lock), and every file's sha256 is checked against
  the source's :class:`Manifest` before the folder is used.

Submissions are deleted from the grader's cache once their last user is done; base models stay
cached by digest (every submission of a cell is scored on its base). The cell keeps its own copy
of the submission alive until the scorer returns (:meth:`SubmissionService._score` deletes it).

Only a model's top-level files travel: loaders read nothing else, and sub-folders can be large
(trainer checkpoints, the hub's ``.cache/``); the submission checks copy the same set.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from filelock import FileLock

from autorl.errors import AutorlError

logger = logging.getLogger(__name__)

CHUNK_BYTES = 16 * 1024 * 1024
"""Bytes per streamed chunk (one Ray object)."""
_ATTEMPTS = 2  # a failed or corrupted download is retried once before the request fails


class TransferError(AutorlError):
    """A model could not be brought to the grader's node intact (an infrastructure failure)."""


@dataclass(frozen=True)
class FileEntry:
    """One top-level file of a model folder."""

    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """The files of a model folder with their sizes and hashes; ``digest`` names the whole set."""

    files: tuple[FileEntry, ...]

    @property
    def digest(self) -> str:
        """sha256 over every file's name, size and hash: the cache key of the folder's content."""
        payload = json.dumps([[f.name, f.size, f.sha256] for f in self.files]).encode()
        return hashlib.sha256(b"autorl-files-v1\0" + payload).hexdigest()

    @property
    def size(self) -> int:
        """Bytes of all files together."""
        return sum(f.size for f in self.files)


def _model_files(folder: Path) -> list[Path]:
    """Top-level regular files (symlinks followed), in name order."""
    if not folder.is_dir():
        raise TransferError(
            f"model folder {folder} does not exist on this node ({socket.gethostname()})"
        )
    return sorted((p for p in folder.iterdir() if p.is_file()), key=lambda p: p.name)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1024 * 1024):
            digest.update(block)
    return digest.hexdigest()


def manifest_of(folder: Path) -> Manifest:
    """Hash every top-level file of ``folder`` (read once, in 1 MiB blocks).

    Raises:
        TransferError: ``folder`` does not exist here.
    """
    return Manifest(
        tuple(FileEntry(p.name, p.stat().st_size, _sha256(p)) for p in _model_files(folder))
    )


def verify(folder: Path, manifest: Manifest) -> None:
    """Check that ``folder`` holds exactly the manifest's files with the manifest's hashes.

    Raises:
        TransferError: naming the first file that is missing, extra, or has other bytes.
    """
    _compare(folder, manifest_of(folder), manifest)


def _compare(folder: Path, have: Manifest, manifest: Manifest) -> None:
    if have == manifest:
        return
    expected = {f.name: f for f in manifest.files}
    actual = {f.name: f for f in have.files}

    def describe(entry: FileEntry | None) -> str:
        return (
            "no such file" if entry is None else f"{entry.size} bytes, sha256 {entry.sha256[:12]}"
        )

    for name in sorted(expected.keys() | actual.keys()):
        if expected.get(name) != actual.get(name):
            raise TransferError(
                f"{folder}: file {name!r} has {describe(actual.get(name))} where the source has "
                f"{describe(expected.get(name))}: the copy is incomplete or corrupted"
            )


@dataclass(frozen=True)
class ModelRef:
    """What the cell side hands the GraderPool for a submission or a base model.

    Attributes:
        path: The folder on ``node_id`` (or under ``storage.root`` when ``node_id`` is None).
        node_id: The Ray node that holds ``path``; None: shared storage every node mounts.
        weights_hash: The weights digest (the score cache's key; see
            :func:`autorl.grading.weights.weights_hash`).
        keep: True for base models: the grader keeps its copy cached by digest for later requests.
        manifest: The files' hashes; set for shared storage (computed by the cell side while
            publishing). For a ref on another node the grader asks the source node for it.
    """

    path: str
    node_id: str | None
    weights_hash: str
    keep: bool = False
    manifest: Manifest | None = None

    def __str__(self) -> str:
        where = f"node {self.node_id[:12]}" if self.node_id else "shared storage"
        return f"{self.path} ({where})"


def read_manifest(path: str) -> Manifest:
    """The manifest of ``path`` on the node this runs on (a Ray task pinned to the source node)."""
    return manifest_of(Path(path))


def read_chunk(path: str, offset: int, size: int) -> bytes:
    """Bytes ``[offset, offset + size)`` of the file ``path`` on the node this runs on (a pinned Ray
    task).
    """
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read(size)


class ChunkSource(Protocol):
    """Where a remote ref's files are read from (Ray tasks on its node; a local stand-in in unit
    tests).
    """

    def manifest(self, ref: ModelRef) -> Manifest:
        """The manifest of ``ref.path`` on ``ref.node_id``."""
        ...

    def chunks(self, ref: ModelRef, requests: list[tuple[str, int, int]]) -> Iterator[bytes]:
        """The bytes of each ``(file name, offset, size)`` request, in order."""
        ...


class DigestCache:
    """Model folders keyed by content digest, shared by the processes of one node (or of a shared
    root).

    Layout: ``<root>/<key>/`` the files; ``<root>/.meta/<key>.lock`` the key's lock, ``.keep`` its
    keep marker and ``.leases/`` one file per user; ``<root>/.partial/`` folders being filled.
    A folder is deleted when its last lease is released, unless it was ever requested with ``keep``.
    """

    def __init__(self, root: Path) -> None:
        """Use (and create on first use) ``root``."""
        self.root = root

    def folder(self, key: str) -> Path:
        """Where the files of ``key`` live."""
        return self.root / key

    def keys(self) -> list[str]:
        """Digests cached now."""
        if not self.root.is_dir():
            return []
        return sorted(
            p.name for p in self.root.iterdir() if not p.name.startswith(".") and p.is_dir()
        )

    @contextmanager
    def use(
        self, key: str, fill: Callable[[Path], None], *, keep: bool
    ) -> Iterator[tuple[Path, bool]]:
        """The folder of ``key``, filled by ``fill(folder)`` unless present; yields
        ``(folder, filled_now)``.

        Concurrent callers with the same key wait for the one that fills it. A failed ``fill``
        leaves nothing behind and raises to its caller.
        """
        if not key or "/" in key or key.startswith("."):
            raise ValueError(f"bad cache key {key!r}")
        meta = self.root / ".meta"
        meta.mkdir(parents=True, exist_ok=True)
        leases = meta / f"{key}.leases"
        lock = FileLock(str(meta / f"{key}.lock"))
        with lock:
            folder, filled = self._present_or_fill(key, fill)
            if keep:
                (meta / f"{key}.keep").touch()
            leases.mkdir(exist_ok=True)
            lease = leases / f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            lease.touch()
        try:
            yield folder, filled
        finally:
            with lock:
                lease.unlink(missing_ok=True)
                self._prune(leases)
                if not any(leases.iterdir()):
                    leases.rmdir()
                    if not (meta / f"{key}.keep").exists():
                        shutil.rmtree(folder, ignore_errors=True)

    def _present_or_fill(self, key: str, fill: Callable[[Path], None]) -> tuple[Path, bool]:
        folder = self.folder(key)
        if folder.is_dir():
            return folder, False
        partial_root = self.root / ".partial"
        partial_root.mkdir(exist_ok=True)
        for stale in partial_root.glob(f"{key}-*"):  # a crashed fill; we hold the key's lock
            shutil.rmtree(stale, ignore_errors=True)
        partial = partial_root / f"{key}-{uuid.uuid4().hex[:8]}"
        partial.mkdir()
        try:
            fill(partial)
            partial.rename(folder)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        return folder, True

    @staticmethod
    def _prune(leases: Path) -> None:
        """Drop leases of processes on this host that no longer exist (a grader that crashed
        mid-use).
        """
        host = socket.gethostname()
        for lease in leases.iterdir():
            owner, _, rest = lease.name.rpartition("-")[0].rpartition("-")
            if owner != host or not rest.isdigit():
                continue
            try:
                os.kill(int(rest), 0)
            except ProcessLookupError:
                lease.unlink(missing_ok=True)
            except PermissionError:
                pass  # alive, another user's


@dataclass
class TransferStats:
    """What a grader's fetcher did (for tests and operators)."""

    direct: int = 0  # refs used in place: same node, shared storage or a plain path
    downloads: int = 0  # folders streamed from another node
    bytes_downloaded: int = 0
    reused: int = 0  # requests served by a folder already in the cache


@dataclass
class ModelFetcher:
    """The grader side: turns a :class:`ModelRef` into a folder on this node.

    Attributes:
        cache: Where downloads land (``<cache_dir>/transfer`` on the grader's node).
        node_id: This node's Ray id.
        source: How files on other nodes are read (:class:`autorl.actors.model_source.RaySource`).
    """

    cache: DigestCache
    node_id: str
    source: ChunkSource
    stats: TransferStats = field(default_factory=TransferStats)
    _verified: set[str] = field(default_factory=set)

    @contextmanager
    def local(self, ref: ModelRef | str | None) -> Iterator[Path | None]:
        """A folder on this node holding ``ref``'s files, valid inside the ``with`` block.

        Raises:
            TransferError: the files cannot be read or arrive corrupted (after a retry).
        """
        if ref is None or isinstance(ref, str):
            if ref is not None:
                self.stats.direct += 1
            yield Path(ref) if ref is not None else None
            return
        if ref.node_id is None:
            yield self._shared(ref)
            return
        if ref.node_id == self.node_id:
            self.stats.direct += 1
            yield Path(ref.path)
            return
        try:
            manifest = ref.manifest or self.source.manifest(ref)
        except Exception as error:  # noqa: BLE001 - Ray wraps the source node's error
            raise TransferError(f"cannot list {ref} on its node: {error}") from error
        with self.cache.use(
            manifest.digest, lambda dest: self._download(ref, manifest, dest), keep=ref.keep
        ) as (
            folder,
            filled,
        ):
            if filled:
                self.stats.downloads += 1
                self.stats.bytes_downloaded += manifest.size
            else:
                self.stats.reused += 1
            yield folder

    def _shared(self, ref: ModelRef) -> Path:
        """A ref under ``storage.root``: read in place, its hashes checked once per digest."""
        path = Path(ref.path)
        if not path.is_dir():
            raise TransferError(
                f"{path} is not visible on the grader's node: storage.root must be a folder every "
                "node mounts at the same path (or set storage.root=null to stream submissions "
                "through Ray)"
            )
        if ref.manifest is None:
            raise TransferError(f"{ref}: a ref on shared storage needs its manifest")
        if ref.manifest.digest not in self._verified:
            verify(path, ref.manifest)
            if ref.keep:
                self._verified.add(ref.manifest.digest)  # base models are read again and again
        self.stats.direct += 1
        return path

    def _download(self, ref: ModelRef, manifest: Manifest, dest: Path) -> None:
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                self._stream(ref, manifest, dest)
                return
            except Exception as error:  # noqa: BLE001 - Ray's errors too (a read task failed, the node went away)
                if attempt == _ATTEMPTS:
                    if isinstance(error, TransferError):
                        raise
                    raise TransferError(f"reading {ref} from its node failed: {error}") from error
                logger.warning(
                    "download of %s failed (attempt %d): %s; retrying", ref, attempt, error
                )
                for stale in dest.iterdir():
                    stale.unlink()

    def _stream(self, ref: ModelRef, manifest: Manifest, dest: Path) -> None:
        """Write the chunks into ``dest``, hashing them on the way; a file that differs from the
        manifest raises.
        """
        requests = [
            (entry.name, offset, min(CHUNK_BYTES, entry.size - offset))
            for entry in manifest.files
            for offset in range(0, entry.size, CHUNK_BYTES)
        ]
        digests = {}
        for entry in manifest.files:  # names come from the source's listing; never leave dest
            if "/" in entry.name or entry.name in ("", ".", ".."):
                raise TransferError(f"{ref}: bad file name {entry.name!r} in its manifest")
            (dest / entry.name).touch()  # empty files have no chunks
            digests[entry.name] = hashlib.sha256()
        chunks = self.source.chunks(ref, requests)
        for (name, _offset, size), data in zip(requests, chunks, strict=True):
            if len(data) != size:
                raise TransferError(f"{ref}: {name} changed on the source node while it was read")
            digests[name].update(data)
            with open(dest / name, "ab") as out:
                out.write(data)
        # Hashed as received (one pass): the bytes written are the bytes hashed.
        received = Manifest(
            tuple(
                FileEntry(f.name, (dest / f.name).stat().st_size, digests[f.name].hexdigest())
                for f in manifest.files
            )
        )
        _compare(dest, received, manifest)


def _copy_files(source: Path, manifest: Manifest) -> Callable[[Path], None]:
    def fill(dest: Path) -> None:
        for entry in manifest.files:
            shutil.copyfile(source / entry.name, dest / entry.name)

    return fill


class ModelPublisher:
    """The cell side: makes :class:`ModelRef` objects for its base model and its submissions.

    Without a storage root a ref names this node and the folder as it is (the grader streams it
    when it runs elsewhere); with one, the files are copied under the root first.
    """

    def __init__(self, node_id: str, storage_root: str | Path | None) -> None:
        """``node_id``: this node's Ray id; ``storage_root``: ``storage.root`` (None: stream through
        Ray).
        """
        self.node_id = node_id
        self.root = Path(storage_root) if storage_root else None

    def base(self, model_dir: Path, weights_hash: str) -> ModelRef:
        """The cell's base model (kept cached by digest on grader nodes, and under the storage
        root).
        """
        if self.root is None:
            return ModelRef(str(model_dir), self.node_id, weights_hash, keep=True)
        manifest = manifest_of(model_dir)
        with DigestCache(self.root / "models").use(
            manifest.digest, _copy_files(model_dir, manifest), keep=True
        ) as (
            folder,
            _,
        ):
            return ModelRef(str(folder), None, weights_hash, keep=True, manifest=manifest)

    @contextmanager
    def submission(self, model_dir: Path, weights_hash: str) -> Iterator[ModelRef]:
        """A submission's ref, valid until the block ends (then its copy under the storage root
        goes).
        """
        if self.root is None:
            yield ModelRef(str(model_dir), self.node_id, weights_hash)
            return
        manifest = manifest_of(model_dir)
        cache = DigestCache(self.root / "submissions")
        with cache.use(manifest.digest, _copy_files(model_dir, manifest), keep=False) as (
            folder,
            _,
        ):
            yield ModelRef(str(folder), None, weights_hash, manifest=manifest)
