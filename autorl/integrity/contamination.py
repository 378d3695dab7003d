"""Eval-data contamination: the scan of what an agent wrote for the private eval split's n-grams.

After a cell ends, the grader (which alone holds the private split) scans the agent's workspace,
HOME, log and trace for the eval items' word n-grams, decon style: an eval item counts as *seen*
when one of its distinctive n-grams occurs in a scanned file. Which n-grams are distinctive, and how
text is normalised and tokenised on both sides, is :mod:`autorl.integrity.eval_index`; this module
owns the scan (:func:`scan`), its report (:class:`ContaminationReport`) and the per-cell entry point
(:func:`check_cell`).

The scanner runs as root on files an agent controls, so it trusts nothing there: it walks
directories by file descriptor (``os.scandir`` on an fd, ``openat`` with ``O_NOFOLLOW``), never
follows a symlink (skipped and counted, wherever it points), never opens a FIFO, socket or device
(only ``S_ISREG`` is read, confirmed by ``fstat`` on the open fd), stays on each root's file system,
and caps the bytes read per file and per cell, the directory entries visited and the depth. A cap
that cut the scan sets ``truncated``. Binary files are not skipped: their printable ASCII runs are
scanned; the tensor data of a safetensors file is not read (only its JSON header). Evidence names
eval n-grams and relative file names, never other content of the agent's files.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autorl.integrity.eval_index import (
    SNIFF_BYTES,
    EvalIndex,
    eval_index,
    ngrams,
    text_of,
    token_windows,
)
from autorl.schema import ContaminationConfig
from autorl.workspace.safe_fs import OPEN_DIR as _OPEN_DIR
from autorl.workspace.safe_fs import OPEN_FILE as _OPEN_FILE
from autorl.workspace.safe_fs import open_failure as _open_failure
from autorl.workspace.safe_fs import printable as _printable

__all__ = [
    "ContaminationReport",
    "check_cell",
    "scan",
]

MAX_EVIDENCE = 10
MAX_DEPTH = 64  # directory levels below a root; deeper folders are skipped and counted
_MAX_SAFETENSORS_HEADER = 100 << 20


@dataclass(frozen=True)
class ContaminationReport:
    """One cell's contamination figures.

    Attributes:
        overlap: ``items_hit / items_total`` (0.0 when no item is distinctive).
        items_hit: Eval items with a distinctive n-gram in the agent's files.
        items_total: Eval items with at least one distinctive n-gram.
        items_excluded: Eval items with no distinctive n-gram (see :class:`EvalIndex`), not counted.
        flagged: ``overlap >= threshold`` and ``items_hit >= min_items``.
        ngram: Words per n-gram.
        files_scanned: Regular files read (fully or up to the per-file cap).
        bytes_scanned: Bytes read from them.
        skipped: Reason -> count of what was not read, or read only in part (``symlink``,
            ``special``: FIFO/socket/device, ``duplicate``: same inode or content as a file already
            scanned, ``over_cap``: cut at ``max_file_bytes``, ``tensor_data``: safetensors data
            after its header, ``too_deep``, ``other_fs``, ``changed``: the file changed while read,
            ``unreadable``, ``missing``).
        binary_files: Files with a NUL byte in their first block, scanned for printable text runs.
        truncated: ``max_total_bytes`` or ``max_files`` stopped the scan before everything was read.
        evidence: Up to :data:`MAX_EVIDENCE` hits: ``{root, file, item, label, ngram}`` (``file``
            relative to ``root``; ``item`` indexes the counted items, ``label`` is its place in the
            split).
        elapsed_s: Wall time of the scan (the eval index is cached per process and not included).
    """

    overlap: float
    items_hit: int
    items_total: int
    items_excluded: int
    flagged: bool
    ngram: int
    files_scanned: int
    bytes_scanned: int
    skipped: dict[str, int]
    binary_files: int
    truncated: bool
    evidence: list[dict[str, Any]] = field(default_factory=list)
    elapsed_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``integrity_json["contamination"]``)."""
        return {
            "overlap": self.overlap,
            "items_hit": self.items_hit,
            "items_total": self.items_total,
            "items_excluded": self.items_excluded,
            "flagged": self.flagged,
            "ngram": self.ngram,
            "files_scanned": self.files_scanned,
            "bytes_scanned": self.bytes_scanned,
            "skipped": dict(self.skipped),
            "binary_files": self.binary_files,
            "truncated": self.truncated,
            "evidence": [dict(e) for e in self.evidence],
            "elapsed_s": round(self.elapsed_s, 3),
        }


class _Scanner:
    """One scan's state: the caps, what was read or skipped, and the hits."""

    def __init__(self, index: EvalIndex, cfg: ContaminationConfig) -> None:
        self.index = index
        self.cfg = cfg
        self.files = 0
        self.bytes = 0
        self.entries = 0
        self.binary = 0
        self.truncated = False
        self.skipped: Counter[str] = Counter()
        self.hits: set[int] = set()
        self.evidence: list[dict[str, Any]] = []
        self.inodes: set[tuple[int, int]] = set()
        self.digests: set[bytes] = set()
        self.root = ""

    def scan_root(self, root: Path) -> None:
        """Scan one root: a folder (walked) or a file; a symlink root is skipped like any
        symlink.
        """
        self.root = str(root)
        try:
            fd = os.open(root, _OPEN_FILE)
        except OSError as error:
            self.skipped[_open_failure(error)] += 1
            return
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                self._walk(fd, "", 0, st.st_dev)
            elif stat.S_ISREG(st.st_mode):
                self._scan_file(fd, st, root.name)
            else:
                self.skipped["special"] += 1
        finally:
            os.close(fd)

    def _walk(self, dir_fd: int, rel: str, depth: int, device: int) -> None:
        """Visit one open folder's entries (each counts towards ``max_files``) in name order."""
        if depth > MAX_DEPTH:
            self.skipped["too_deep"] += 1
            return
        entries: list[os.DirEntry[str]] = []
        with os.scandir(
            dir_fd
        ) as listing:  # an fd: entries are names, stat calls use fstatat on it
            for entry in listing:
                if self.entries >= self.cfg.max_files:
                    self.truncated = True
                    break
                self.entries += 1
                entries.append(entry)
        for entry in sorted(entries, key=lambda e: e.name):
            if self.truncated:
                return
            path = f"{rel}{entry.name}"
            try:
                if entry.is_symlink():
                    self.skipped["symlink"] += 1
                elif entry.is_dir(follow_symlinks=False):
                    self._walk_child(dir_fd, entry.name, path, depth, device)
                elif entry.is_file(follow_symlinks=False):
                    self._open_and_scan(dir_fd, entry.name, path)
                else:  # FIFO, socket, device: never opened
                    self.skipped["special"] += 1
            except OSError as error:  # removed or changed under the scan
                self.skipped[_open_failure(error)] += 1

    def _walk_child(self, dir_fd: int, name: str, path: str, depth: int, device: int) -> None:
        fd = os.open(
            name, _OPEN_DIR, dir_fd=dir_fd
        )  # O_NOFOLLOW: a folder swapped for a link fails here
        try:
            st = os.fstat(fd)
            if st.st_dev != device:
                self.skipped["other_fs"] += 1
            elif stat.S_ISDIR(st.st_mode):
                self._walk(fd, path + "/", depth + 1, device)
        finally:
            os.close(fd)

    def _open_and_scan(self, dir_fd: int, name: str, path: str) -> None:
        fd = os.open(
            name, _OPEN_FILE, dir_fd=dir_fd
        )  # O_NONBLOCK: a FIFO swapped in cannot block the open
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                self._scan_file(fd, st, path)
            else:
                self.skipped["special"] += 1
        finally:
            os.close(fd)

    def _read(self, fd: int, limit: int) -> bytes:
        """Up to ``limit`` bytes from ``fd``, whatever the file's size says (it may change
        meanwhile).
        """
        parts: list[bytes] = []
        got = 0
        while got < limit:
            part = os.read(fd, min(limit - got, 1 << 20))
            if not part:
                break
            parts.append(part)
            got += len(part)
        self.bytes += got
        return b"".join(parts)

    def _scan_file(self, fd: int, st: os.stat_result, path: str) -> None:
        """Read one open regular file within the caps (a safetensors file: its header only) and
        match it.
        """
        if (st.st_dev, st.st_ino) in self.inodes:
            self.skipped["duplicate"] += 1
            return
        self.inodes.add((st.st_dev, st.st_ino))
        limit = min(self.cfg.max_file_bytes, self.cfg.max_total_bytes - self.bytes)
        if limit <= 0:
            self.truncated = True
            return
        self.files += 1
        data = self._read(fd, min(limit, SNIFF_BYTES))
        header = _safetensors_header(data, st.st_size)
        if header is not None:
            data = (data + self._read(fd, min(limit, 8 + header) - len(data)))[8 : 8 + header]
            self.skipped["tensor_data"] += 1
        elif len(data) == min(limit, SNIFF_BYTES):
            data += self._read(fd, limit - len(data))
        if header is None and len(data) == limit and os.read(fd, 1):
            if limit < self.cfg.max_file_bytes:
                self.truncated = True
            else:
                self.skipped["over_cap"] += 1
        after = os.fstat(fd)
        if (after.st_size, after.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
            # What was read is scanned; the caps bound the read either way.
            self.skipped["changed"] += 1
        digest = hashlib.blake2b(data, digest_size=16).digest()
        if data and digest in self.digests:
            self.skipped["duplicate"] += 1
            return
        self.digests.add(digest)
        if header is None and b"\0" in data[:SNIFF_BYTES]:
            self.binary += 1
        self._match(
            text_of(data) if header is None else data.decode("utf-8", errors="replace"), path
        )

    def _match(self, text: str, path: str) -> None:
        """Record the eval items whose distinctive n-grams occur in ``text`` (from ``path``)."""
        index = self.index
        if not index.labels:
            return
        for toks in token_windows(text, index.longest() - 1):
            starts = index.prefixes.keys() & ngrams(toks, index.shortest)
            for k in sorted(set().union(*(index.prefixes[p] for p in starts))):
                table = index.grams[k]
                # The prefix pass already found the shortest n-grams; longer ones need their own
                # pass.
                found = (
                    starts & table.keys() if k == index.shortest else table.keys() & ngrams(toks, k)
                )
                for gram in found:
                    item = table[gram]
                    if item in self.hits:
                        continue
                    self.hits.add(item)
                    if len(self.evidence) < MAX_EVIDENCE:
                        self.evidence.append(
                            {
                                "root": self.root,
                                "file": _printable(path),
                                "item": item,
                                "label": self.index.labels[item],
                                "ngram": " ".join(gram),
                            }
                        )


def _safetensors_header(first: bytes, size: int) -> int | None:
    """The JSON header length of a safetensors file (8-byte little-endian length, then ``{``), else
    None.
    """
    if len(first) < 9 or first[8:9] != b"{":
        return None
    length = int.from_bytes(first[:8], "little")
    return length if 2 <= length <= min(size - 8, _MAX_SAFETENSORS_HEADER) else None


def scan(roots: Iterable[Path], index: EvalIndex, cfg: ContaminationConfig) -> ContaminationReport:
    """Look for ``index``'s n-grams in every regular file under ``roots`` (files or folders), within
    the caps.
    """
    started = time.monotonic()
    scanner = _Scanner(index, cfg)
    for root in roots:
        if scanner.truncated:
            break
        scanner.scan_root(Path(root))
    total = len(index.labels)
    hit = len(scanner.hits)
    overlap = hit / total if total else 0.0
    return ContaminationReport(
        overlap=overlap,
        items_hit=hit,
        items_total=total,
        items_excluded=index.excluded,
        flagged=bool(total) and overlap >= cfg.threshold and hit >= cfg.min_items,
        ngram=index.ngram,
        files_scanned=scanner.files,
        bytes_scanned=scanner.bytes,
        skipped=dict(sorted(scanner.skipped.items())),
        binary_files=scanner.binary,
        truncated=scanner.truncated,
        evidence=scanner.evidence,
        elapsed_s=time.monotonic() - started,
    )


_INDEX_LOCK = (
    threading.Lock()
)  # one build of an index at a time: concurrent cells share the cached one


def check_cell(
    roots: list[Path],
    private_dir: Path,
    public_dir: Path,
    cfg: ContaminationConfig,
    *,
    also_public: Sequence[Path] = (),
) -> ContaminationReport:
    """The contamination check of one finished cell (``cfg.enabled`` is the caller's to check).

    Args:
        roots: What the agent wrote: its workspace (``code/``, ``output/``, ...), HOME, log and
            trace.
        private_dir: The task's private eval split (``build_task_data(...).private_dir``).
        public_dir: The task's public training split; n-grams found there never count.
        cfg: ``integrity.contamination``.
        also_public: Other files or folders every agent of the task is given, whose n-grams never
            count either: the task's ``description.md`` and agent code (``tasks/<id>/agent/``),
            whose examples may match an eval item (webshop's sample instruction, ALFWorld's few-shot
            games).

    Raises:
        ValueError: A config value out of range, or no private split at ``private_dir``.
    """
    _validate(cfg)
    with _INDEX_LOCK:
        public = (Path(public_dir).resolve(), *(Path(p).resolve() for p in also_public))
        index = eval_index(Path(private_dir).resolve(), public, cfg.ngram)
    return scan(roots, index, cfg)


def _validate(cfg: ContaminationConfig) -> None:
    problems = [
        f"{name} must be {rule}, got {value!r}"
        for name, value, ok, rule in [
            ("ngram", cfg.ngram, cfg.ngram >= 1, "at least 1"),
            ("threshold", cfg.threshold, 0.0 <= cfg.threshold <= 1.0, "between 0 and 1"),
            ("min_items", cfg.min_items, cfg.min_items >= 0, "0 or more"),
            ("max_file_bytes", cfg.max_file_bytes, cfg.max_file_bytes > 0, "positive"),
            ("max_total_bytes", cfg.max_total_bytes, cfg.max_total_bytes > 0, "positive"),
            ("max_files", cfg.max_files, cfg.max_files > 0, "positive"),
        ]
        if not ok
    ]
    if problems:
        raise ValueError("integrity.contamination: " + "; ".join(problems) + " (conf/config.yaml)")
