"""Ray dashboard metrics: the real Recorder and GraderPool emit them; Ray's Prometheus endpoint
serves them."""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import pytest
import ray

from autorl.actors.grader_pool import GraderPool
from autorl.actors.recorder import Recorder
from autorl.grading.model_checks import check_loadable_model, weights_hash
from autorl.grading.scoring import EvalTarget
from autorl.records.types import CellRecord, SubmissionRecord
from autorl.schema import GraderConfig
from autorl.tracking.metrics import metric_names
from tests.helpers.procs import free_port

pytestmark = pytest.mark.integration
TARGET = EvalTarget(
    "gsm8k",
    1,
    "fixture",
    0,
    {"train_size": 20, "eval_size": 8},
    {"num_shots": 0, "max_new_tokens": 4},
)
TAGS = 'agent="scripted",driver="none",task="gsm8k"'


def _value(text: str, name: str, labels: str = "") -> float | None:
    pattern = rf"^{re.escape(name)}\{{([^}}]*)\}} ([-+0-9.eE]+|NaN)$"
    for match in re.finditer(pattern, text, re.MULTILINE):
        if all(part in match.group(1) for part in labels.split(",") if part):
            return float(match.group(2))
    return None


def test_recorder_and_grader_pool_export_dashboard_metrics(
    tmp_path: Path, ray_tmp: Path, cache_dir: Path, tiny_model_dir: Path
) -> None:
    port = free_port()
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        _temp_dir=str(ray_tmp),
        log_to_driver=False,
        # Report every second, so that the gauge refresher below runs often.
        _metrics_export_port=port,
        _system_config={"metrics_report_interval_ms": 1000},
    )
    try:
        recorder = ray.remote(Recorder).options(num_cpus=0).remote(str(tmp_path / "records.sqlite"))
        grader_cfg = GraderConfig(replicas=1, cpus=1, gpus=0, batch_size=8, max_queued_per_cell=4)
        pool = (
            ray.remote(GraderPool).options(num_cpus=0).remote(grader_cfg, str(cache_dir), recorder)
        )
        for seed in (0, 1):
            cell = CellRecord(
                "sw",
                f"c{seed}",
                "scripted",
                "none",
                "gsm8k",
                1,
                "tiny",
                seed,
                60,
                "pending",
                attempts=1,
            )
            ray.get(recorder.start_attempt.remote(cell))
        ray.get(recorder.set_cell_status.remote("c0", "running", {}))
        ray.get(recorder.set_cell_status.remote("c1", "completed", {}))
        for status in (
            "queued",
            "scoring",
            "scored",
            "scored",
        ):  # a replay of "scored" is counted once
            ray.get(
                recorder.record_submission.remote(
                    SubmissionRecord("c0", 1, "output/v1", status, score=1.0)
                )
            )
        ray.get(
            recorder.record_submission.remote(
                SubmissionRecord("c0", 2, "output/v2", "invalid", error="corrupt")
            )
        )
        last_recorded = time.monotonic()
        digest = weights_hash(check_loadable_model(tiny_model_dir))
        outcome, _ = ray.get(pool.score.remote(TARGET, str(tiny_model_dir), digest))
        assert outcome.error is None

        url = f"http://127.0.0.1:{port}/metrics"
        expected = {
            ("ray_autorl_cells_running", TAGS): 1,
            ("ray_autorl_cells_completed", TAGS): 1,
            ("ray_autorl_cells_pending", TAGS): 0,
            ("ray_autorl_submissions_total", TAGS): 2,
            ("ray_autorl_submissions_scored_total", TAGS): 1,
            ("ray_autorl_submissions_invalid_total", TAGS): 1,
            ("ray_autorl_grading_latency_s_count", 'task="gsm8k"'): 1,
            ("ray_autorl_grader_queue_depth", ""): 0,
            # One request on one grader: it was busy the whole time the queue was non-empty.
            ("ray_autorl_grader_busy_fraction", 'grader="0"'): 1.0,
        }
        # Workers export on an interval, and Ray's agent drops a gauge whose export is late (TTL of
        # two intervals), which happens on a busy machine: poll, keeping the last value seen of
        # each.
        deadline = time.monotonic() + 180
        seen: dict[tuple[str, str], float | None] = dict.fromkeys(expected)
        while seen != expected and time.monotonic() < deadline:
            text = urllib.request.urlopen(url, timeout=10).read().decode()
            for key in expected:
                value = _value(text, *key)
                seen[key] = seen[key] if value is None else value
            time.sleep(1)
        assert seen == expected, "\n".join(line for line in text.splitlines() if "autorl" in line)
        # Long after the Recorder last set its gauges (Ray alone would have dropped them), the
        # emitter's refresher still has them exported.
        time.sleep(
            max(0.0, last_recorded + 30 - time.monotonic())
        )  # seen here: dropped after ~20-30 s
        refreshed = None
        while refreshed is None and time.monotonic() < deadline:
            text = urllib.request.urlopen(url, timeout=10).read().decode()
            refreshed = _value(text, "ray_autorl_cells_running", TAGS)
            time.sleep(0.5)
        assert refreshed == 1, "the cell gauges vanished after the last update"
        # No GPU here: the GPU gauges are not exported rather than faked as 0.
        assert "ray_autorl_gpu_memory_used_bytes" not in text
        exported = {
            m.group(1)
            for m in re.finditer(r"^# TYPE ray_(autorl_\w+?)(?:_total)? ", text, re.MULTILINE)
        }
        assert exported <= set(metric_names())
        for line in text.splitlines():
            if line.startswith("ray_autorl_"):
                # Ray adds its own labels (Component, NodeAddress, ..., otel_scope_*); ours are only
                # these.
                ours = {
                    k
                    for k in re.findall(r'(\w+)="', line)
                    if k[0].islower() and not k.startswith("otel_")
                }
                assert ours <= {"agent", "driver", "task", "grader", "le"}, line
    finally:
        ray.shutdown()
