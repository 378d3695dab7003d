"""Every Ray dashboard metric of autorl, defined in this one place (docs/design.md#architecture).

Metrics go through ``ray.util.metrics`` and reach the Ray dashboard / Prometheus with Ray's
``ray_`` prefix (counters also get ``_total``). Tag keys are only ``agent``, ``driver`` and
``task`` (bounded cardinality: never cell ids); the grader-side metrics know only the task, and the
graders' busy fraction is tagged with the grader's slot in the pool (``grader``: ``0`` up to
``grader.replicas - 1``).

Each metric, its kind and tag keys, and what it counts:

- ``autorl_cells_<state>`` (gauge; agent, driver, task): cells in that state (pending, running,
  ...);
- ``autorl_submissions`` (counter; agent, driver, task): submissions that reached a final status;
- ``autorl_submissions_<status>`` (counter; agent, driver, task): ... of that status (scored,
  invalid, ...);
- ``autorl_grading_latency_s`` (histogram; task): seconds one scoring request took;
- ``autorl_grader_queue_depth`` (gauge): requests being scored or waiting;
- ``autorl_grader_busy_fraction`` (gauge; grader): busy time / time the queue was non-empty;
- ``autorl_gpu_memory_used_bytes`` (gauge): GPU memory in use on the grader's node;
- ``autorl_gpu_utilization_percent`` (gauge): GPU utilisation on the grader's node.

One state per metric name (rather than a ``state`` tag) keeps the tag keys to agent/driver/task.
Emitting never raises: a metrics failure is logged and the caller's work goes on. Ray is
imported on first use only.

Ray 2.60 drops a gauge from its Prometheus endpoint 20-30 s after the last ``set()`` (seen
here: the agent keeps a gauge for two report intervals unless the worker reports it again), so
a background thread in each emitting process re-sets the live gauges every half report interval;
otherwise ``autorl_cells_running`` would vanish from the dashboard while cells run.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

from autorl.records.types import CELL_STATUSES

logger = logging.getLogger(__name__)

CELL_TAGS = ("agent", "driver", "task")
GRADER_TAGS = ("task",)
BUSY_TAGS = ("grader",)
FINAL_SUBMISSION_STATUSES = ("scored", "invalid", "duplicate", "copy_of_base")
LATENCY_BOUNDARIES_S = [0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200]

_lock = threading.Lock()
_metrics: dict[str, Any] = {}
_gauge_values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
_refresher: threading.Thread | None = None


def metric_names() -> list[str]:
    """Names of every metric this module defines (as given to Ray, before its ``ray_`` prefix).

    >>> "autorl_cells_running" in metric_names() and "autorl_grader_queue_depth" in metric_names()
    True
    """
    return (
        [f"autorl_cells_{s}" for s in CELL_STATUSES]
        + ["autorl_submissions"]
        + [f"autorl_submissions_{s}" for s in FINAL_SUBMISSION_STATUSES]
        + [
            "autorl_grading_latency_s",
            "autorl_grader_queue_depth",
            "autorl_grader_busy_fraction",
            "autorl_gpu_memory_used_bytes",
            "autorl_gpu_utilization_percent",
        ]
    )


def _define(name: str) -> Any:
    from ray.util.metrics import Counter, Gauge, Histogram

    if name.startswith("autorl_cells_"):
        return Gauge(
            name, f"cells in state {name.removeprefix('autorl_cells_')}", tag_keys=CELL_TAGS
        )
    if name == "autorl_submissions":
        return Counter(name, "submissions that reached a final status", tag_keys=CELL_TAGS)
    if name.startswith("autorl_submissions_"):
        return Counter(
            name,
            f"submissions with status {name.removeprefix('autorl_submissions_')}",
            tag_keys=CELL_TAGS,
        )
    if name == "autorl_grading_latency_s":
        return Histogram(
            name,
            "seconds one scoring request took on a grader",
            LATENCY_BOUNDARIES_S,
            tag_keys=GRADER_TAGS,
        )
    if name == "autorl_grader_queue_depth":
        return Gauge(name, "scoring requests being scored or waiting for a grader")
    if name == "autorl_grader_busy_fraction":
        return Gauge(
            name,
            "each grader's busy time over the time the grader queue was non-empty (since the sweep "
            "started)",
            tag_keys=BUSY_TAGS,
        )
    if name == "autorl_gpu_memory_used_bytes":
        return Gauge(name, "GPU memory in use (all visible GPUs of the grader pool's node)")
    if name == "autorl_gpu_utilization_percent":
        return Gauge(name, "mean GPU utilisation (all visible GPUs of the grader pool's node)")
    raise KeyError(f"unknown autorl metric {name!r}; defined: {', '.join(metric_names())}")


def _get(name: str) -> Any:
    with _lock:
        if name not in _metrics:
            _metrics[name] = _define(name)
        return _metrics[name]


def _set_gauge(name: str, value: float, tags: dict[str, str] | None = None) -> None:
    """Set a gauge and keep it alive (see the module docstring)."""
    global _refresher
    _get(name).set(value, tags=tags or None)
    with _lock:
        _gauge_values[(name, tuple(sorted((tags or {}).items())))] = value
        if _refresher is None:
            _refresher = threading.Thread(target=_refresh_gauges, name="autorl-gauges", daemon=True)
            _refresher.start()


def gauge_refresh_s() -> float:
    """Half of Ray's metrics report interval (``metrics_report_interval_ms``, 10 s by default)."""
    try:
        import ray

        interval_ms: float = ray._config.metrics_report_interval_ms()
        return max(0.5, interval_ms / 2000)
    except Exception:  # noqa: BLE001 - a private Ray API; fall back to half the default interval
        return 5.0


def _refresh_gauges() -> None:
    period = gauge_refresh_s()
    while True:
        time.sleep(period)
        with _lock:
            values = list(_gauge_values.items())
        for (name, tags), value in values:
            _safe(name, lambda n=name, v=value, t=dict(tags): _get(n).set(v, tags=t or None))


def _tags(source: Any, keys: Iterable[str]) -> dict[str, str]:
    return {k: str(getattr(source, k) if not isinstance(source, dict) else source[k]) for k in keys}


def _safe(what: str, fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except Exception as error:  # noqa: BLE001 - dashboard metrics must never break recording or grading
        logger.warning("dashboard metric %s not exported: %s", what, error)


def set_cell_counts(cells: Iterable[Any]) -> None:
    """Set ``autorl_cells_<state>`` for every (agent, driver, task) of ``cells``.

    Args:
        cells: Every cell of the sweep (objects or dicts with agent, driver, task, status); states
            with no cell in a group are set to 0 so a finished state does not linger.
    """

    def run() -> None:
        counts: dict[tuple[str, ...], dict[str, int]] = {}
        for cell in cells:
            key = tuple(_tags(cell, CELL_TAGS).values())
            status = cell["status"] if isinstance(cell, dict) else cell.status
            counts.setdefault(key, dict.fromkeys(CELL_STATUSES, 0))[status] += 1
        for key, by_state in counts.items():
            tags = dict(zip(CELL_TAGS, key, strict=True))
            for state, n in by_state.items():
                _set_gauge(f"autorl_cells_{state}", n, tags)

    _safe("autorl_cells_*", run)


def count_submission(cell: Any, status: str) -> None:
    """Count one submission that reached the final ``status`` (call once per submission)."""
    if status not in FINAL_SUBMISSION_STATUSES:
        return

    def run() -> None:
        tags = _tags(cell, CELL_TAGS)
        _get("autorl_submissions").inc(1, tags=tags)
        _get(f"autorl_submissions_{status}").inc(1, tags=tags)

    _safe("autorl_submissions", run)


def observe_grading(task: str, seconds: float) -> None:
    """Record one scoring request's latency."""
    _safe(
        "autorl_grading_latency_s",
        lambda: _get("autorl_grading_latency_s").observe(seconds, tags={"task": task}),
    )


def set_queue_depth(depth: int) -> None:
    """Set the grader pool's current queue depth."""
    _safe("autorl_grader_queue_depth", lambda: _set_gauge("autorl_grader_queue_depth", depth))


def set_grader_busy(fractions: list[float | None]) -> None:
    """Set ``autorl_grader_busy_fraction`` of each grader slot (see :mod:`autorl.tracking.busy`);
    a grader whose queue was never non-empty has no value yet."""

    def run() -> None:
        for index, fraction in enumerate(fractions):
            if fraction is not None:
                _set_gauge("autorl_grader_busy_fraction", fraction, {"grader": str(index)})

    _safe("autorl_grader_busy_fraction", run)


def gpu_use() -> tuple[float, float] | None:
    """(memory used in bytes, mean utilisation %) over the visible GPUs, or None without a GPU.

    Reads ``torch.cuda`` (NVML-backed queries that create no CUDA context). The device nodes are
    checked first, so a CPU-only node never pays for importing torch.
    """
    if not os.path.exists("/dev/nvidiactl") and not os.path.exists("/dev/kfd"):
        return None
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        devices = range(torch.cuda.device_count())
        used = float(sum(torch.cuda.device_memory_used(d) for d in devices))
        util = [float(torch.cuda.utilization(d)) for d in devices]
        return used, sum(util) / len(util) if util else 0.0
    except Exception as error:  # noqa: BLE001 - e.g. NVML bindings (pynvml) missing
        logger.info("GPU use not exported: %s", error)
        return None


def export_gpu_use() -> None:
    """Set the GPU gauges from :func:`gpu_use`; nothing is exported on a node without GPUs."""
    use = gpu_use()
    if use is None:
        return

    def run() -> None:
        _set_gauge("autorl_gpu_memory_used_bytes", use[0])
        _set_gauge("autorl_gpu_utilization_percent", use[1])

    _safe("autorl_gpu_*", run)


def grading_done(task: str, seconds: float, queue_depth: int) -> None:
    """After one scoring request: its latency, the new queue depth and the node's GPU use."""
    observe_grading(task, seconds)
    set_queue_depth(queue_depth)
    export_gpu_use()
