"""What a running cell sends for the live viewer: its agent's trace events and resource samples.

Cells run on other nodes than the sweep's record store, so the viewer cannot read ``trace.jsonl``
or the cell's cgroup: the Workspace actor forwards them through the Recorder while the agent runs
(docs/design.md#a-cells-life). A :class:`LiveForwarder` thread sends the trace events queued since
its last send every :data:`TRACE_INTERVAL_S` and a resource sample every
:data:`SAMPLE_INTERVAL_S`. The live records are for watching, not for results: a recorder that
fails or is slow never blocks or fails the cell; what it does not take is logged and dropped.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from autorl.records.live_types import TRACE_TEXT_CAP, ResourceSample, TraceEvent
from autorl.seal.cgroups import CellCgroup

logger = logging.getLogger(__name__)

TRACE_INTERVAL_S = 2.0
SAMPLE_INTERVAL_S = 5.0
# The most events one send carries, and the most waiting: a chatty agent's backlog is cut to
# its newest events rather than growing the actor's memory while the recorder is away.
_BATCH = 500
_QUEUE = 5000
# How long one send may wait for the Recorder before the batch is dropped.
_SEND_TIMEOUT_S = 10.0


class LiveSink(Protocol):
    """Where the live records go (the Recorder's client)."""

    def record_trace_events(self, events: list[TraceEvent], timeout_s: float | None = None) -> None:
        """Store trace events."""
        ...

    def record_resource_samples(
        self, samples: list[ResourceSample], timeout_s: float | None = None
    ) -> None:
        """Store resource samples."""
        ...


def _excerpt(value: Any) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text[:TRACE_TEXT_CAP]


def trace_event(cell_id: str, event: dict[str, Any], t: float) -> TraceEvent:
    """The record of one normalised trace event (see :mod:`autorl.agents.trace`): its kind, the
    tool it calls, and an excerpt of its text, command or output."""
    kind = str(event.get("kind", ""))
    tool = event.get("tool")
    if kind == "tool_call":
        text = _excerpt(event.get("input"))
    elif kind == "tool_result":
        text = _excerpt(event.get("output"))
    elif kind == "result":
        text = _excerpt(event.get("status"))
    else:
        text = _excerpt(event.get("text"))
    tokens_in = event.get("tokens_in") if kind == "usage" else None
    tokens_out = event.get("tokens_out") if kind == "usage" else None
    return TraceEvent(
        cell_id=cell_id,
        seq=int(event["seq"]),
        t=t,
        kind=kind,
        tool=None if tool is None else str(tool)[:200],
        text=text,
        tokens_in=int(tokens_in) if isinstance(tokens_in, int) else None,
        tokens_out=int(tokens_out) if isinstance(tokens_out, int) else None,
    )


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _cpu_stat_usec(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value)
    return None


def cgroup_usage(group: CellCgroup, proc: Path = Path("/proc")) -> tuple[float | None, int | None]:
    """``(CPU seconds, memory bytes)`` the cell's cgroup has charged (None where not readable).

    v2: ``cpu.stat`` (``usage_usec``) and ``memory.current``. v1: ``cpuacct.usage`` (ns) where
    the group's ``cpu`` hierarchy is mounted together with ``cpuacct``, and
    ``memory.usage_in_bytes``; a v1 group without either (a node that mounts ``cpuacct`` apart,
    a cell without a memory limit) is measured from ``/proc`` over the group's processes, which
    leaves out the CPU of processes that have already exited.
    """
    if group.version == "v2":
        folder = next(iter(group.dirs.values()))
        usec = _cpu_stat_usec(folder / "cpu.stat")
        return (None if usec is None else usec / 1e6), _read_int(folder / "memory.current")
    dirs = group.dirs
    cpu_ns = _read_int(dirs["cpu"] / "cpuacct.usage") if "cpu" in dirs else None
    memory = _read_int(dirs["memory"] / "memory.usage_in_bytes") if "memory" in dirs else None
    cpu_s = None if cpu_ns is None else cpu_ns / 1e9
    if cpu_s is None or memory is None:
        stats = _proc_stats(proc) if proc.is_dir() else {}
        proc_cpu, proc_memory = _sum_usage(stats, group.pids() & stats.keys())
        cpu_s = proc_cpu if cpu_s is None else cpu_s
        memory = proc_memory if memory is None else memory
    return cpu_s, memory


def _sum_usage(stats: dict[int, tuple[int, int, int]], pids: Iterable[int]) -> tuple[float, int]:
    """``(CPU seconds, resident bytes)`` of ``pids`` from :func:`_proc_stats`."""
    ticks = pages = 0
    for pid in pids:
        _, cpu, rss = stats[pid]
        ticks, pages = ticks + cpu, pages + rss
    return ticks / os.sysconf("SC_CLK_TCK"), pages * os.sysconf("SC_PAGE_SIZE")


def _proc_stats(proc: Path) -> dict[int, tuple[int, int, int]]:
    """``pid -> (parent pid, CPU ticks, resident pages)`` of every process in ``proc``."""
    found = {}
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = Path(entry.path, "stat").read_text()
            # The command name (field 2) may hold spaces and parentheses: split after its end.
            fields = text[text.rindex(")") + 2 :].split()
            found[int(entry.name)] = (
                int(fields[1]),
                int(fields[11]) + int(fields[12]),
                int(fields[21]),
            )
    return found


def process_tree_usage(
    root: int | None = None, proc: Path = Path("/proc")
) -> tuple[float | None, int | None]:
    """``(CPU seconds, resident bytes)`` of the descendants of ``root`` (this process): the
    unsealed agent's processes, which no cgroup holds. Read from ``/proc``, none elsewhere."""
    if not proc.is_dir():
        return None, None
    stats = _proc_stats(proc)
    children: dict[int, list[int]] = collections.defaultdict(list)
    for pid, (ppid, _, _) in stats.items():
        children[ppid].append(pid)
    todo, tree = list(children[os.getpid() if root is None else root]), []
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children[pid]
    return _sum_usage(stats, tree)


GPU_QUERY = ["--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]


def gpu_usage(visible: str, timeout_s: float = 5.0) -> tuple[float | None, int | None]:
    """``(utilisation 0..1, memory bytes)`` of the GPUs ``visible`` names (the cell's
    ``CUDA_VISIBLE_DEVICES``: Ray's ids for its reservation), from ``nvidia-smi``: the mean
    utilisation and the memory in use, summed. A cell holds whole GPUs, so the device's figures
    are the cell's. ``(None, None)`` without GPUs, without ``nvidia-smi`` or when it fails.
    """
    ids = [part.strip() for part in visible.split(",") if part.strip()]
    smi = shutil.which("nvidia-smi")
    if not ids or smi is None:
        return None, None
    try:
        done = subprocess.run(
            [smi, *GPU_QUERY, f"--id={','.join(ids)}"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=True,
        )
        rows = [[float(v) for v in line.split(",")] for line in done.stdout.splitlines() if line]
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        logger.debug("no GPU sample (%s)", error)
        return None, None
    if not rows or any(len(row) != 2 for row in rows):
        return None, None
    return sum(r[0] for r in rows) / len(rows) / 100, int(sum(r[1] for r in rows) * 2**20)


class LiveForwarder:
    """Sends a running cell's trace events and resource samples to the Recorder, on a thread.

    Args:
        cell_id: The cell.
        sink: The Recorder's client.
        usage: Returns ``(CPU seconds, memory bytes)`` of the agent's processes now; None:
            :func:`process_tree_usage`.
        gpus: The cell's ``CUDA_VISIBLE_DEVICES`` (empty: no GPU is sampled).
        trace_interval_s: Seconds between sends of the queued trace events.
        sample_interval_s: Seconds between resource samples.
        seq_offset: Added to each event's number (a resumed cell numbers on after its lost node).
    """

    def __init__(
        self,
        cell_id: str,
        sink: LiveSink,
        usage: Callable[[], tuple[float | None, int | None]] | None = None,
        gpus: str = "",
        trace_interval_s: float = TRACE_INTERVAL_S,
        sample_interval_s: float = SAMPLE_INTERVAL_S,
        seq_offset: int = 0,
    ) -> None:
        self.cell_id = cell_id
        self.seq_offset = seq_offset
        self.sink = sink
        self.usage = usage or process_tree_usage
        self.gpus = gpus
        self.trace_interval_s = trace_interval_s
        self.sample_interval_s = sample_interval_s
        self._queue: collections.deque[TraceEvent] = collections.deque(maxlen=_QUEUE)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_cpu: tuple[float, float] | None = None  # (wall time, CPU seconds)
        self._failures = 0
        self._thread = threading.Thread(target=self._run, name="live-records", daemon=True)

    def add_events(self, events: list[dict[str, Any]]) -> None:
        """Queue normalised trace events (the trace follower's callback; never blocks)."""
        now = time.time()
        records = []
        for event in events:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                record = trace_event(self.cell_id, event, now)
                records.append(dataclasses.replace(record, seq=record.seq + self.seq_offset))
        with self._lock:
            self._queue.extend(records)

    def start(self) -> None:
        """Start sending (a first resource sample right away)."""
        self._thread.start()

    def stop(self) -> None:
        """Send what is queued and a last sample, and stop (bounded by the send timeout)."""
        self._stop.set()
        self._thread.join(timeout=3 * _SEND_TIMEOUT_S)
        if not self._thread.is_alive():
            self._send_events()
            self._sample()

    def _run(self) -> None:
        next_sample = time.monotonic()
        while True:
            if time.monotonic() >= next_sample:
                self._sample()
                next_sample = time.monotonic() + self.sample_interval_s
            self._send_events()
            if self._stop.wait(self.trace_interval_s):
                return

    def _send_events(self) -> None:
        while True:
            with self._lock:
                batch = [self._queue.popleft() for _ in range(min(_BATCH, len(self._queue)))]
            if not batch:
                return
            if not self._send(self.sink.record_trace_events, batch):
                return  # the rest waits for the next round (or falls off the queue's end)

    def _sample(self) -> None:
        try:
            cpu_s, memory = self.usage()
        except Exception as error:  # noqa: BLE001 - a sample is never worth failing the cell
            logger.debug("cell %s: no resource sample (%s)", self.cell_id, error)
            return
        now = time.time()
        fraction = None
        if cpu_s is not None:
            if self._last_cpu is not None and now > self._last_cpu[0]:
                fraction = max(0.0, (cpu_s - self._last_cpu[1]) / (now - self._last_cpu[0]))
            self._last_cpu = (now, cpu_s)
        gpu_util, gpu_memory = gpu_usage(self.gpus) if self.gpus else (None, None)
        sample = ResourceSample(self.cell_id, now, cpu_s, fraction, memory, gpu_util, gpu_memory)
        self._send(self.sink.record_resource_samples, [sample])

    def _send(self, send: Callable[..., None], records: list[Any]) -> bool:
        """Send ``records``; False (logged, records dropped) when the Recorder fails."""
        try:
            send(records, timeout_s=_SEND_TIMEOUT_S)
        except Exception as error:  # noqa: BLE001 - live records never fail the cell
            self._failures += 1
            # The first failure is worth a warning; a recorder that stays away would flood the log.
            log = logger.warning if self._failures == 1 else logger.debug
            log(
                "cell %s: %d live record(s) not stored, dropped (%s)",
                self.cell_id,
                len(records),
                error,
            )
            return False
        return True
