"""What the live viewer shows: the sweep page, a cell page, a revision's diff and the agent log.

Every page is rendered by the report's Jinja2 environment (:func:`autorl.report.html_page.
environment`: autoescape on, control characters written out), overlaid with this package's
templates, so an agent's string is text wherever it lands. A live page's changing part is one
macro of ``templates/view_parts.html.j2``; the page and the server-sent events render the same
macro, so an update is the fragment the page would show after a reload.

Files of a cell are reached by the cell's id, never by a path from a request: the id must name a
cell of the store, and each component under the sweep folder is opened without following a link.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from markupsafe import Markup

from autorl.cell_groups import group_cells
from autorl.records.live_types import ResourceSample, TraceEvent
from autorl.records.store import RecordStore
from autorl.records.types import (
    CellRecord,
)
from autorl.report.html_page import Link, Table, environment

# One page of the agent log; the cell page shows the last LOG_TAIL bytes of it.
LOG_PAGE = 64 * 1024
LOG_TAIL = 16 * 1024
# The agent's latest steps on a cell page, the resource samples its curves span, and how much of a
# step's text a table cell shows (the store keeps up to TRACE_TEXT_CAP characters of it).
STEPS_SHOWN = 100
SAMPLES_SHOWN = 120
STEP_TEXT_SHOWN = 400
RUN_REPORT_SHOWN = 256 * 1024
STATES = ("pending", "running", "completed", "failed", "cancelled")


@functools.cache
def view_environment() -> jinja2.Environment:
    """The report's environment with this package's templates in front of the report's."""
    base = environment()
    return base.overlay(
        loader=jinja2.ChoiceLoader(
            [jinja2.FileSystemLoader(Path(__file__).parent / "templates"), base.loader]  # type: ignore[list-item]
        )
    )


def render(template: str, **context: Any) -> str:
    """``template`` (of this package or the report's) rendered with ``context``."""
    return view_environment().get_template(template).render(**context)


def fragment(macro: str, **context: Any) -> str:
    """One macro of ``view_parts.html.j2``: the live part of a page."""
    module = view_environment().get_template("view_parts.html.j2").make_module()
    return str(getattr(module, macro)(**context))


def cell_href(cell_id: str, *rest: str) -> str:
    """The viewer's own link to a cell (the id percent-encoded, so it stays one path segment)."""
    return "/".join(["/cell", quote(cell_id, safe=""), *rest])


def _when(ts: float | None) -> str | None:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) if ts else None


@dataclass(frozen=True)
class Filters:
    """The sweep page's query: cells of one state and/or one task (empty: all)."""

    state: str = ""
    task: str = ""

    def keep(self, cell: CellRecord) -> bool:
        """Whether ``cell`` passes the filter."""
        return (not self.state or cell.status == self.state) and (
            not self.task or cell.task == self.task
        )

    @property
    def query(self) -> str:
        """The query string that gives this filter back (empty when none)."""
        pairs = {k: v for k, v in (("state", self.state), ("task", self.task)) if v}
        return f"?{urlencode(pairs)}" if pairs else ""


def _digest(*parts: Any) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


# The sweep page.


def sweep_context(store: RecordStore, filters: Filters) -> dict[str, Any]:
    """The values of the sweep page's live part, and ``version``, which changes with them."""
    all_cells = store.list_cells()
    cells = [c for c in all_cells if filters.keep(c)]
    groups = Table(
        ["task", "agent", "driver", *STATES, "done", "best", "mean improvement", "running"],
        [
            [
                *g.key,
                *(g.counts.get(s, 0) for s in STATES),
                f"{g.done}/{g.total}",
                g.best,
                g.mean_improvement,
                ", ".join(g.running) or None,
            ]
            for g in group_cells(cells)
        ],
    )
    table = Table(
        ["cell", "task", "agent", "driver", "model", "seed", "status", "baseline", "best", "imp."],
        [
            [
                Link(cell_href(c.cell_id), c.cell_id),
                c.task,
                c.agent,
                c.driver,
                c.model,
                c.seed,
                c.status,
                c.baseline,
                c.best_score,
                c.improvement,
            ]
            for c in cells
        ],
    )
    return {
        "groups": groups,
        "cells": table,
        "shown": len(cells),
        "total": len(all_cells),
        "tasks": sorted({c.task for c in all_cells}),
        "states": STATES,
        "filters": filters,
        "running": [Link(cell_href(c.cell_id), c.cell_id) for c in cells if c.status == "running"],
        "version": _digest(all_cells),
    }


# A cell's page.


def _curve(scores: list[float]) -> list[tuple[float, float]]:
    """SVG coordinates of the scores in submission order, on a 400 × 120 canvas."""
    if not scores:
        return []
    low, high = min(scores), max(scores)
    span = (high - low) or 1.0
    step = 380 / max(len(scores) - 1, 1)
    return [(round(10 + i * step, 1), round(110 - (s - low) / span * 100, 1))
            for i, s in enumerate(scores)]  # fmt: skip


def _steps_table(events: list[TraceEvent]) -> Table:
    """The agent's steps, newest last: kind, tool, an excerpt of the command, text or output."""
    return Table(
        ["#", "time", "kind", "tool", "text", "tokens in", "tokens out"],
        [
            [
                e.seq,
                time.strftime("%H:%M:%S", time.gmtime(e.t)),
                e.kind,
                e.tool,
                e.text[:STEP_TEXT_SHOWN] + ("…" if len(e.text) > STEP_TEXT_SHOWN else ""),
                e.tokens_in,
                e.tokens_out,
            ]
            for e in events
        ],
    )


@dataclass(frozen=True)
class Resources:
    """What a cell page shows of the agent's resource use: the latest sample and two curves.

    Attributes:
        latest: The newest sample, or None before the first.
        cpu_curve: SVG points of the CPUs busy over the samples shown.
        memory_curve: SVG points of the memory in use over them.
        span_s: Seconds between the first and the last sample shown.
        cpu_range: The CPU curve's scale, lowest to highest (each curve spans its own range).
        memory_range: The memory curve's scale.
    """

    latest: ResourceSample | None
    cpu_curve: list[tuple[float, float]]
    memory_curve: list[tuple[float, float]]
    span_s: float
    cpu_range: str = ""
    memory_range: str = ""

    @property
    def memory_mib(self) -> float | None:
        """The latest memory in use, MiB."""
        return _mib(self.latest.memory_bytes if self.latest else None)

    @property
    def gpu_memory_mib(self) -> float | None:
        """The latest GPU memory in use, MiB."""
        return _mib(self.latest.gpu_memory_bytes if self.latest else None)


def _mib(size: int | None) -> float | None:
    return None if size is None else round(size / 2**20, 1)


def resources_of(samples: list[ResourceSample]) -> Resources:
    """The :class:`Resources` of ``samples`` (oldest first)."""
    cpu = [s.cpu_fraction for s in samples if s.cpu_fraction is not None]
    memory = [float(s.memory_bytes) for s in samples if s.memory_bytes is not None]
    span = samples[-1].t - samples[0].t if samples else 0.0
    cpu_range = f"{min(cpu):.2f}–{max(cpu):.2f} CPUs" if cpu else ""
    mib = [m / 2**20 for m in memory]
    memory_range = f"{min(mib):.0f}–{max(mib):.0f} MiB" if mib else ""
    return Resources(
        samples[-1] if samples else None, _curve(cpu), _curve(memory), span, cpu_range, memory_range
    )


def cell_context(store: RecordStore, sweep_dir: Path, cell: CellRecord) -> dict[str, Any]:
    """The values of a cell page's live part, and ``version``, which changes with them."""
    submissions = store.list_submissions(cell.cell_id)
    calls = store.list_driver_calls(cell.cell_id)
    revisions = store.list_code_revisions(cell.cell_id)
    steps = store.list_trace_events(cell.cell_id, limit=STEPS_SHOWN, latest=True)
    # The run report is written when the sweep ends (the report's Markdown, already escaped for
    # Markdown; shown here as text).
    report = None
    if cell.status in ("completed", "failed", "cancelled"):
        report = read_log(sweep_dir, cell.cell_id, 0, RUN_REPORT_SHOWN, "run_report.md")
    samples = store.list_resource_samples(cell.cell_id, limit=SAMPLES_SHOWN)
    checkpoints = store.list_checkpoints(cell.cell_id)
    resumes = store.list_resumes(cell.cell_id)
    log = read_log(sweep_dir, cell.cell_id, None, LOG_TAIL)
    summary = Table(
        ["status", "task", "agent", "driver", "model", "seed", "baseline", "best", "improvement"]
        + ["submissions", "valid", "flagged", "exit", "error", "started", "finished"],
        [
            [
                cell.status,
                cell.task,
                cell.agent,
                cell.driver,
                cell.model,
                cell.seed,
                cell.baseline,
                cell.best_score,
                cell.improvement,
                cell.submissions,
                cell.valid_submissions,
                cell.flagged_submissions,
                cell.exit_class,
                cell.error,
                _when(cell.started_at),
                _when(cell.finished_at),
            ]
        ],
    )
    subs = Table(
        ["id", "status", "score", "improvement", "flags", "error", "model path", "submitted"],
        [
            [
                s.submission_id,
                s.status,
                s.score,
                s.improvement,
                s.flags,
                s.error,
                s.model_path,
                _when(s.submitted_at),
            ]
            for s in submissions
        ],
    )
    driver = Table(
        ["call", "model", "status", "latency s", "tokens in", "tokens out", "cost $", "error"],
        [
            [
                c.call_id,
                c.model,
                c.status_code,
                c.latency_s,
                c.tokens_in,
                c.tokens_out,
                c.cost_usd,
                c.error,
            ]
            for c in calls
        ],
    )
    revs = Table(
        ["#", "revision", "reason", "files changed", "created"],
        [
            [
                Link(cell_href(cell.cell_id, "revision", str(n)), str(n)),
                r.revision,
                r.reason,
                r.files_changed,
                _when(r.created_at),
            ]
            for n, r in enumerate(revisions, start=1)
        ],
    )
    scores = [s.score for s in submissions if s.score is not None]
    return {
        "cell": cell,
        "summary": summary,
        "submissions": subs,
        "curve": _curve(scores),
        "calls": driver,
        "revisions": revs,
        "steps": _steps_table(steps),
        "integrity": Table(
            ["contamination", "flags", "weight distance", "flagged submissions"],
            [
                [
                    cell.contamination,
                    cell.integrity_flags,
                    cell.weight_distance,
                    cell.flagged_submissions,
                ]
            ],
        ),
        "run_report": report,
        "checkpoints": Table(
            ["time", "checkpoint", "agent time s", "files", "MiB", "MiB new", "frozen s", "took s"]
            + ["error"],
            [
                [
                    _when(k.t),
                    k.checkpoint_id or None,
                    k.agent_time_s,
                    k.files,
                    round(k.bytes_total / 2**20, 2),
                    round(k.bytes_new / 2**20, 2),
                    k.frozen_s if k.frozen else None,
                    k.total_s,
                    k.error,
                ]
                for k in checkpoints
            ],
        ),
        "resumes": Table(
            ["resumed", "from checkpoint", "agent time s", "lost s", "lost node", "new node"]
            + ["reason"],
            [
                [
                    _when(r.t),
                    r.checkpoint_id,
                    r.time_used_s,
                    r.lost_s,
                    (r.from_node or "")[:12],
                    (r.to_node or "")[:12],
                    r.reason,
                ]
                for r in resumes
            ],  # fmt: skip
        ),
        "resources": resources_of(samples),
        "log": log,
        "log_href": cell_href(cell.cell_id, "log"),
        "version": _digest(
            cell,
            submissions,
            calls,
            [r.revision for r in revisions],
            steps[-1].seq if steps else 0,
            samples[-1].t if samples else 0,
            len(checkpoints),
            len(resumes),
            log.size,
            report.size if report else None,
        ),
    }


# The agent log, read without following a link.


@dataclass(frozen=True)
class LogPage:
    """A slice of a cell's ``agent.log``.

    Attributes:
        text: The bytes of the slice, decoded (invalid UTF-8 replaced).
        offset: Where the slice starts in the file.
        size: The file's size (0 when there is no log).
        missing: Why there is no log to show, or "".
    """

    text: str
    offset: int
    size: int
    missing: str = ""

    @property
    def end(self) -> int:
        """Where the slice ends (the next page's offset)."""
        return self.offset + len(self.text.encode("utf-8", "surrogateescape"))


def _open_nofollow(sweep_dir: Path, cell_id: str, name: str) -> int:
    """A read descriptor of ``<sweep_dir>/cells/<cell_id>/<name>``, each step without following a
    link (a FIFO would block, so non-blocking, and it must be a regular file).

    Raises:
        OSError: A component is missing, a link, or the log is no regular file.
    """
    if not cell_id or cell_id in (".", "..") or "/" in cell_id or "\0" in cell_id:
        raise OSError(errno.ENOENT, "no such cell folder")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    cells = os.open(sweep_dir / "cells", flags | os.O_DIRECTORY)
    try:
        folder = os.open(cell_id, flags | os.O_DIRECTORY, dir_fd=cells)
    finally:
        os.close(cells)
    try:
        fd = os.open(name, flags | os.O_NONBLOCK, dir_fd=folder)
    finally:
        os.close(folder)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{name} is no regular file")
    return fd


def read_log(
    sweep_dir: Path,
    cell_id: str,
    offset: int | None,
    length: int = LOG_PAGE,
    name: str = "agent.log",
) -> LogPage:
    """``length`` bytes of the cell's log (or of another file of its folder the harness writes,
    ``name``) from ``offset`` (None: its last ``length`` bytes)."""
    try:
        fd = _open_nofollow(sweep_dir, cell_id, name)
    except OSError as err:
        reason = "a link or no regular file" if err.errno in (errno.ELOOP, errno.EINVAL) else ""
        return LogPage("", 0, 0, f"no {name} to show{' (' + reason + ')' if reason else ''}")
    try:
        size = os.fstat(fd).st_size
        start = max(size - length, 0) if offset is None else min(max(offset, 0), size)
        data = os.pread(fd, length, start)
    finally:
        os.close(fd)
    return LogPage(data.decode("utf-8", "replace"), start, size)


def page(title: str, main: str, events: str = "", back: str = "/") -> str:
    """A whole viewer page around ``main`` (markup rendered by this module); with ``events`` its
    script follows that event stream and replaces ``main`` on each event."""
    return render("view_page.html.j2", title=title, main=Markup(main), events=events, back=back)
