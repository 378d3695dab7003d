"""GraderPool and Recorder as real Ray actors: caching across cells and replacing a dead grader."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import ray

from autorl.actors.grader_pool import BaselineError, GraderPool
from autorl.actors.recorder import Recorder
from autorl.grading.model_checks import check_loadable_model, weights_hash
from autorl.grading.scoring import EvalTarget
from autorl.schema import GraderConfig
from tests.integration.conftest import query

pytestmark = pytest.mark.integration
TARGET = EvalTarget(
    "gsm8k",
    1,
    "fixture",
    0,
    {"train_size": 20, "eval_size": 16},
    {"num_shots": 0, "max_new_tokens": 8},
)


@pytest.fixture()
def services(tmp_path: Path, ray_tmp: Path, cache_dir: Path) -> Iterator[tuple[object, object]]:
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        _temp_dir=str(ray_tmp),
        log_to_driver=False,
    )
    try:
        recorder = (
            ray.remote(Recorder)
            .options(num_cpus=0, max_restarts=-1, max_task_retries=-1)
            .remote(str(tmp_path / "r.sqlite"))
        )
        grader_cfg = GraderConfig(replicas=1, cpus=1, gpus=0, batch_size=16, max_queued_per_cell=4)
        pool = (
            ray.remote(GraderPool).options(num_cpus=0).remote(grader_cfg, str(cache_dir), recorder)
        )
        yield pool, recorder
    finally:
        ray.shutdown()


def test_scores_are_cached_by_weights_and_dead_graders_are_replaced(
    services, tiny_model_dir: Path, tmp_path: Path
) -> None:
    pool, recorder = services
    digest = weights_hash(check_loadable_model(tiny_model_dir))
    baseline = ray.get(pool.baseline.remote(TARGET, str(tiny_model_dir), digest))
    assert ray.get(recorder.get_baseline.remote("baseline:" + TARGET.cache_key(digest))) == baseline
    assert ray.get(pool.baseline.remote(TARGET, str(tiny_model_dir), digest)) == baseline

    first, cached = ray.get(pool.score.remote(TARGET, str(tiny_model_dir), digest))
    assert not cached and first.error is None and first.num_examples == 16
    # Another cell submitting the same weights from another folder gets the cached score.
    other = shutil.copytree(tiny_model_dir, tmp_path / "other_cell_v1")
    second, cached = ray.get(pool.score.remote(TARGET, str(other), digest))
    assert cached and second.score == first.score

    (grader,) = ray.get(pool.graders.remote())
    ray.kill(grader, no_restart=True)
    third, cached = ray.get(pool.score.remote(TARGET, str(other), "another-hash"))
    assert not cached and third.score == first.score
    (replacement,) = ray.get(pool.graders.remote())
    assert replacement != grader


def test_failed_baseline_is_an_error_not_zero(services, tmp_path: Path) -> None:
    pool, recorder = services
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    with pytest.raises(ray.exceptions.RayTaskError) as error:
        ray.get(pool.baseline.remote(TARGET, str(broken), "deadbeef"))
    assert isinstance(error.value.as_instanceof_cause(), BaselineError)
    assert ray.get(recorder.get_baseline.remote("baseline:" + TARGET.cache_key("deadbeef"))) is None


def test_a_later_sweeps_pool_reuses_the_baseline_when_nothing_that_decides_it_changed(
    services, tiny_model_dir: Path, tmp_path: Path, cache_dir: Path
) -> None:
    first_pool, first_recorder = services
    # Eval options of this test alone: another test's baseline in the session's cache cannot answer
    # for it.
    target = replace(TARGET, eval_options={"num_shots": 0, "max_new_tokens": 6})
    digest = weights_hash(check_loadable_model(tiny_model_dir))
    key = "baseline:" + target.cache_key(digest)
    config = GraderConfig(replicas=1, cpus=1, gpus=0, batch_size=16, max_queued_per_cell=4)

    def baseline_in_a_new_sweep(
        name: str, grader_cfg: GraderConfig
    ) -> tuple[float, dict[str, int], str]:
        """A new sweep's pool and record store: (its baseline, its grader's engine builds, the
        stored details)."""
        recorder = ray.remote(Recorder).options(num_cpus=0).remote(str(tmp_path / f"{name}.sqlite"))
        pool = (
            ray.remote(GraderPool).options(num_cpus=0).remote(grader_cfg, str(cache_dir), recorder)
        )
        score = ray.get(pool.baseline.remote(target, str(tiny_model_dir), digest))
        (grader,) = ray.get(pool.graders.remote())
        builds = ray.get(grader.engine_stats.remote())
        for actor in (grader, pool, recorder):  # free the grader's CPU for the next sweep's
            ray.kill(actor, no_restart=True)
        ((details,),) = query(
            tmp_path / f"{name}.sqlite", "SELECT details_json FROM baselines WHERE key = ?", key
        )
        return score, builds, str(details)

    # The first sweep's pool (this module's, same settings as `config`) scores the base and stores
    # it.
    score = ray.get(first_pool.baseline.remote(target, str(tiny_model_dir), digest))
    (first_grader,) = ray.get(first_pool.graders.remote())
    assert ray.get(first_grader.engine_stats.remote())["builds"] == 1
    again, builds, details = baseline_in_a_new_sweep("second", config)
    assert (again, builds["builds"]) == (score, 0) and json.loads(details)[
        "cross_sweep_cache"
    ] == str(cache_dir / "baselines")
    # Told not to, or grading with another batch size (which can change greedy outputs): the base is
    # scored again.
    for changed in (replace(config, baseline_cache=False), replace(config, batch_size=8)):
        again, builds, details = baseline_in_a_new_sweep(f"changed-{changed.batch_size}", changed)
        assert (again, builds["builds"]) == (score, 1) and "cross_sweep_cache" not in json.loads(
            details
        )
    assert (
        ray.get(first_recorder.get_baseline.remote(key)) == score
    )  # each sweep's store holds its own
