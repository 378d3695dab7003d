"""The Ray side of :mod:`autorl.grading.transfer`: reading a model folder on another node.

A grader on another node than a submission reads its files with small Ray tasks pinned to the
source node (``NodeAffinitySchedulingStrategy``, hard): one task hashes the folder, then one task
per chunk returns its bytes through the object store. A few chunks are in flight at a time, so the
transfer overlaps reading, shipping and writing, and a multi-GB model never sits whole in memory.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from autorl.grading.transfer import Manifest, ModelRef, read_chunk, read_manifest

WINDOW = 4
"""Chunks in flight at once: a download holds at most this many chunks (64 MiB) in the object
store."""

# num_cpus=0: the source node's CPUs are its cell's, and a read must never wait for them.
# Reads are idempotent, so a read whose worker died is simply run again.
_read_manifest = ray.remote(num_cpus=0, max_retries=2)(read_manifest)
_read_chunk = ray.remote(num_cpus=0, max_retries=2)(read_chunk)


def this_node() -> str:
    """The Ray node id of the calling worker (a ModelRef's ``node_id``); ``"no-ray"`` outside Ray.

    Outside Ray (a Grader built in-process, e.g. by a benchmark) it must not touch the runtime
    context: that would auto-connect to whatever cluster this machine last started.
    """
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "no-ray"


class RaySource:
    """Reads a folder on another node with Ray tasks pinned there (a
    :class:`autorl.grading.transfer.ChunkSource`)."""

    @staticmethod
    def _on(ref: ModelRef) -> NodeAffinitySchedulingStrategy:
        if ref.node_id is None:
            raise ValueError(f"{ref} names no node; it lies on shared storage and is read in place")
        # soft=False: only that node has the files; if it is gone, the read fails instead of reading
        # elsewhere.
        return NodeAffinitySchedulingStrategy(ref.node_id, soft=False)

    def manifest(self, ref: ModelRef) -> Manifest:
        """Hash the files on the source node."""
        manifest: Manifest = ray.get(
            _read_manifest.options(scheduling_strategy=self._on(ref)).remote(ref.path)
        )
        return manifest

    def chunks(self, ref: ModelRef, requests: list[tuple[str, int, int]]) -> Iterator[bytes]:
        """The bytes of each ``(file name, offset, size)``, in order, keeping ``WINDOW`` reads
        ahead."""
        read = _read_chunk.options(scheduling_strategy=self._on(ref))
        todo = iter(requests)
        pending: deque[Any] = deque()

        def submit() -> None:
            following = next(todo, None)
            if following is not None:
                name, offset, size = following
                pending.append(read.remote(str(Path(ref.path) / name), offset, size))

        for _ in range(WINDOW):
            submit()
        while pending:
            data: bytes = ray.get(pending.popleft())
            submit()
            yield data
