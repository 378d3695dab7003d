"""Shared fixtures: the tiny model and small gsm8k data, built once per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from autorl.task_code import PLUGIN_PATH_ENV

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
# As in a sweep (autorl/cluster.py): torch threads of the two xdist workers and of their sweeps
# share the cores, and spinning idle threads slowed a neighbour's training several times over
# (bench/omp_wait_policy.py).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The longest test files, longest first (from a CI run's --durations): `make test` hands whole
# files to two xdist workers in collection order (--dist loadfile --no-loadscope-reorder), and
# xdist's own order puts files with more tests first, which can start the longest, a one-test file,
# late in the run. So these start first and the many short files fill in at the end.
SLOWEST_FIRST = (
    "tests/integration/test_online_rl.py",  # three ALFWorld cells with RL and the probe
    "tests/integration/test_real_cli.py",
    "tests/integration/test_sweep.py",
    "tests/integration/test_hostile_agent.py",
    "tests/integration/test_plugins.py",
    "tests/integration/test_report_sweep.py",
    "tests/integration/test_ray_jobs.py",
    "tests/integration/test_feedback_dev.py",
    "tests/integration/test_faults.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the items of :data:`SLOWEST_FIRST` to the front, in its order (stable otherwise)."""
    rank = {path: index for index, path in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.fixture(autouse=True)
def _plugins_stay_in_their_test() -> Iterator[None]:
    """Restore ``AUTORL_PLUGIN_PATH`` after every test.

    :func:`autorl.plugins.activate` sets the variable itself, not through ``monkeypatch``, so a
    test that activates a plugin would otherwise leave it registered for the later tests of its
    xdist worker (a stray agent in ``option_names("agent")``).
    """
    before = os.environ.get(PLUGIN_PATH_ENV)
    yield
    if before is None:
        os.environ.pop(PLUGIN_PATH_ENV, None)
    else:
        os.environ[PLUGIN_PATH_ENV] = before


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder of this test session (models and task data)."""
    return tmp_path_factory.mktemp("autorl-cache")


@pytest.fixture(scope="session")
def tiny_model_dir(cache_dir: Path) -> Path:
    """The tiny base model, built offline."""
    from autorl.models.tiny import ensure_tiny_model

    return ensure_tiny_model(cache_dir / "models")
