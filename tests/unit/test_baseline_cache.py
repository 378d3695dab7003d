"""The cross-sweep baseline cache: a stored score comes back only for its exact key and engine
identity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autorl.grading.baseline_cache import BaselineCache, cross_sweep_key

KEY = "baseline:gsm8k:v2:fixture:abc123:w1"
IDENTITY = {
    "engine": "hf",
    "batch_size": 64,
    "threads": 1,
    "device": "cpu",
    "packages": {"torch": "2.13.0"},
}


def test_a_stored_baseline_comes_back_for_its_key_and_identity_only(tmp_path: Path) -> None:
    cache = BaselineCache(tmp_path / "baselines")
    assert cache.get(KEY, IDENTITY) is None
    path = cache.put(KEY, IDENTITY, 12.5, '{"score": 12.5}')
    assert cache.get(KEY, IDENTITY) == (12.5, '{"score": 12.5}')
    assert cache.get(KEY.replace(":w1", ":w2"), IDENTITY) is None
    assert cache.get(KEY, IDENTITY | {"packages": {"torch": "2.14.0"}}) is None
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind


@pytest.mark.parametrize("content", ["", "{not json", '{"key": "another"}', '["a list"]'])
def test_a_damaged_or_foreign_file_is_a_miss_and_is_rewritten(
    tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    cache = BaselineCache(tmp_path)
    path = tmp_path / f"{cross_sweep_key(KEY, IDENTITY)}.json"
    path.write_text(content)
    assert cache.get(KEY, IDENTITY) is None
    assert "scoring the base model again" in caplog.text
    cache.put(KEY, IDENTITY, 3.0, "{}")
    assert json.loads(path.read_text())["score"] == 3.0 and cache.get(KEY, IDENTITY) == (3.0, "{}")


def test_a_folder_that_cannot_be_written_loses_only_the_cache(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    cache = BaselineCache(blocker / "baselines")
    assert cache.put(KEY, IDENTITY, 12.5, "{}") is None
    assert "later sweeps will score it again" in caplog.text and cache.get(KEY, IDENTITY) is None
