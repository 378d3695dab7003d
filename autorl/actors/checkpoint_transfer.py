"""A cell's checkpoint, sent through Ray from the node that holds it to another node's store.

Without ``storage.root`` a checkpoint taken on a cell's node would die with that node, so the sweep
driver's node (the "home node") pulls each one into its own store as it is taken, and the node a
cell resumes on pulls the checkpoint it restores (:mod:`autorl.workspace.checkpointing`, which
takes these functions as :data:`RAY_TRANSPORT`).
:func:`pull_checkpoint` runs on the destination node, in the pattern of
:mod:`autorl.actors.model_source`:

- one task pinned hard to the source node (``NodeAffinitySchedulingStrategy(soft=False)``: only that
  node has the files; a dead node fails the read instead of reading elsewhere) returns the
  manifest's bytes, which the destination parses and checks itself;
- only the blobs the destination store lacks are fetched, each in chunks of
  :data:`~autorl.grading.transfer.CHUNK_BYTES` by tasks pinned to the source node, :data:`WINDOW`
  chunks in flight, so a multi-GB model never sits whole in one object;
- each blob is written to the store's ``tmp/``, its sha256 checked, then committed; the manifest is
  written last, so a pull that fails part-way leaves blobs but never a checkpoint.

The manifest names paths the agent chose. Its names and sizes are used for nothing but the store's
own checks: a blob is read by its hash (validated, then mapped to a path by the store), the size
only plans the reads, and a blob whose bytes or hash differ from its entry is refused. Every failure
(the source node gone, a blob corrupt, the destination full, a deadline passed) is one
:class:`CheckpointError` that names it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from autorl.grading.transfer import CHUNK_BYTES
from autorl.workspace.checkpoint_store import (
    MANIFEST_VERSION,
    CheckpointError,
    CheckpointStore,
    Entry,
)
from autorl.workspace.checkpointing import CheckpointTransport

__all__ = [
    "PUSH_TIMEOUT_S",
    "RAY_TRANSPORT",
    "WINDOW",
    "PullStats",
    "parse_manifest",
    "pull_checkpoint",
    "push_checkpoint",
    "this_node",
]

WINDOW = 4
"""Chunks in flight at once: a pull holds at most this many chunks (64 MiB) in the object store."""


@dataclass(frozen=True)
class PullStats:
    """What one pull did.

    Attributes:
        checkpoint_id: The checkpoint pulled.
        files: Blobs fetched (the rest were in the destination store already).
        bytes: Bytes fetched.
        seconds: The pull's wall time.
        read_on: The node ids the read tasks reported running on (the source node's, or none when
            there was nothing to read).
    """

    checkpoint_id: str
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    read_on: frozenset[str] = frozenset()


def this_node() -> str | None:
    """The Ray node id of the calling worker; None outside Ray (nothing can be sent then)."""
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


def _read_manifest(folder: str, checkpoint_id: str | None) -> tuple[str, str, bytes]:
    """``(node id, checkpoint id, manifest bytes)`` of the store at ``folder`` on this node."""
    store = CheckpointStore(Path(folder))
    path = store.manifest_path(checkpoint_id)
    checkpoint_id = path.stem
    with store.failing(f"reading manifest {checkpoint_id}"):
        data = path.read_bytes()
    return ray.get_runtime_context().get_node_id(), checkpoint_id, data


def _read_blob_chunk(folder: str, sha256: str, offset: int, size: int) -> tuple[str, bytes]:
    """``(node id, bytes [offset, offset + size))`` of a blob of the store at ``folder`` on this
    node; the blob's path comes from its (validated) hash, and no link is followed."""
    store = CheckpointStore(Path(folder))
    path = store.blob_path(sha256)
    with store.failing(f"reading blob {sha256[:12]}"):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            data = os.pread(fd, size, offset)
        finally:
            os.close(fd)
    return ray.get_runtime_context().get_node_id(), data


# num_cpus=0: the source node's CPUs are its cell's, and a read must never wait for them.
# Reads are idempotent, so a read whose worker died is simply run again.
_manifest_task = ray.remote(num_cpus=0, max_retries=2)(_read_manifest)
_chunk_task = ray.remote(num_cpus=0, max_retries=2)(_read_blob_chunk)


def parse_manifest(data: bytes, where: str) -> tuple[dict[str, Any], list[Entry]]:
    """The manifest's JSON object and its parsed entries, checked as
    :meth:`CheckpointStore.read_manifest` checks a stored one.

    Raises:
        CheckpointError: It is not a version :data:`MANIFEST_VERSION` manifest.
    """
    try:
        manifest = json.loads(data)
    except ValueError as error:
        raise CheckpointError(f"the manifest from {where} is not JSON: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("version") != MANIFEST_VERSION:
        raise CheckpointError(f"the manifest from {where} is not a version {MANIFEST_VERSION} one")
    entries = manifest.get("entries")
    if not isinstance(entries, list):
        raise CheckpointError(f"the manifest from {where} has no entry list")
    return manifest, [Entry.from_json(e) for e in entries]


class _Deadline:
    """The time left to a pull; ``None``: no limit."""

    def __init__(self, timeout_s: float | None) -> None:
        self.end = None if timeout_s is None else time.monotonic() + timeout_s

    def get(self, ref: Any, what: str) -> Any:
        """``ray.get(ref)`` within the time left."""
        left = None if self.end is None else max(0.0, self.end - time.monotonic())
        try:
            return ray.get(ref, timeout=left)
        except ray.exceptions.GetTimeoutError:
            raise CheckpointError(f"{what}: no answer within the pull's time limit") from None


def _node_state(node_id: str) -> str:
    """How the cluster sees ``node_id`` (said in an error: a dead source is the usual cause)."""
    with contextlib.suppress(Exception):  # the error being explained matters more than this
        for node in ray.nodes():
            if node.get("NodeID") == node_id:
                return "alive" if node.get("Alive") else "dead (removed from the cluster)"
        return "not in the cluster"
    return "unknown"


def pull_checkpoint(
    source_node: str,
    source_folder: str,
    dest_folder: Path,
    checkpoint_id: str | None = None,
    *,
    timeout_s: float | None = None,
) -> PullStats:
    """Bring checkpoint ``checkpoint_id`` (default: the latest) of the store at ``source_folder``
    on ``source_node`` into the store at ``dest_folder`` on this node (made if missing).

    Args:
        source_node: The Ray node id that holds the source store.
        source_folder: The source store's folder on that node.
        dest_folder: The destination store's folder on this node.
        checkpoint_id: Which checkpoint.
        timeout_s: The longest the pull may take; None: no limit.

    Returns:
        What was fetched.

    Raises:
        CheckpointError: The source node is gone, the checkpoint or a blob is missing or corrupt,
            the destination cannot be written, or the time ran out; nothing is a checkpoint in
            the destination then.
    """
    started = time.monotonic()
    here = this_node()
    if here is None:
        raise CheckpointError("a checkpoint is pulled through Ray, and Ray is not initialized here")
    if here == source_node and Path(source_folder).resolve() == Path(dest_folder).resolve():
        return PullStats(checkpoint_id or "")
    try:
        Path(dest_folder).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CheckpointError(f"cannot make the checkpoint store {dest_folder}: {error}") from error
    dest = CheckpointStore(Path(dest_folder))
    where = f"node {source_node[:12]} ({source_folder})"
    pinned = NodeAffinitySchedulingStrategy(source_node, soft=False)
    deadline = _Deadline(timeout_s)
    try:
        node, checkpoint_id, data = deadline.get(
            _manifest_task.options(scheduling_strategy=pinned).remote(source_folder, checkpoint_id),
            f"reading the manifest on {where}",
        )
    except ray.exceptions.RayError as error:
        raise _source_failed(f"reading the manifest of checkpoint {checkpoint_id or '(latest)'}",
                             where, source_node, error) from error  # fmt: skip
    assert checkpoint_id is not None  # the source names the one it read
    manifest, entries = parse_manifest(data, where)
    if manifest.get("id") != checkpoint_id:
        raise CheckpointError(
            f"manifest {checkpoint_id} from {where} says it is checkpoint {manifest.get('id')!r}"
        )
    wanted: dict[str, int] = {}
    for entry in entries:
        if entry.kind == "file" and not dest.has_blob(entry.sha256, entry.size):
            wanted.setdefault(entry.sha256, entry.size)
    read_on = {node}
    fetched = 0
    try:
        fetched = _fetch_blobs(dest, wanted, source_folder, pinned, deadline, read_on)
    except ray.exceptions.RayError as error:
        raise _source_failed(f"reading the blobs of checkpoint {checkpoint_id}", where,
                             source_node, error) from error  # fmt: skip
    dest.write_manifest(checkpoint_id, manifest)
    return PullStats(
        checkpoint_id=checkpoint_id,
        files=len(wanted),
        bytes=fetched,
        seconds=round(time.monotonic() - started, 4),
        read_on=frozenset(read_on),
    )


def _source_failed(what: str, where: str, node_id: str, error: Exception) -> CheckpointError:
    cause = error.cause if isinstance(error, ray.exceptions.RayTaskError) else None
    if isinstance(cause, CheckpointError):
        return CheckpointError(f"{what} on {where}: {cause}")
    return CheckpointError(
        f"{what} on {where} failed; the source node is {_node_state(node_id)}: "
        f"{type(error).__name__}: {str(error)[:500]}"
    )


def _requests(wanted: dict[str, int]) -> Iterator[tuple[str, int, int]]:
    """``(sha256, offset, size)`` of every chunk, blob after blob (an empty blob is one empty
    chunk, so that it is still written and checked)."""
    for sha256, size in wanted.items():
        yield sha256, 0, min(CHUNK_BYTES, size)
        for offset in range(CHUNK_BYTES, size, CHUNK_BYTES):
            yield sha256, offset, min(CHUNK_BYTES, size - offset)


def _fetch_blobs(
    dest: CheckpointStore,
    wanted: dict[str, int],
    source_folder: str,
    pinned: NodeAffinitySchedulingStrategy,
    deadline: _Deadline,
    read_on: set[str],
) -> int:
    """Fetch, check and commit the ``wanted`` blobs (hash -> size); the bytes fetched."""
    read = _chunk_task.options(scheduling_strategy=pinned)
    todo = _requests(wanted)
    pending: deque[tuple[tuple[str, int, int], Any]] = deque()

    def submit() -> None:
        request = next(todo, None)
        if request is not None:
            pending.append((request, read.remote(source_folder, *request)))

    fetched = 0
    blob: tuple[str, int, Any, Path] | None = None  # hash, descriptor, digest, temporary path
    try:
        for _ in range(WINDOW):
            submit()
        while pending:
            (sha256, offset, size), ref = pending.popleft()
            node, data = deadline.get(ref, f"reading blob {sha256[:12]}")
            read_on.add(node)
            submit()
            if offset == 0:
                fd, tmp = dest.new_blob()
                blob = (sha256, fd, hashlib.sha256(), tmp)
            assert blob is not None and blob[0] == sha256  # chunks arrive in order
            if len(data) != size:
                raise CheckpointError(
                    f"blob {sha256[:12]} on the source is shorter than its manifest entry says "
                    "(corrupt or truncated): refused"
                )
            with dest.failing(f"writing blob {sha256[:12]}"):
                view = memoryview(data)
                while view:
                    view = view[os.write(blob[1], view) :]
            blob[2].update(data)
            fetched += len(data)
            if offset + size >= wanted[sha256]:
                done, blob = blob, None
                _commit(dest, done)
    finally:
        for _, ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        if blob is not None:
            with contextlib.suppress(OSError):
                os.close(blob[1])
            dest.discard(blob[3])
    return fetched


def _commit(dest: CheckpointStore, blob: tuple[str, int, Any, Path]) -> None:
    """Check a complete blob's hash, make it durable and move it into place (else discard it)."""
    sha256, fd, digest, tmp = blob
    try:
        try:
            if digest.hexdigest() != sha256:
                raise CheckpointError(
                    f"blob {sha256[:12]} arrived with sha256 {digest.hexdigest()[:12]} (corrupt "
                    "on the source): refused"
                )
            with dest.failing(f"writing blob {sha256[:12]}"):
                os.fsync(fd)
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
        dest.commit_blob(tmp, sha256)
    except BaseException:
        dest.discard(tmp)
        raise


PUSH_TIMEOUT_S = 900.0
"""The longest one checkpoint's push to the home node may take (a large output folder over a slow
network takes minutes); past it the checkpoint is recorded as failed, so a hung home node never
stalls the cell's checkpoints for good."""


def _pull_here(
    source_node: str, source_folder: str, dest_folder: str, checkpoint_id: str, timeout_s: float
) -> PullStats:
    """:func:`pull_checkpoint` as a task on the destination node (arguments by position)."""
    return pull_checkpoint(source_node, source_folder, Path(dest_folder), checkpoint_id,
                           timeout_s=timeout_s)  # fmt: skip


# A pull is not retried by Ray: the next checkpoint's push fetches whatever this one left behind.
_pull_task = ray.remote(num_cpus=0, max_retries=0)(_pull_here)


def push_checkpoint(
    home_node: str,
    source_folder: Path,
    home_folder: Path,
    checkpoint_id: str,
    timeout_s: float = PUSH_TIMEOUT_S,
) -> PullStats:
    """Have ``home_node`` pull checkpoint ``checkpoint_id`` of the store at ``source_folder`` on
    this node into its store at ``home_folder``, and wait for it (at most ``timeout_s``).

    Raises:
        CheckpointError: The pull failed (naming why) or did not end in time.
    """
    here = this_node()
    if here is None:
        raise CheckpointError("a checkpoint is sent through Ray, and Ray is not initialized here")
    where = f"the home node {home_node[:12]} ({home_folder})"
    task = _pull_task.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(home_node, soft=False)
    )
    ref = task.remote(here, str(source_folder), str(home_folder), checkpoint_id, timeout_s)
    try:
        # The pull keeps to timeout_s itself; the margin covers starting its worker.
        stats: PullStats = ray.get(ref, timeout=timeout_s + 30.0)
    except ray.exceptions.GetTimeoutError:
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=True)
        raise CheckpointError(
            f"sending checkpoint {checkpoint_id} to {where}: no answer within {timeout_s:.0f} s"
        ) from None
    except ray.exceptions.RayError as error:
        cause = error.cause if isinstance(error, ray.exceptions.RayTaskError) else None
        if isinstance(cause, CheckpointError):
            raise CheckpointError(
                f"sending checkpoint {checkpoint_id} to {where}: {cause}"
            ) from error
        raise CheckpointError(
            f"sending checkpoint {checkpoint_id} to {where} failed; that node is "
            f"{_node_state(home_node)}: {type(error).__name__}: {str(error)[:500]}"
        ) from error
    return stats


def _pull_for_restore(
    source_node: str, source_folder: str, dest: Path, checkpoint_id: str
) -> object:
    return pull_checkpoint(
        source_node, source_folder, dest, checkpoint_id, timeout_s=PUSH_TIMEOUT_S
    )


RAY_TRANSPORT = CheckpointTransport(this_node, push_checkpoint, _pull_for_restore)
"""Checkpoints through Ray: what the Workspace actor hands :mod:`autorl.workspace.checkpointing`."""
