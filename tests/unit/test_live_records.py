"""Live records: a running cell's trace events and resource samples, sent for the viewer.

The store's tables (autorl/records/live.py), the forwarder thread that sends them
(autorl/workspace/live.py) and the trace follower's hand-off, on real files, a real cgroup and real
processes; the Recorder path end to end is in tests/integration/test_real_cli.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autorl.agents.trace import TraceFollower
from autorl.records.live_types import TRACE_TEXT_CAP, ResourceSample, TraceEvent
from autorl.records.store import RecordStore
from autorl.records.types import (
    CellRecord,
)
from autorl.seal.cgroups import CellCgroup, CgroupLimits, cgroup_support
from autorl.workspace.live import (
    LiveForwarder,
    cgroup_usage,
    gpu_usage,
    process_tree_usage,
    trace_event,
)
from tests.helpers.view_server import cell, step

STREAMS = Path(__file__).resolve().parents[1] / "fixtures" / "agent_streams"


class Sink:
    """Stands in for the Recorder's client: keeps what it is sent, or fails as told."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.events: list[TraceEvent] = []
        self.samples: list[ResourceSample] = []
        self.batches: list[int] = []
        self.timeouts: set[float | None] = set()

    def record_trace_events(self, events: list[TraceEvent], timeout_s: float | None = None) -> None:
        self.timeouts.add(timeout_s)
        if self.fail:
            raise TimeoutError("the recorder did not answer")
        self.batches.append(len(events))
        self.events += events

    def record_resource_samples(
        self, samples: list[ResourceSample], timeout_s: float | None = None
    ) -> None:
        self.timeouts.add(timeout_s)
        if self.fail:
            raise TimeoutError("the recorder did not answer")
        self.samples += samples


def _store(tmp_path: Path, *cells: CellRecord) -> RecordStore:
    store = RecordStore(tmp_path / "records.sqlite")
    for rec in cells:
        store.upsert_cell(rec)
    return store


def test_events_are_paged_in_order_and_a_replay_changes_nothing(tmp_path: Path) -> None:
    store = _store(tmp_path, cell("c1", status="running"))
    store.add_trace_events([step("c1", n, text=f"cmd {n}") for n in range(1, 8)])
    store.add_trace_events([step("c1", 3, text="a replay of 3")])  # at-least-once delivery
    assert [e.text for e in store.list_trace_events("c1", after_seq=2, limit=2)] == [
        "cmd 3",
        "cmd 4",
    ]
    assert [e.seq for e in store.list_trace_events("c1", limit=3, latest=True)] == [5, 6, 7]
    assert all(e.attempt == 1 for e in store.list_trace_events("c1"))
    store.add_resource_samples(
        [ResourceSample("c1", 2.0, memory_bytes=2), ResourceSample("c1", 1.0)]
    )
    store.add_resource_samples([ResourceSample("c1", 2.0, memory_bytes=99)])
    assert [(s.t, s.memory_bytes) for s in store.list_resource_samples("c1")] == [
        (1.0, None),
        (2.0, 2),
    ]
    store.close()
    # A reader of the store (the viewer) gets the same; it cannot write.
    ro = RecordStore(tmp_path / "records.sqlite", read_only=True)
    assert len(ro.list_trace_events("c1")) == 7
    with pytest.raises(Exception, match="read-only"):
        ro.add_trace_events([step("c1", 8)])
    ro.close()


def test_a_new_attempt_starts_its_own_steps(tmp_path: Path) -> None:
    store = _store(tmp_path, cell("c1", status="running"))
    store.add_trace_events([step("c1", 1, text="first try")])
    store.start_attempt(cell("c1", status="running", attempts=2))
    store.add_trace_events([step("c1", 1, text="second try")])
    assert [e.text for e in store.list_trace_events("c1")] == ["second try"]
    assert [e.text for e in store.list_trace_events("c1", attempt=1)] == ["first try"]
    store.close()


def test_an_event_keeps_its_kind_tool_and_an_excerpt_of_its_text() -> None:
    call = trace_event("c1", {"seq": 4, "kind": "tool_call", "tool": "t" * 500,
                              "input": {"command": "x" * 5000}}, 1.0)  # fmt: skip
    assert call.seq == 4 and call.tool == "t" * 200
    assert len(call.text) == TRACE_TEXT_CAP and call.text.startswith('{"command": "xxx')
    result = trace_event("c1", {"seq": 5, "kind": "tool_result", "output": "ok"}, 1.0)
    assert (result.kind, result.text) == ("tool_result", "ok")
    usage = trace_event("c1", {"seq": 6, "kind": "usage", "tokens_in": 9, "tokens_out": 3}, 1.0)
    assert (usage.tokens_in, usage.tokens_out) == (9, 3)


def _wait(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_the_forwarder_sends_batches_and_a_last_sample_when_stopped() -> None:
    sink = Sink()
    usage = iter([(1.0, 100), (3.0, 200), (3.5, 300), (4.0, 300)])
    forwarder = LiveForwarder("c1", sink, lambda: next(usage), trace_interval_s=0.05,
                              sample_interval_s=0.2)  # fmt: skip
    forwarder.start()
    assert _wait(lambda: len(sink.samples) >= 1)  # a first sample at once
    forwarder.add_events([{"seq": n, "kind": "message", "text": str(n)} for n in range(1, 1201)])
    forwarder.add_events([{"kind": "no seq: dropped"}])
    assert _wait(lambda: len(sink.events) == 1200)
    forwarder.stop()
    assert max(sink.batches) <= 500 and [e.seq for e in sink.events] == list(range(1, 1201))
    assert sink.samples[-1].memory_bytes in (200, 300)  # stop() took a last sample
    assert all(s.cpu_fraction is None or s.cpu_fraction >= 0 for s in sink.samples)
    assert sink.timeouts == {10.0}  # every send bounded: a slow recorder never holds the cell


def test_a_failing_recorder_never_fails_or_blocks_the_cell(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = Sink(fail=True)
    forwarder = LiveForwarder("c1", sink, lambda: (1.0, 1), trace_interval_s=0.05)
    forwarder.start()
    forwarder.add_events([{"seq": 1, "kind": "message", "text": "hi"}])
    time.sleep(0.3)
    started = time.monotonic()
    forwarder.stop()
    assert time.monotonic() - started < 2 and not sink.events
    # One warning, not one per attempt.
    assert sum("not stored, dropped" in r.getMessage() for r in caplog.records if r.levelname ==
               "WARNING") == 1  # fmt: skip


def test_the_follower_hands_each_polls_events_to_the_forwarder(tmp_path: Path) -> None:
    log, trace = tmp_path / "agent.log", tmp_path / "trace.jsonl"
    lines = (STREAMS / "codex.jsonl").read_text().splitlines(keepends=True)
    got: list[dict[str, Any]] = []
    follower = TraceFollower(log, trace, "codex", "codex", on_events=got.extend)
    with log.open("w") as out:
        follower.start()  # before the agent writes: what a log holds at the start is skipped
        out.write("".join(lines[: len(lines) // 2]))
        out.flush()
        assert _wait(lambda: bool(got))
        out.write("".join(lines[len(lines) // 2 :]))
    follower.stop()
    written = [json.loads(line) for line in trace.read_text().splitlines()]
    assert got == written and [e["seq"] for e in got] == list(range(1, len(got) + 1))


def _busy_usage(
    usage: Callable[[], tuple[float | None, int | None]],
    preexec: Callable[[], None] | None = None,
) -> list[tuple[float | None, int | None]]:
    """``usage()`` twice, a second apart, while a child that holds 64 MiB spins."""
    code = ("import sys, time\nblock = bytearray(64 * 2**20)\nprint('ready', flush=True)\n"
            "end = time.time() + 30\nwhile time.time() < end: pass\n")  # fmt: skip
    child = subprocess.Popen(
        [sys.executable, "-c", code], preexec_fn=preexec, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        first = usage()
        time.sleep(1.0)
        return [first, usage()]
    finally:
        child.kill()
        child.wait()


def _grew_and_holds_64_mib(samples: list[tuple[float | None, int | None]]) -> bool:
    (cpu_1, _), (cpu_2, memory) = samples
    return cpu_1 is not None and cpu_2 is not None and cpu_2 > cpu_1 and (memory or 0) > 64 * 2**20


def test_process_tree_usage_counts_the_agents_children() -> None:
    samples = _busy_usage(process_tree_usage)
    assert _grew_and_holds_64_mib(samples), samples


def test_cgroup_usage_reads_the_cells_cgroup(
    make_group: Callable[[CgroupLimits], CellCgroup],
) -> None:
    support = cgroup_support()
    if support.version is None or "memory" not in support.controllers:
        pytest.skip(f"no memory controller for a cell's cgroup here: {support.missing}")
    group = make_group(CgroupLimits(memory_bytes=512 * 2**20, cpus=1.0))
    samples = _busy_usage(lambda: cgroup_usage(group), group.enter)
    assert _grew_and_holds_64_mib(samples), samples


def test_gpu_usage_asks_nvidia_smi_for_the_cells_gpus_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nvidia-smi cannot run here: this one answers the query the way the real one does, per id.
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/args"\n'
                   "printf '50, 1024\\n100, 3072\\n'\n")  # fmt: skip
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    util, memory = gpu_usage("GPU-aa, GPU-bb")
    assert (util, memory) == (0.75, 4096 * 2**20)
    assert (tmp_path / "args").read_text().split()[-1] == "--id=GPU-aa,GPU-bb"
    assert gpu_usage("") == (None, None)  # a cell without GPUs never runs it
    smi.write_text("#!/bin/sh\nexit 9\n")
    assert gpu_usage("0") == (None, None)


def test_store_writes_from_many_threads_keep_every_event(tmp_path: Path) -> None:
    store = _store(tmp_path, cell("c1", status="running"), cell("c2", status="running"))

    def send(cell_id: str) -> None:
        for start in range(1, 200, 20):
            store.add_trace_events([step(cell_id, n) for n in range(start, start + 20)])

    threads = [threading.Thread(target=send, args=(c,)) for c in ("c1", "c2", "c1")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [e.seq for e in store.list_trace_events("c1", limit=1000)] == list(range(1, 201))
    assert len(store.list_trace_events("c2", limit=1000)) == 200
    store.close()


def test_cgroup_usage_reads_a_v2_groups_files(tmp_path: Path) -> None:
    # This machine mounts cgroup v1; a v2 group's two files, as the kernel writes them, are read.
    (tmp_path / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 1\n")
    (tmp_path / "memory.current").write_text("73400320\n")
    group = CellCgroup("c1", "v2", {c: tmp_path for c in ("cpu", "memory")}, CgroupLimits())
    assert cgroup_usage(group) == (2.5, 73400320)
