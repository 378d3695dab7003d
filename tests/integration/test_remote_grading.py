"""Submissions that travel between nodes: the cell on one Ray node, the grader on another that
cannot see the cell's folder.

Two Ray nodes on this machine: the head (this test process is the cell side, as a Workspace actor
would be) and a grader node started with ``ray start`` inside its own mount namespace (``unshare
--mount``), with a private tmpfs mounted over the sweep's folder. The GraderPool pins its grader
there (``grader.resources``). The cell side scores through the Workspace's own scorer
(:func:`autorl.actors.cell_sinks.pool_scorer`), so submissions and the base reach the grader as
:class:`ModelRef` objects and are streamed through Ray (or read from ``storage.root``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from autorl.actors.cell_sinks import pool_scorer
from autorl.actors.grader_pool import GraderPool
from autorl.actors.model_source import this_node
from autorl.actors.recorder import Recorder
from autorl.grading.model_checks import check_loadable_model, weights_hash
from autorl.grading.scoring import EvalTarget, score_model
from autorl.grading.transfer import DigestCache, ModelPublisher, manifest_of
from autorl.schema import GraderConfig
from tests.helpers.procs import free_port, processes_mentioning

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None,
        reason="needs root and unshare(1) to start a node in its own mount namespace",
    ),
]
TARGET = EvalTarget(
    "gsm8k",
    1,
    "fixture",
    0,
    {"train_size": 20, "eval_size": 16},
    {"num_shots": 0, "max_new_tokens": 8},
)
GRADER_NODE = "grader_node"


@dataclass
class TwoNodes:
    """The cluster: the sweep folder the grader node cannot see, and the grader node's id."""

    sweep: Path
    grader_node: str


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[TwoNodes]:
    """Head = the cell's node (this process); a second node, in its own mount namespace, for the
    grader."""
    head_tmp = Path(tempfile.mkdtemp(prefix="arrh-", dir="/tmp"))
    node_tmp = Path(tempfile.mkdtemp(prefix="arrg-", dir="/tmp"))
    sweep = Path(tempfile.mkdtemp(prefix="autorl-sweep-", dir="/tmp"))
    node = None
    ray.init(
        address="local",
        num_cpus=1,
        include_dashboard=False,
        _temp_dir=str(head_tmp),
        log_to_driver=False,
    )
    try:
        ray_cli = Path(sys.executable).parent / "ray"
        # The node's view of the sweep folder is an empty tmpfs of its own (private propagation:
        # this mount never reaches the head's namespace); everything else (venv, caches) it sees as
        # the head does.
        script = (
            f"mount -t tmpfs -o size=1m autorl-private {sweep} && exec {ray_cli} start --block "
            f"--address={ray.get_runtime_context().gcs_address} --num-cpus=1 --num-gpus=0 "
            f"--resources='{json.dumps({GRADER_NODE: 1})}' --temp-dir={node_tmp} "
            "--disable-usage-stats "
            f"--dashboard-agent-listen-port={free_port()}"
        )
        node = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            env=dict(os.environ)
            | {"RAY_USAGE_STATS_ENABLED": "0"},  # RAY_AUTH_MODE=token is set by ray.init
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while not (
            ids := [
                n["NodeID"] for n in ray.nodes() if n["Alive"] and GRADER_NODE in n["Resources"]
            ]
        ):
            assert node.poll() is None, (
                "the grader node did not start: "
                f"{node.stdout.read().decode() if node.stdout else ''}"
            )
            assert time.monotonic() < deadline, "the grader node did not join within 120 s"
            time.sleep(0.5)
        yield TwoNodes(sweep, ids[0])
    finally:
        if node is not None:  # the node first: with the head gone, its shutdown waits for the GCS
            os.killpg(node.pid, signal.SIGTERM)
            try:
                node.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait(10)
            for pid in processes_mentioning(
                str(node_tmp)
            ):  # anything of that node that left the group
                os.kill(pid, signal.SIGKILL)
        ray.shutdown()
        for folder in (head_tmp, node_tmp, sweep):
            shutil.rmtree(folder, ignore_errors=True)


def on_node(node_id: str, fn, *args):  # type: ignore[no-untyped-def]
    """Run ``fn(*args)`` on that node (the grader holds the node's whole custom resource, so by node
    id)."""
    strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
    return ray.get(ray.remote(fn).options(num_cpus=0, scheduling_strategy=strategy).remote(*args))


def perturbed(tiny: Path, dest: Path) -> Path:
    """A copy of the tiny model with one weight changed: a submission that is not the base."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(tiny, dest)
    tensors = load_file(dest / "model.safetensors")
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 0.01
    save_file(tensors, dest / "model.safetensors", metadata={"format": "pt"})
    return dest


def cached_models(nodes: TwoNodes, cache: Path) -> list[str]:
    """What the grader's download cache holds (digests), read on the grader's node."""
    return on_node(nodes.grader_node, lambda root: DigestCache(Path(root)).keys(), str(cache))  # type: ignore[no-any-return]


def test_a_grader_on_another_node_scores_what_it_cannot_see(
    two_nodes: TwoNodes, tiny_model_dir: Path, cache_dir: Path, tmp_path: Path
) -> None:
    started = time.monotonic()
    cell = two_nodes.sweep / "cells" / "c1"
    base = shutil.copytree(tiny_model_dir, cell / "base")
    submission = perturbed(tiny_model_dir, cell / "grader_copies" / "1")
    # The proof of the setup: the grader's node sees the cache, not the cell's folder.
    grader_node = two_nodes.grader_node
    assert on_node(grader_node, os.path.exists, str(submission)) is False
    assert on_node(grader_node, os.path.exists, str(base)) is False
    assert on_node(grader_node, os.path.exists, str(cache_dir)) is True
    assert on_node(grader_node, this_node) == grader_node != this_node()

    # The session's cache may hold a base another test's grader fetched: count this test's downloads
    # from nothing.
    shutil.rmtree(cache_dir / "transfer", ignore_errors=True)
    recorder = ray.remote(Recorder).options(num_cpus=0).remote(str(tmp_path / "r.sqlite"))
    grader_cfg = GraderConfig(
        replicas=1, cpus=1, gpus=0, batch_size=16, max_queued_per_cell=4, resources={GRADER_NODE: 1}
    )
    pool = ray.remote(GraderPool).options(num_cpus=0).remote(grader_cfg, str(cache_dir), recorder)
    (grader,) = ray.get(pool.graders.remote())
    assert ray.get(grader.ping.remote())
    transfer_cache = cache_dir / "transfer"

    # Streamed through Ray (storage.root: null), as a Workspace actor does it.
    publisher = ModelPublisher(this_node(), None)
    base_hash = weights_hash(check_loadable_model(base))
    base_ref = publisher.base(base, base_hash)
    baseline = ray.get(pool.baseline.remote(TARGET, base_ref, base_hash))
    scorer = pool_scorer(pool, TARGET, publisher, base_ref)
    digest = weights_hash(check_loadable_model(submission))
    outcome, cached = scorer(submission, digest)
    same_node = score_model(
        TARGET, submission, cache_dir, batch_size=16
    )  # what a grader beside the cell scores
    assert outcome.error is None and not cached
    assert (outcome.score, outcome.num_examples, outcome.details) == (
        same_node.score,
        16,
        same_node.details,
    )
    assert baseline is not None
    stats = ray.get(grader.transfer_stats.remote())
    assert (
        stats["downloads"] == 2 and stats["direct"] == 0
    )  # the base once (reused for the submission), the submission
    assert stats["bytes_downloaded"] == manifest_of(base).size + manifest_of(submission).size
    assert cached_models(two_nodes, transfer_cache) == [
        manifest_of(base).digest
    ]  # the submission's copy is gone, the base kept

    # The same weights submitted again (another snapshot folder): deduplicated, nothing downloaded.
    again = shutil.copytree(submission, cell / "grader_copies" / "2")
    second, cached = scorer(again, digest)
    assert cached and second.score == outcome.score
    assert ray.get(grader.transfer_stats.remote())["downloads"] == 2

    # storage.root: a folder both nodes mount; the grader reads the copies there (hashes checked),
    # downloads nothing.
    root = tmp_path / "shared-storage"
    shared = ModelPublisher(this_node(), str(root))
    shared_base = shared.base(base, base_hash)
    assert shared_base.node_id is None and Path(shared_base.path).parent == root / "models"
    shared_scorer = pool_scorer(pool, TARGET, shared, shared_base)
    third, cached = shared_scorer(
        submission, digest + "-uncached"
    )  # another cache key, so it is scored again
    assert (
        not cached
        and third.error is None
        and (third.score, third.details) == (same_node.score, same_node.details)
    )
    stats = ray.get(grader.transfer_stats.remote())
    assert stats["downloads"] == 2 and stats["direct"] == 2
    assert DigestCache(root / "submissions").keys() == [] and DigestCache(
        root / "models"
    ).keys() == [manifest_of(base).digest]
    assert cached_models(two_nodes, transfer_cache) == [manifest_of(base).digest]
    print(f"remote grading test body: {time.monotonic() - started:.1f} s")
