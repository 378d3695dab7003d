"""Shared fixtures: the tiny model and small gsm8k data, built once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder of this test session (models and task data)."""
    return tmp_path_factory.mktemp("autorl-cache")


@pytest.fixture(scope="session")
def tiny_model_dir(cache_dir: Path) -> Path:
    """The tiny base model, built offline."""
    from autorl.models.tiny import ensure_tiny_model

    return ensure_tiny_model(cache_dir / "models")
