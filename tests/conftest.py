"""Shared fixtures: the tiny model and small gsm8k data, built once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

# Test files that take far longer than the rest, longest first. `make test` hands whole files to two
# xdist workers in collection order (--dist loadfile), so these go first: started late, a long one could
# keep one worker busy long after the other had finished. CI took 39 minutes without this ordering, 34
# with it (one run each). In the CI run of 2026-11-28 (`--durations`): test_sweep.py about 460 s,
# test_real_cli.py five CLIs (two of 116 and 121 s, three under 85 s), test_online_rl.py 974 s then, about 260 s alone since.
SLOWEST_FIRST = ("tests/integration/test_sweep.py", "tests/integration/test_real_cli.py",
                 "tests/integration/test_online_rl.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the items of :data:`SLOWEST_FIRST` to the front, in its order (stable otherwise)."""
    rank = {path: index for index, path in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder of this test session (models and task data)."""
    return tmp_path_factory.mktemp("autorl-cache")


@pytest.fixture(scope="session")
def tiny_model_dir(cache_dir: Path) -> Path:
    """The tiny base model, built offline."""
    from autorl.models.tiny import ensure_tiny_model

    return ensure_tiny_model(cache_dir / "models")
