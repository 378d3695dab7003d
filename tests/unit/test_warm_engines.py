"""Engine plugins and the grader's warm engines (issue #13): selection, clear errors, swap or
rebuild."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from autorl.config import compose
from autorl.engine import resolve_engine
from autorl.engine.warm import WarmEngines
from autorl.errors import ConfigError
from autorl.grading.scoring import EvalTarget, score_model

TARGET = EvalTarget(
    "gsm8k",
    1,
    "fixture",
    0,
    {"train_size": 20, "eval_size": 8},
    {"num_shots": 2, "max_new_tokens": 8},
)


def test_auto_picks_vllm_only_with_the_package_and_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    real_find_spec = importlib.util.find_spec
    installed: set[str] = set()
    fake = importlib.util.spec_from_loader(
        "vllm", loader=None, origin="/site-packages/vllm/__init__.py"
    )
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: fake if name in installed else real_find_spec(name, *a),
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    installed.clear()
    assert resolve_engine("auto") == "hf"
    with pytest.raises(
        ConfigError, match=r"grader.engine=vllm needs the 'vllm' package, which is not installed"
    ):
        resolve_engine("vllm")
    installed.add("vllm")
    assert resolve_engine("auto") == "hf"  # installed, but no GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_engine("auto") == "vllm"
    assert resolve_engine("hf") == "hf"
    with pytest.raises(ConfigError, match="unknown engine 'hff'. Did you mean: hf"):
        resolve_engine("hff")


def test_engine_config_group_composes_and_names_are_checked() -> None:
    cfg = compose(["grader.engines.hf.options.prefix_cache=false"])
    assert cfg.grader.engine == "auto"
    assert set(cfg.grader.engines) >= {"hf", "vllm"} and cfg.grader.engines["hf"].name == "hf"
    assert cfg.grader.engines["hf"].options["prefix_cache"] is False
    compose(["grader.engine=hf"]).grader.check()
    with pytest.raises(ConfigError, match="Did you mean: vllm"):
        compose(["grader.engine=vlm"]).grader.check()


def _perturbed(model_dir: Path, dest: Path, seed: int) -> Path:
    """``model_dir`` with noise added to its weights (same architecture and tokenizer)."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(model_dir, dest)
    state = load_file(str(dest / "model.safetensors"))
    generator = torch.Generator().manual_seed(seed)
    save_file(
        {k: v + 0.05 * torch.randn(v.shape, generator=generator) for k, v in state.items()},
        str(dest / "model.safetensors"),
    )
    return dest


def test_warm_scores_equal_cold_scores_and_rebuild_on_another_architecture(
    tiny_model_dir: Path, cache_dir: Path, tmp_path: Path
) -> None:
    from autorl.models.tiny import TinyModelConfig, ensure_tiny_model

    submissions = [tiny_model_dir, _perturbed(tiny_model_dir, tmp_path / "p1", 1)]
    other = ensure_tiny_model(tmp_path / "other", TinyModelConfig(num_hidden_layers=2))
    warm = WarmEngines({"hf": {"prefix_cache": True}}, device="cpu")
    kwargs: dict[str, Any] = {"batch_size": 8, "engine": "hf"}
    try:
        for model in [*submissions, other]:
            cold = score_model(TARGET, model, cache_dir, **kwargs)
            hot = score_model(TARGET, model, cache_dir, warm=warm, **kwargs)
            assert cold.error is None and hot.error is None
            assert (hot.score, hot.details) == (cold.score, cold.details)
        assert (warm.builds, warm.swaps) == (
            2,
            1,
        )  # built for the first, swapped once, rebuilt for 2 layers
        broken = tmp_path / "broken"
        broken.mkdir()
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
            (broken / name).write_bytes((other / name).read_bytes())
        (broken / "model.safetensors").write_bytes(b"not safetensors")
        outcome = score_model(TARGET, broken, cache_dir, warm=warm, **kwargs)
        assert outcome.score is None and outcome.error and "failed to load" in outcome.error
        assert warm._engine is None, "an engine that failed to take a submission is discarded"
    finally:
        warm.close()
