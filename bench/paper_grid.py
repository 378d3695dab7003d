"""Benchmark: the paper's grid at cluster scale, simulated on this machine (issue #44 items 4, 5).

Starts a local Ray cluster of 8 nodes (``ray start``, one process group each), every node declaring
8 GPUs backed by a fake ``nvidia-smi`` and fake ``/dev/nvidia*`` files, and runs the paper's grid
through the real planner, scheduler, Recorder, grader pool, W&B (offline) and report: the 30
agent × driver pairs of ``agent=all driver=all`` × the 6 tasks × 3 seeds, 540 sealed cells. Each
pair is a label (a plugin ``agent`` option named ``<agent>__<driver>``) of one cheap command agent:
it sleeps, submits a copy of the base model (identical weights, so the grader's score cache scores
each task once) and exits.

The agent's time stands for the paper's 12-hour cells: a cell's simulated agent hours are uniform
on ``[--hours-min, --hours-max]`` (drawn from a hash of its workspace path, so a cell sleeps the
same on every run), slept at ``--seconds-per-hour`` real seconds. Each cell holds one node's 8
GPUs.

Prints: planning time; per-cell overhead (the time an attempt holds its placement group, from its
registration to its end, minus its agent's run, from ``run_meta.json``), median and p95; peak RSS of
the sweep process (this one) and of the Recorder actor, and the sweep's RSS as cells finish (first
vs last samples); memory per running cell (its Workspace actor and everything under it); the
record store's size; the report's build time; the makespan against the packing lower bound (the
cells' GPU-seconds / 64 GPUs); GPU idle time while cells wait; the viewer's ``GET /`` on the
finished sweep folder.

    python bench/paper_grid.py                               # the 540 cells, 8 at a time
    python bench/paper_grid.py --seeds 1 --labels 10 --tasks gsm8k,humaneval   # a quick check
    python bench/paper_grid.py --json /tmp/paper_grid.json

Only processes this script starts are stopped, by process group and by their temp dir; never
``ray stop`` (other clusters may share the machine). Everything goes under ``--root`` (a new folder
in /tmp by default), which is removed at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fake_gpu_cluster import (  # noqa: E402 - after the checkout is importable
    GPUS_PER_NODE,
    NODES,
    Cluster,
    alive_nodes,
    fake_gpus,
    free_port,
    gcs_up,
    start_cluster,
    stop_cluster,
    wait_for,
)

TASKS = ("alfworld", "alpacaeval", "deepsearchqa", "gsm8k", "humaneval", "webshop")
SWEEP_ID = "paper-grid"


AGENT = '''"""The paper_grid bench's agent: sleep, submit a copy of the base model, exit."""

import hashlib
import json
import os
import shutil
import sys
import time
import urllib.request

low, high = float(sys.argv[1]), float(sys.argv[2])
workspace = os.environ["WORKSPACE"]
draw = int(hashlib.sha256(workspace.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
seconds = low + (high - low) * draw
time.sleep(seconds)
copy = os.path.join(os.environ["OUTPUT_DIR"], "v1")
shutil.copytree(os.environ["MODEL_PATH"], copy)
request = urllib.request.Request(
    os.environ["GRADING_SERVER_URL"] + "/submit",
    data=json.dumps({"model_path": os.path.relpath(copy, workspace)}).encode(),
    headers={
        "Authorization": "Bearer " + os.environ["GRADING_TOKEN"],
        "Content-Type": "application/json",
    },
)
with urllib.request.urlopen(request, timeout=600) as response:
    answer = json.loads(response.read())
print(f"slept {seconds:.2f} s; submitted output/v1: {answer.get('status')} {answer.get('score')}")
'''


def grid_pairs() -> list[tuple[str, str]]:
    """The paper's agent × driver pairs: those of ``agent=all driver=all`` (the CLIs with the LLM
    drivers they can use) and the scripted reference, which runs with ``driver=none`` only."""
    from autorl.config import plan_sweep

    plan = plan_sweep(["agent=all", "driver=all", "task=gsm8k", "seed=0"])
    return sorted({(cell.agent, cell.driver) for cell in plan.cells} | {("scripted", "none")})


def label(agent: str, driver: str) -> str:
    """A pair's agent option name (no dots: they separate the parts of a cell id)."""
    return f"{agent}__{driver}".replace(".", "_")


def write_plugin(root: Path, labels: list[str], low_s: float, high_s: float) -> Path:
    """A plugin folder with one command-agent option per label, all running :data:`AGENT`."""
    plugin = root / "plugin"
    (plugin / "conf" / "agent").mkdir(parents=True)
    agent_file = root / "paper_grid_agent.py"
    agent_file.write_text(AGENT)
    for name in labels:
        (plugin / "conf" / "agent" / f"{name}.yaml").write_text(
            "defaults: [_command, _base, _self_]\n"
            f"name: {name}\n"
            'description: "paper_grid bench: sleeps, submits the base model, exits"\n'
            "adapter: autorl.agents.command:CommandAgent\n"
            "needs_driver: false\n"
            "in_grid: false\n"
            "command: ['{python}', '-I', '{home}/paper_grid_agent.py', "
            f"'{low_s}', '{high_s}']\n"
            f"files: ['{agent_file}']\n"
        )
    return plugin


@dataclass
class Sample:
    """One memory sample while the sweep runs."""

    t: float
    finished: int
    running: int
    sweep_rss: int
    recorder_rss: int
    cells_rss: int
    total_rss: int


class Monitor:
    """Samples memory every ``every_s`` seconds on a thread: this process, the Recorder actor, each
    Workspace actor with everything under it, and every process under the cluster's raylets."""

    def __init__(self, cluster: Cluster, db: Path, every_s: float = 2.0) -> None:
        self.cluster, self.db, self.every_s = cluster, db, every_s
        self.samples: list[Sample] = []
        self.per_cell: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._me = psutil.Process()

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _finished(self) -> int:
        if not self.db.exists():
            return 0
        try:
            with sqlite3.connect(f"{self.db.as_uri()}?mode=ro", uri=True, timeout=5) as conn:
                row = conn.execute(
                    "SELECT COUNT(*) FROM cells WHERE status IN ('completed', 'failed')"
                ).fetchone()
            return int(row[0])
        except sqlite3.Error:
            return -1

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            with contextlib.suppress(psutil.Error):
                self.samples.append(self._sample())

    def _sample(self) -> Sample:
        nodes = [psutil.Process(node.pid) for node in self.cluster.nodes if node.poll() is None]
        tree: list[psutil.Process] = []
        for node in nodes:
            with contextlib.suppress(psutil.Error):
                tree += node.children(recursive=True)
        recorder_rss = cells_rss = total_rss = running = 0
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                rss = proc.memory_info().rss
                total_rss += rss
                title = " ".join(proc.cmdline())
                if title.startswith("ray::Recorder"):
                    recorder_rss = max(recorder_rss, rss)
                elif title.startswith("ray::Workspace"):
                    cell = rss
                    for child in proc.children(recursive=True):
                        with contextlib.suppress(psutil.Error):
                            cell += child.memory_info().rss
                    running += 1
                    cells_rss += cell
                    self.per_cell.append(cell)
        return Sample(
            time.time(),
            self._finished(),
            running,
            self._me.memory_info().rss,
            recorder_rss,
            cells_rss,
            total_rss,
        )


@contextlib.contextmanager
def timed_report(times: list[float]) -> Iterator[None]:
    """Time every :func:`autorl.report.build.build_report` call (the sweep's end makes one)."""
    import autorl.report.build as build

    original = build.build_report

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            times.append(time.perf_counter() - started)

    build.build_report = wrapped  # type: ignore[assignment]
    try:
        yield
    finally:
        build.build_report = original  # type: ignore[assignment]


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) by linear interpolation."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def agent_span(sweep_dir: Path, cell_id: str) -> float | None:
    """The agent's own run, from its workspace's ``run_meta.json`` (start to end)."""
    meta = sweep_dir / "cells" / cell_id / "workspace" / "run_meta.json"
    try:
        data = json.loads(meta.read_text())
        return float(data["end_time"]) - float(data["start_time"])
    except (OSError, KeyError, TypeError, ValueError):
        return None


def timeline_figures(sweep_dir: Path, gpus_per_cell: float, gpus: int) -> dict[str, Any]:
    """Overhead, makespan, packing bounds and GPU idle time from the record store's attempts."""
    with sqlite3.connect(sweep_dir / "records.sqlite") as conn:
        attempts = conn.execute(
            "SELECT a.cell_id, a.started_at, a.finished_at, c.status FROM cell_attempts a "
            "JOIN cells c ON c.cell_id = a.cell_id AND c.attempts = a.attempt "
            "WHERE a.started_at IS NOT NULL AND a.finished_at IS NOT NULL"
        ).fetchall()
        queue_wait = dict(
            conn.execute(
                "SELECT cell_id, SUM(COALESCE(queue_wait_s, 0)) FROM submissions GROUP BY cell_id"
            ).fetchall()
        )
    held, overheads, agents, waits = [], [], [], []
    for cell_id, started, finished, _status in attempts:
        span = agent_span(sweep_dir, cell_id)
        held.append((started, finished))
        if span is not None:
            agents.append(span)
            overheads.append(finished - started - span)
            waits.append(float(queue_wait.get(cell_id) or 0.0))
    if not held:
        return {"cells_timed": 0}
    start = min(s for s, _ in held)
    end = max(f for _, f in held)
    last_start = max(s for s, _ in held)
    makespan = end - start
    held_gpu_s = sum(f - s for s, f in held) * gpus_per_cell
    agent_gpu_s = sum(agents) * gpus_per_cell
    # GPUs idle while some cell had not yet started: from the first start to the last, capacity
    # minus what the running cells held.
    events = sorted([(s, gpus_per_cell) for s, _ in held] + [(f, -gpus_per_cell) for _, f in held])
    idle = 0.0
    busy, now = 0.0, start
    for t, delta in events:
        if t > last_start:
            break
        idle += (gpus - busy) * (t - now)
        busy, now = busy + delta, t
    return {
        "cells_timed": len(overheads),
        "overhead_median_s": statistics.median(overheads) if overheads else None,
        "overhead_p95_s": percentile(overheads, 0.95),
        "agent_median_s": statistics.median(agents) if agents else None,
        "submission_queue_wait_median_s": statistics.median(waits) if waits else None,
        "makespan_s": makespan,
        "packing_bound_held_s": held_gpu_s / gpus,
        "packing_bound_agent_s": agent_gpu_s / gpus,
        "makespan_over_held_bound": makespan / (held_gpu_s / gpus),
        "makespan_over_agent_bound": makespan / (agent_gpu_s / gpus) if agent_gpu_s else None,
        "gpu_idle_while_waiting_gpu_s": idle,
        "gpu_idle_while_waiting_fraction": idle / (gpus * (last_start - start))
        if last_start > start
        else 0.0,
    }


def time_viewer(sweep_dir: Path) -> tuple[float, int, int]:
    """``GET /`` of the live viewer on the sweep folder, in-process: (seconds, status, bytes)."""
    from fastapi.testclient import TestClient

    from autorl.view.app import create_app

    client = TestClient(create_app(sweep_dir), base_url="http://127.0.0.1:8765")
    started = time.perf_counter()
    response = client.get("/")
    return time.perf_counter() - started, response.status_code, len(response.content)


def viewer_figures(sweep_dir: Path) -> dict[str, Any]:
    """:func:`time_viewer` as figures."""
    seconds, status, size = time_viewer(sweep_dir)
    return {"viewer_get_s": seconds, "viewer_status": status, "viewer_bytes": size}


def measured(figures: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``figures()``, or the error that stopped it: one failed figure must not lose the others."""
    try:
        return figures()
    except Exception as error:  # noqa: BLE001 - reported with the figures
        print(f"figure failed: {type(error).__name__}: {error}", flush=True)
        return {}


def main() -> int:
    """Run the benchmark; exit 0 when every cell completed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, default=30, help="agent × driver labels (of 30)")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8, help="scheduler.max_concurrent_cells")
    parser.add_argument("--gpus-per-cell", type=int, default=GPUS_PER_NODE)
    parser.add_argument("--hours-min", type=float, default=4.0)
    parser.add_argument("--hours-max", type=float, default=12.0)
    parser.add_argument("--seconds-per-hour", type=float, default=1.5)
    parser.add_argument("--root", type=Path, help="working folder (default: a new one in /tmp)")
    parser.add_argument("--cache-dir", type=Path, help="AUTORL_CACHE_DIR (default: the usual)")
    parser.add_argument("--keep", action="store_true", help="keep --root afterwards")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()

    root = args.root or Path(tempfile.mkdtemp(prefix="paper-grid-", dir="/tmp"))
    root.mkdir(parents=True, exist_ok=True)
    pairs = grid_pairs()[: args.labels]
    labels = [label(a, d) for a, d in pairs]
    low_s, high_s = args.hours_min * args.seconds_per_hour, args.hours_max * args.seconds_per_hour
    plugin = write_plugin(root, labels, low_s, high_s)
    bin_dir, dev = fake_gpus(root / "gpus")
    token = root / "auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    env = dict(os.environ) | {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "AUTORL_GPU_DEV_DIR": str(dev),
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token),
        "RAY_USAGE_STATS_ENABLED": "0",
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
    }
    if args.cache_dir:
        env["AUTORL_CACHE_DIR"] = str(args.cache_dir)
    os.environ.update(env)  # this process is the sweep's driver: same auth, GPUs and cache

    tasks = args.tasks.split(",")
    cells = len(labels) * len(tasks) * args.seeds
    print(
        f"{cells} cells = {len(labels)} labels × {len(tasks)} tasks × {args.seeds} seeds; agent "
        f"{low_s:.1f}-{high_s:.1f} s (uniform {args.hours_min:g}-{args.hours_max:g} simulated h "
        f"at {args.seconds_per_hour:g} s/h); {args.gpus_per_cell} GPUs per cell, "
        f"{args.concurrency} at a time, on {NODES} nodes × {GPUS_PER_NODE} GPUs; root {root}",
        flush=True,
    )
    # A stop (SIGTERM, or Ctrl-C) ends the sweep as the sweep command's does, and the finally
    # below stops the nodes.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cluster = Cluster(f"127.0.0.1:{free_port()}", token)
    figures: dict[str, Any] = {"cells_planned": cells}
    report_times: list[float] = []
    try:
        start_cluster(cluster, root, env)
        from autorl.config import plan_sweep
        from autorl.scheduler import run_sweep

        wait_for(
            lambda: gcs_up(cluster.address, env) and alive_nodes(cluster, env) >= NODES,
            180,
            "not every node joined",
        )
        argv = [
            f"agent={','.join(labels)}",
            "driver=none",
            f"task={','.join(tasks)}",
            f"seed={','.join(str(s) for s in range(args.seeds))}",
            "model=tiny",
            f"plugins=[{plugin}]",
            f"out_dir={root / 'out'}",
            f"sweep_id={SWEEP_ID}",
            f"cluster.address={cluster.address}",
            f"cluster.auth_token_path={token}",
            f"cell.gpus={args.gpus_per_cell}",
            "cell.cpus=1",
            f"scheduler.max_concurrent_cells={args.concurrency}",
            f"budget.seconds={high_s + 300:.0f}",
            "budget.kill_grace_s=2",
            "tracking.wandb.enabled=true",
            "tracking.wandb.mode=offline",
            "tracking.report.enabled=true",
        ]
        started = time.perf_counter()
        plan = plan_sweep(argv)
        figures["planning_s"] = time.perf_counter() - started
        print(f"planned {len(plan.cells)} cells in {figures['planning_s']:.1f} s", flush=True)
        db = plan.sweep_dir / "records.sqlite"
        started = time.perf_counter()
        with Monitor(cluster, db) as monitor, timed_report(report_times):
            statuses, _ = run_sweep(plan)
        figures["sweep_wall_s"] = time.perf_counter() - started
        figures["cells_completed"] = sum(s == "completed" for s in statuses.values())
        figures["report_build_s"] = report_times[-1] if report_times else None
        (root / "samples.json").write_text(json.dumps([vars(s) for s in monitor.samples]))
        figures["record_store_mib"] = (
            sum(p.stat().st_size for p in plan.sweep_dir.glob("records.sqlite*")) / 2**20
        )
        figures |= measured(
            lambda: timeline_figures(plan.sweep_dir, args.gpus_per_cell, NODES * GPUS_PER_NODE)
        )
        figures |= measured(lambda: memory_figures(monitor))
        figures |= measured(lambda: viewer_figures(plan.sweep_dir))
    finally:
        stop_cluster(cluster)
        for temp_dir in cluster.temp_dirs:
            shutil.rmtree(temp_dir, ignore_errors=True)
    print_figures(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if figures.get("cells_completed") == cells else 1


def memory_figures(monitor: Monitor) -> dict[str, Any]:
    """Peaks and the sweep's RSS early vs late, from the monitor's samples."""
    samples = [s for s in monitor.samples if s.finished >= 0]
    if not samples:
        return {}
    mib = 2**20
    done = max(s.finished for s in samples)
    early = [s.sweep_rss for s in samples if s.finished <= max(1, done // 10)]
    late = [s.sweep_rss for s in samples if s.finished >= done - max(1, done // 10)]
    return {
        "sweep_rss_peak_mib": max(s.sweep_rss for s in samples) / mib,
        "sweep_rss_first_tenth_mib": statistics.median(early) / mib if early else None,
        "sweep_rss_last_tenth_mib": statistics.median(late) / mib if late else None,
        "sweep_rss_by_finished": [
            (s.finished, round(s.sweep_rss / mib)) for s in samples[:: max(1, len(samples) // 12)]
        ],
        "recorder_rss_peak_mib": max(s.recorder_rss for s in samples) / mib,
        "recorder_rss_first_mib": next((s.recorder_rss for s in samples if s.recorder_rss), 0)
        / mib,
        "recorder_rss_last_mib": samples[-1].recorder_rss / mib,
        "cell_rss_median_mib": statistics.median(monitor.per_cell) / mib
        if monitor.per_cell
        else None,
        "cell_rss_p95_mib": percentile([float(c) for c in monitor.per_cell], 0.95) / mib,
        "running_cells_max": max(s.running for s in samples),
        "cluster_rss_peak_mib": max(s.total_rss for s in samples) / mib,
    }


def print_figures(f: dict[str, Any]) -> None:
    """The figures, one per line, with the issue's targets where it sets one."""

    def num(key: str, fmt: str = ".2f") -> str:
        value = f.get(key)
        return "-" if value is None else format(value, fmt)

    print("\n== paper_grid figures ==")
    print(f"cells: {f.get('cells_completed', 0)} completed of {f['cells_planned']}")
    print(f"planning: {num('planning_s', '.1f')} s (target <= 10 s)")
    print(
        f"per-cell overhead (held - agent run): median {num('overhead_median_s')} s "
        f"(target <= 1 s), p95 {num('overhead_p95_s')} s; agent run median "
        f"{num('agent_median_s')} s, submission queue wait median "
        f"{num('submission_queue_wait_median_s')} s"
    )
    print(
        f"makespan {num('makespan_s', '.0f')} s; packing bound "
        f"{num('packing_bound_agent_s', '.0f')} s from the agents' runs "
        f"({num('makespan_over_agent_bound', '.3f')}x), "
        f"{num('packing_bound_held_s', '.0f')} s from what cells held "
        f"({num('makespan_over_held_bound', '.3f')}x) (target <= 1.10x)"
    )
    print(
        f"GPU idle while cells wait: {num('gpu_idle_while_waiting_gpu_s', '.0f')} GPU-s "
        f"({num('gpu_idle_while_waiting_fraction', '.1%')} of capacity until the last start)"
    )
    print(
        f"sweep process RSS: peak {num('sweep_rss_peak_mib', '.0f')} MiB; first tenth of cells "
        f"{num('sweep_rss_first_tenth_mib', '.0f')} MiB, last tenth "
        f"{num('sweep_rss_last_tenth_mib', '.0f')} MiB (target: flat)"
    )
    print(f"  (finished cells, MiB): {f.get('sweep_rss_by_finished')}")
    print(
        f"Recorder RSS: peak {num('recorder_rss_peak_mib', '.0f')} MiB (first "
        f"{num('recorder_rss_first_mib', '.0f')}, last {num('recorder_rss_last_mib', '.0f')})"
    )
    print(
        f"per running cell (Workspace actor + sandbox + agent): median "
        f"{num('cell_rss_median_mib', '.0f')} MiB, p95 {num('cell_rss_p95_mib', '.0f')} MiB; "
        f"{f.get('running_cells_max', '-')} at most at once; whole cluster peak "
        f"{num('cluster_rss_peak_mib', '.0f')} MiB"
    )
    print(f"record store: {num('record_store_mib', '.1f')} MiB")
    print(f"report build: {num('report_build_s', '.1f')} s (target <= 60 s)")
    print(
        f"viewer GET /: {num('viewer_get_s', '.2f')} s, HTTP {f.get('viewer_status', '-')}, "
        f"{f.get('viewer_bytes', '-')} bytes (issue #45 target <= 3 s)"
    )
    print(f"sweep wall: {num('sweep_wall_s', '.0f')} s")


if __name__ == "__main__":
    sys.exit(main())
