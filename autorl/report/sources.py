"""Everything the report reads, and only from the sweep folder.

``<sweep_dir>/records.sqlite`` (cells and their attempts, submissions, code revisions, sweep-level
stats) plus, per cell,
``cells/<cell_id>/workspace/run_meta.json``, ``agent.log``, ``code_history.git`` and the submitted
model folders under ``workspace/``. A cell folder may be missing (a cell that ran on another
node); the report then works from the records alone and says so.
"""

from __future__ import annotations

import json
import logging
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG
from typing import Any

from autorl.errors import AutorlError
from autorl.records.results import allows_substitution, feedback_split, summarize_submissions
from autorl.records.store import RecordStore
from autorl.records.types import CellRecord, CodeRevision, SubmissionRecord
from autorl.workspace.run_meta import RECORD_NAME

logger = logging.getLogger(__name__)
_TEXT_SUFFIXES = (
    ".py",
    ".json",
    ".yaml",
    ".yml",
    ".toml",
    ".sh",
    ".cfg",
    ".ini",
    ".txt",
    ".md",
    ".jsonl",
)
_MAX_FILE_BYTES = 256_000
_GIT_TIMEOUT_S = 30
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


class ReportError(AutorlError):
    """The report cannot be built from what the sweep folder holds."""


@dataclass
class CellSources:
    """One cell's records and files.

    Attributes:
        cell: The cell record.
        submissions: Its submissions in order.
        revisions: Its code revisions, oldest first.
        config: The frozen cell config (``cells.config_json``).
        cell_dir: ``<sweep_dir>/cells/<cell_id>`` (may not exist).
        run_meta: Parsed ``workspace/run_meta.json``, or None.
        agent_log: The agent's stdout/stderr, or "".
        notes: What the report could not read for this cell.
        calls: ``(started_at, tokens in + out)`` per driver call the gateway recorded.
        attempts: Every attempt of the cell (:func:`attempt_rows`); submissions, revisions and
            calls above are the final attempt's, the only one that counts (docs/design.md#commands).
    """

    cell: CellRecord
    submissions: list[SubmissionRecord]
    revisions: list[CodeRevision]
    config: dict[str, Any]
    cell_dir: Path
    run_meta: dict[str, Any] | None
    agent_log: str
    notes: list[str] = field(default_factory=list)
    calls: list[tuple[float, int]] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def mode(self) -> str:
        """The agent's operating mode (``agent.mode`` of the cell config), ``free`` when unset."""
        agent = self.config.get("agent")
        mode = agent.get("mode") if isinstance(agent, dict) else None
        return str(mode) if mode else "free"

    @property
    def repo(self) -> Path:
        """The cell's code-revision git repository."""
        return self.cell_dir / "code_history.git"


def open_store(sweep_dir: Path) -> RecordStore:
    """Open the sweep's record store for reading.

    Raises:
        ReportError: when ``sweep_dir`` is not a folder or holds no ``records.sqlite``.
    """
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ReportError(
            f"{sweep_dir} is not a folder; pass a sweep folder such as outputs/default"
        )
    db = sweep_dir / "records.sqlite"
    if not db.is_file():
        found = sorted(p.parent.name for p in sweep_dir.glob("*/records.sqlite"))
        hint = f" Sweep folders inside it: {', '.join(found)}." if found else ""
        raise ReportError(
            f"{sweep_dir} has no records.sqlite, so it is not a sweep folder "
            f"(a sweep writes <out_dir>/<sweep_id>/records.sqlite).{hint}"
        )
    return RecordStore(db, read_only=True)


def _read_text(path: Path, limit: int | None = None) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    if limit is not None and len(data) > limit:
        data = data[-limit:]
    return data.decode("utf-8", errors="replace")


def load_cells(sweep_dir: Path, store: RecordStore) -> list[CellSources]:
    """Every cell of every sweep in the store, with its files.

    Args:
        sweep_dir: The sweep folder.
        store: Its open record store.

    Returns:
        One :class:`CellSources` per cell, in the store's order (task, agent, driver, model, seed).
    """
    out = []
    for cell in store.list_cells():
        cell_dir = Path(sweep_dir) / "cells" / cell.cell_id
        meta, notes = _run_meta(cell_dir, Path(sweep_dir))
        try:
            config = json.loads(cell.config_json)
        except ValueError:
            config = {}
        out.append(
            CellSources(
                cell,
                store.list_submissions(cell.cell_id),
                store.list_code_revisions(cell.cell_id),
                config,
                cell_dir,
                meta if isinstance(meta, dict) else None,
                _read_text(cell_dir / "agent.log", limit=4_000_000),
                notes,
                _driver_calls(store, cell.cell_id),
                attempt_rows(store, cell),
            )
        )
    return out


def attempt_rows(store: RecordStore, cell: CellRecord) -> list[dict[str, Any]]:
    """One row per attempt of the cell, first first: how it ended and what it submitted.

    Each row: ``attempt``, ``status`` (an earlier attempt that never ended says ``interrupted``),
    ``error``, ``node_id``, ``started_at``, ``finished_at``, ``submissions``, ``valid_submissions``,
    ``best_score`` (its best by the rule of docs/design.md#commands, on the feedback split),
    ``tokens``, ``final`` (True for the attempt that counts), ``node_resumes`` and ``lost_s`` (its
    resumes from checkpoints after node losses, and the wall time they lost). A store from before
    attempts were kept has one row, from the cell's own fields.
    """
    final = max(cell.attempts, 1)
    stored = {a.attempt: a for a in store.list_attempts(cell.cell_id)}
    if not stored:
        return [
            _attempt_row(
                store,
                cell,
                final,
                cell.status,
                cell.error,
                None,
                cell.started_at,
                cell.finished_at,
                final,
            )
        ]
    rows = []
    for number, a in sorted(stored.items()):
        # The final attempt's status is the cell's (the scheduler may still be retrying an older
        # one).
        status = cell.status if number == final else a.status
        rows.append(
            _attempt_row(
                store, cell, number, status, a.error, a.node_id, a.started_at, a.finished_at, final
            )
        )
    return rows


def _attempt_row(
    store: RecordStore,
    cell: CellRecord,
    number: int,
    status: str,
    error: str | None,
    node_id: str | None,
    started_at: float | None,
    finished_at: float | None,
    final: int,
) -> dict[str, Any]:
    # A store older than version 6 has no attempt column: there the number is ignored (one attempt).
    subs = store.list_submissions(cell.cell_id, number)
    summary = summarize_submissions(
        subs, cell.baseline, allow_flagged=allows_substitution(cell), feedback=feedback_split(cell)
    )
    usage = store.driver_usage(cell.cell_id, number)
    resumes = store.list_resumes(cell.cell_id, number)
    return {
        "attempt": number,
        "status": status,
        "error": error,
        "node_id": node_id,
        "started_at": started_at,
        "finished_at": finished_at,
        "submissions": summary["submissions"],
        "valid_submissions": summary["valid_submissions"],
        "best_score": summary["best_score"],
        "tokens": usage["tokens_in"] + usage["tokens_out"],
        "final": number == final,
        # Its resumes on other nodes after node losses, and the work they lost.
        "node_resumes": len(resumes),
        "lost_s": round(sum(r.lost_s for r in resumes), 1),
    }


def grader_stats(store: RecordStore) -> list[dict[str, Any]]:
    """The grader pool's busy fractions per sweep run and grader (none from stores before
    version 6).

    Each row: ``sweep_id``, ``run``, ``grader``, ``requests``, ``busy_s``, ``queue_nonempty_s``,
    ``busy_fraction``, ``replaced``.
    """
    rows = []
    for stat in store.list_sweep_stats("grader_pool"):
        try:
            value = json.loads(stat.value_json)
        except ValueError:
            continue
        for g in value.get("graders", []):
            rows.append(
                {
                    "sweep_id": stat.sweep_id,
                    "run": stat.run,
                    "grader": g.get("grader"),
                    "requests": g.get("requests"),
                    "busy_s": g.get("busy_s"),
                    "queue_nonempty_s": value.get("queue_nonempty_s"),
                    "busy_fraction": g.get("busy_fraction"),
                    "replaced": g.get("replaced", 0),
                }
            )
    return rows


def _driver_calls(store: RecordStore, cell_id: str) -> list[tuple[float, int]]:
    # Stores written before the driver gateway existed have no driver_calls table.
    lister = getattr(store, "list_driver_calls", None)
    if lister is None:
        return []
    return [(c.started_at, (c.tokens_in or 0) + (c.tokens_out or 0)) for c in lister(cell_id)]


def _git(repo: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", f"--git-dir={repo}", *args],
        capture_output=True,
        text=True,
        timeout=_GIT_TIMEOUT_S,
        check=True,
        errors="replace",
    )
    return result.stdout


def revision_files(repo: Path, revision: str) -> dict[str, str] | None:
    """The text files of ``code/`` at ``revision`` (path → content), or None without the repository.

    Files with another suffix, and files over 256 kB, are listed with empty content (their names
    can still tell, e.g. ``runs/grpo/...``). Two git processes per revision, whatever its size.
    """
    if not repo.is_dir():
        return None
    try:
        files: dict[str, str] = {}
        wanted: list[tuple[str, str]] = []
        for line in _git(repo, "ls-tree", "-r", "-l", "-z", revision).split("\0"):
            if not line:
                continue
            meta, _, name = line.partition("\t")
            _mode, kind, blob, size = meta.split()
            files[name] = ""
            if (
                kind == "blob"
                and name.endswith(_TEXT_SUFFIXES)
                and size.isdigit()
                and int(size) <= _MAX_FILE_BYTES
            ):
                wanted.append((name, blob))
        if wanted:
            batch = subprocess.run(
                ["git", f"--git-dir={repo}", "cat-file", "--batch"],
                input="".join(f"{b}\n" for _, b in wanted).encode(),
                capture_output=True,
                timeout=_GIT_TIMEOUT_S,
                check=True,
            ).stdout
            pos = 0
            for name, _ in wanted:
                header_end = batch.index(b"\n", pos)
                length = int(batch[pos:header_end].split()[2])
                files[name] = batch[header_end + 1 : header_end + 1 + length].decode(
                    "utf-8", errors="replace"
                )
                pos = header_end + 1 + length + 1  # the content is followed by a newline
        return files
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as error:
        logger.warning("cannot read revision %s of %s: %s", revision, repo, error)
        return None


def revision_diff(repo: Path, previous: str | None, revision: str) -> str | None:
    """``git diff previous revision`` (from the empty tree when ``previous`` is None), or None."""
    if not repo.is_dir():
        return None
    try:
        return _git(repo, "diff", previous or EMPTY_TREE, revision)
    except (subprocess.SubprocessError, OSError) as error:
        logger.warning("cannot diff %s..%s in %s: %s", previous, revision, repo, error)
        return None


def model_files(workspace: Path, model_path: str) -> dict[str, bytes]:
    """Small metadata files of a submitted model folder (``training_args.bin``), if still there."""
    folder = (workspace / model_path).resolve()
    if not folder.is_relative_to(workspace.resolve()) or not folder.is_dir():
        return {}
    out = {}
    for name in ("training_args.bin",):
        path = folder / name
        # The agent made this folder: a link there could point at any file of the host the report
        # can read (and a FIFO would block it), so only a regular file itself is read.
        try:
            info = path.lstat()
        except OSError:
            continue
        if S_ISREG(info.st_mode) and info.st_size <= 1_000_000:
            out[name] = path.read_bytes()
    return out


def _run_meta(cell_dir: Path, sweep_dir: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """The cell's budget facts: the harness's copy in the cell folder.

    A sweep folder from before that copy existed has only the workspace's, which the agent could
    rewrite: it is read only when it is a regular file (not a link, FIFO or device) of at most
    64 KiB, and said to come from the workspace.
    """
    record = cell_dir / RECORD_NAME
    legacy = cell_dir / "workspace" / "run_meta.json"
    notes: list[str] = []
    path = record if record.is_file() else legacy
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None, [f"no {record.relative_to(sweep_dir)}: budget metrics are unknown"]
    if not S_ISREG(info.st_mode) or info.st_size > 64 << 10:
        return None, [
            f"{path.relative_to(sweep_dir)} is not a small regular file: budget metrics are unknown"
        ]
    if path == legacy:
        notes.append(
            f"budget metrics from {legacy.relative_to(sweep_dir)} "
            "(a sweep from before the cell's own copy)"
        )
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return None, [f"unreadable {path.name}: {error}"]
    return (meta if isinstance(meta, dict) else None), notes
