"""A multi-node Ray cluster on this machine for the fault, node-loss, transfer and termination
tests.

By default a head whose single CPU and ``grader_slot`` hold the grader (so only cells run on the
workers) and one-CPU worker nodes for cells. Node death is detected after ~2 s instead of Ray's
~15 s (health checks every 0.5 s). The cluster runs without token auth: a sweep joins it with
``cluster.auth_mode=disabled``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

FAST_HEALTH = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 3,
}


@contextmanager
def local_cluster(
    workers: int = 2,
    head_cpus: int = 1,
    head_resources: dict[str, float] | None = None,
    fast_health: bool = True,
) -> Iterator[Any]:
    """A head (``head_cpus``; ``head_resources``, by default ``grader_slot``) and ``workers``
    one-CPU nodes, with their own temp dir and ``RAY_TMPDIR``; shut down afterwards."""
    from ray.cluster_utils import Cluster

    temp_dir = tempfile.mkdtemp(prefix="arf-", dir="/tmp")
    started = time.monotonic()
    with pytest.MonkeyPatch.context() as patch:
        # Cluster writes the head's address to $RAY_TMPDIR/ray/ray_current_cluster (default
        # /tmp/ray/...), which other Ray users on the machine read and which a fresh machine does
        # not have: use our own.
        patch.setenv("RAY_TMPDIR", temp_dir)
        os.makedirs(os.path.join(temp_dir, "ray"))
        head: dict[str, Any] = {
            "num_cpus": head_cpus,
            "resources": {"grader_slot": 1} if head_resources is None else head_resources,
            "include_dashboard": False,
            "temp_dir": temp_dir,
        }
        if fast_health:
            head["_system_config"] = FAST_HEALTH
        cluster = Cluster(initialize_head=True, head_node_args=head)
        try:
            for _ in range(workers):
                cluster.add_node(num_cpus=1, temp_dir=temp_dir)
            cluster.wait_for_nodes()
            took = time.monotonic() - started
            print(f"cluster of {workers + 1} nodes up in {took:.1f} s", file=sys.stderr)
            yield cluster
        finally:
            cluster.shutdown()
            shutil.rmtree(temp_dir, ignore_errors=True)
