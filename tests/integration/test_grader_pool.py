"""GraderPool and Recorder as real Ray actors: caching across cells and replacing a dead grader."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from autorl.actors.grader_pool import BaselineError, GraderPool
from autorl.actors.recorder import Recorder
from autorl.grading.model_checks import check_loadable_model, weights_hash
from autorl.grading.scoring import EvalTarget
from autorl.schema import GraderConfig

pytestmark = pytest.mark.integration
TARGET = EvalTarget("gsm8k", 1, "fixture", 0, {"train_size": 20, "eval_size": 16}, {"num_shots": 0, "max_new_tokens": 8})


@pytest.fixture()
def services(tmp_path: Path, ray_tmp: Path, cache_dir: Path) -> Iterator[tuple[object, object]]:
    ray.init(address="local", num_cpus=2, include_dashboard=False, _temp_dir=str(ray_tmp), log_to_driver=False)
    try:
        recorder = (ray.remote(Recorder).options(num_cpus=0, max_restarts=-1, max_task_retries=-1)
                    .remote(str(tmp_path / "r.sqlite")))
        grader_cfg = GraderConfig(replicas=1, cpus=1, gpus=0, batch_size=16, max_queued_per_cell=4)
        pool = ray.remote(GraderPool).options(num_cpus=0).remote(grader_cfg, str(cache_dir), recorder)
        yield pool, recorder
    finally:
        ray.shutdown()


def test_scores_are_cached_by_weights_and_dead_graders_are_replaced(services, tiny_model_dir: Path, tmp_path: Path) -> None:
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
