"""Adapters on the cell's base, and model identity (issue #12 deliverables 2 and 3), on tiny real
models."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from autorl.grading import identity as identity_module
from autorl.grading.identity import MISMATCH_FLAG, BaseModel, compare_architecture
from autorl.grading.model_checks import check_loadable_model
from autorl.grading.scoring import EvalTarget, score_model
from tests.helpers.tiny_qwen_models import build_models
from tests.helpers.tiny_qwen_models import save_lora as _lora
from tests.helpers.tiny_qwen_models import save_model as _save
from tests.helpers.tiny_qwen_models import set_adapter_config as _set_adapter_config
from tests.helpers.tiny_qwen_models import tiny_model as _model

INPUT_IDS = [[3, 4, 5, 6, 7, 8, 9, 10]]
TARGET = EvalTarget(
    "gsm8k",
    1,
    "fixture",
    0,
    {"train_size": 20, "eval_size": 8},
    {"num_shots": 0, "max_new_tokens": 8},
)


def _merged_on(adapter: Path, base: Path, dest: Path) -> Path:
    """What merging the adapter on ``base`` yourself gives, saved as a full model."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    merged = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base), str(adapter)
    ).merge_and_unload()
    return _save(merged, dest)


def _logits(model_dir: Path, base_dir: Path | None = None) -> Any:
    import torch

    from autorl.engine.hf import HFEngine

    engine = HFEngine(model_dir, batch_size=4, device="cpu", base_dir=base_dir)
    with torch.no_grad():
        return engine.model(torch.tensor(INPUT_IDS)).logits


def _hand_distance(submission: dict[str, Any], base: dict[str, Any]) -> float:
    """sqrt(sum ||W - W0||^2) / sqrt(sum ||W0||^2) over the base's tensors, straight from the
    definition;
    a tensor missing from the submission, or of another shape, counts as W = 0."""

    def squared_diff(name: str, w0: Any) -> float:
        w = submission.get(name)
        return float(
            ((w.float() if w is not None and w.shape == w0.shape else 0) - w0.float())
            .square()
            .sum()
        )

    num = sum(squared_diff(n, w0) for n, w0 in base.items())
    den = sum(float(w0.float().square().sum()) for w0 in base.values())
    return math.sqrt(num) / math.sqrt(den)


def _tensors(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The cell's base, another model of the same architecture, and variants of the base."""
    return build_models(tmp_path_factory.mktemp("identity"))


# --- adapters are applied to the cell's base
# -------------------------------------------------------


@pytest.mark.parametrize("names", ["other", "/nonexistent/model"])
def test_adapter_is_applied_to_the_given_base_whatever_its_config_names(
    models: dict[str, Path], tmp_path: Path, names: str
) -> None:
    import torch

    adapter = shutil.copytree(models["adapter"], tmp_path / "adapter")
    _set_adapter_config(
        adapter, base_model_name_or_path=str(models[names]) if names in models else names
    )
    scored = _logits(adapter, base_dir=models["base"])
    on_base = _logits(_merged_on(adapter, models["base"], tmp_path / "on_base"))
    on_other = _logits(_merged_on(adapter, models["other"], tmp_path / "on_other"))
    torch.testing.assert_close(scored, on_base)
    assert not torch.allclose(scored, on_other, atol=1e-3)
    assert not torch.allclose(scored, _logits(models["base"]), atol=1e-3)  # the adapter was applied


def test_adapter_without_a_base_dir_is_a_clear_error(
    models: dict[str, Path], tmp_path: Path, cache_dir: Path
) -> None:
    from autorl.engine.hf import AdapterBaseMissing, HFEngine

    with pytest.raises(AdapterBaseMissing, match="LoRA adapter.*no base model folder"):
        HFEngine(models["adapter"], device="cpu")
    with pytest.raises(AdapterBaseMissing, match="base_dir="):
        HFEngine(models["adapter"], device="cpu", base_dir=tmp_path / "missing")


def test_a_full_model_ignores_base_dir(models: dict[str, Path]) -> None:
    import torch

    torch.testing.assert_close(
        _logits(models["other"], base_dir=models["base"]), _logits(models["other"])
    )


def test_score_model_scores_an_adapter_as_merged_on_the_base(
    tiny_model_dir: Path, cache_dir: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from autorl.engine.hf import AdapterBaseMissing

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    adapter = _lora(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir), tmp_path / "adapter", lora_alpha=64
    )
    _set_adapter_config(adapter, base_model_name_or_path="/nonexistent/other-model")
    merged = _merged_on(adapter, tiny_model_dir, tmp_path / "merged")
    for folder in (adapter, merged):
        tokenizer.save_pretrained(folder)  # the tiny model's own, with its chat template

    scored = score_model(TARGET, adapter, cache_dir, batch_size=8, base_dir=tiny_model_dir)
    expected = score_model(TARGET, merged, cache_dir, batch_size=8)
    assert scored.error is None and scored.score is not None
    assert (scored.score, scored.details) == (expected.score, expected.details)
    with pytest.raises(AdapterBaseMissing):
        score_model(TARGET, adapter, cache_dir, batch_size=8)


# --- identity: architecture and vocabulary
# ----------------------------------------------------------


def test_architecture_differences_are_named() -> None:
    base = {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "intermediate_size": 32,
        "head_dim": 8,
        "vocab_size": 64,
    }
    assert compare_architecture(base, dict(base)) == []
    assert compare_architecture(base, {**base, "vocab_size": 70}) == []  # added tokens
    assert compare_architecture(base, {**base, "num_hidden_layers": 3}) == [
        "num_hidden_layers 3 (base: 2)"
    ]
    assert compare_architecture(base, {**base, "num_key_value_heads": None}) == [
        "num_key_value_heads 2 (base: 1)"
    ]
    assert compare_architecture(base, {**base, "vocab_size": 60}) == [
        "vocab_size 60 (base: 64, fewer tokens)"
    ]
    assert compare_architecture(
        base, {**base, "architectures": ["Qwen3ForSequenceClassification"]}
    ) == ["architectures ['Qwen3ForSequenceClassification'] (base: ['Qwen3ForCausalLM'])"]
    multimodal = {
        "model_type": "qwen3",
        "text_config": {k: v for k, v in base.items() if k != "model_type"},
    }
    assert compare_architecture(base, multimodal) == []


def _check(models: dict[str, Path], name: str) -> Any:
    return BaseModel(models["base"]).check(models[name], check_loadable_model(models[name]))


@pytest.mark.parametrize(
    ("name", "needle"), [("wide", "hidden_size 32 (base: 16)"), ("llama", "model_type 'llama'")]
)
def test_another_architecture_is_a_mismatch(
    models: dict[str, Path], name: str, needle: str
) -> None:
    report = _check(models, name)
    assert report.flag == MISMATCH_FLAG
    assert any(needle in d for d in report.differences), report.differences
    assert report.details()["flag"] == MISMATCH_FLAG and needle in report.details()["flag_reason"]


def test_another_architecture_is_compared_where_shapes_agree(models: dict[str, Path]) -> None:
    # Tensors of another shape count as missing (W = 0); only q_norm/k_norm (head_dim 8 in both)
    # line up.
    expected = _hand_distance(_tensors(models["wide"]), _tensors(models["base"]))
    assert _check(models, "wide").weight_distance == pytest.approx(expected, rel=1e-5)
    assert 0.5 < expected < 1.0


def test_a_copy_has_distance_zero_in_any_layout(models: dict[str, Path], tmp_path: Path) -> None:
    import torch

    bin_copy = shutil.copytree(models["base"], tmp_path / "bin")
    (bin_copy / "model.safetensors").unlink()
    torch.save(_tensors(models["base"]), bin_copy / "pytorch_model.bin")
    for name in ("base", "sharded"):
        assert _check(models, name).weight_distance == 0.0
        assert _check(models, name).flag is None
    report = BaseModel(models["base"]).check(bin_copy, check_loadable_model(bin_copy))
    assert (report.weight_distance, report.flag) == (0.0, None)


def test_added_tokens_are_no_mismatch(models: dict[str, Path]) -> None:
    report = _check(models, "grown")
    assert report.flag is None and report.differences == ()
    assert (
        report.weight_distance == 0.0
    )  # the base's rows are unchanged; the new rows have no base value


@pytest.mark.parametrize("chunk", [1 << 22, 7])
def test_a_perturbed_copy_has_the_distance_computed_by_hand(
    models: dict[str, Path], monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(identity_module, "CHUNK_ELEMENTS", chunk)  # 7: many chunks per tensor
    expected = _hand_distance(_tensors(models["perturbed"]), _tensors(models["base"]))
    report = _check(models, "perturbed")
    assert 0.0 < expected < 0.2
    assert report.weight_distance == pytest.approx(expected, rel=1e-5)
    assert report.flag is None


def test_a_missing_tensor_counts_as_zero(models: dict[str, Path], tmp_path: Path) -> None:
    from safetensors.torch import save_file

    tensors = _tensors(models["perturbed"])
    del tensors["model.norm.weight"]
    partial = shutil.copytree(models["perturbed"], tmp_path / "partial")
    save_file(tensors, str(partial / "model.safetensors"), metadata={"format": "pt"})
    base = _tensors(models["base"])
    expected = _hand_distance({**tensors, "model.norm.weight": 0 * base["model.norm.weight"]}, base)
    assert BaseModel(models["base"]).check(
        partial, check_loadable_model(partial)
    ).weight_distance == pytest.approx(expected)


def test_a_substitute_of_the_same_architecture_is_reported_not_flagged(
    models: dict[str, Path],
) -> None:
    report = _check(models, "other")
    assert report.flag is None
    assert report.weight_distance == pytest.approx(
        _hand_distance(_tensors(models["other"]), _tensors(models["base"])), rel=1e-5
    )
    # Far from a fine-tune's distance (the norms, ones in both random inits, keep it below sqrt(2)).
    assert report.weight_distance > 0.1


# --- identity: adapters
# -----------------------------------------------------------------------------


def _adapter_distance(models: dict[str, Path], adapter: Path) -> float:
    report = BaseModel(models["base"]).check(adapter, check_loadable_model(adapter))
    assert report.flag is None
    return float(report.weight_distance)


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"use_rslora": True, "rank_pattern": {"v_proj": 4}, "alpha_pattern": {"down_proj": 3}},
        {"target_modules": ["embed_tokens", "q_proj"]},
        {"target_modules": ["q_proj"], "modules_to_save": ["lm_head"]},
    ],
    ids=["plain", "patterns", "embedding", "modules_to_save"],
)
def test_adapter_distance_is_the_distance_of_its_merge(
    models: dict[str, Path], tmp_path: Path, config: dict[str, Any]
) -> None:
    adapter = _lora(_model(0), tmp_path / "adapter", **config)
    if (
        "modules_to_save" in config
    ):  # train the saved copy: change what the adapter replaces lm_head with
        from safetensors.torch import load_file, save_file

        tensors = load_file(str(adapter / "adapter_model.safetensors"))
        key = next(k for k in tensors if "lm_head" in k)
        tensors[key] = tensors[key] + 0.05
        save_file(tensors, str(adapter / "adapter_model.safetensors"), metadata={"format": "pt"})
    merged = _merged_on(adapter, models["base"], tmp_path / "merged")
    expected = BaseModel(models["base"]).check(merged, check_loadable_model(merged)).weight_distance
    assert expected > 0.0
    assert _adapter_distance(models, adapter) == pytest.approx(expected, rel=1e-4)


def test_an_adapter_carrying_another_models_weights_is_measured(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """PEFT loads any base_model.model.<name> tensor of an adapter file: a substitution in
    disguise."""
    from safetensors.torch import load_file, save_file

    adapter = shutil.copytree(models["adapter"], tmp_path / "adapter")
    tensors = load_file(str(adapter / "adapter_model.safetensors"))
    tensors = {k: v * 0 for k, v in tensors.items()}  # the LoRA itself does nothing
    for name, value in _tensors(models["other"]).items():
        lora_target = any(
            m in name for m in ("q_proj", "v_proj", "down_proj")
        )  # PEFT wraps these: base_layer
        wrapped = name.replace(".weight", ".base_layer.weight") if lora_target else name
        tensors[f"base_model.model.{wrapped}"] = value
    save_file(tensors, str(adapter / "adapter_model.safetensors"), metadata={"format": "pt"})
    other = _check(models, "other").weight_distance
    assert _adapter_distance(models, adapter) == pytest.approx(other, rel=1e-5)
    import torch

    torch.testing.assert_close(_logits(adapter, base_dir=models["base"]), _logits(models["other"]))


def test_a_false_fan_in_fan_out_does_not_hide_a_delta(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """PEFT resets fan_in_fan_out on nn.Linear layers, so the flag must not turn the delta the wrong
    way."""
    adapter = shutil.copytree(models["adapter"], tmp_path / "adapter")
    honest = _adapter_distance(models, adapter)
    _set_adapter_config(adapter, fan_in_fan_out=True)
    merged = _merged_on(adapter, models["base"], tmp_path / "merged")
    expected = BaseModel(models["base"]).check(merged, check_loadable_model(merged)).weight_distance
    assert _adapter_distance(models, adapter) == pytest.approx(expected, rel=1e-4)
    assert expected == pytest.approx(honest, rel=1e-4)


def test_an_adapter_replacing_one_weight_twice_is_corrupt(
    models: dict[str, Path], tmp_path: Path
) -> None:
    from safetensors.torch import load_file, save_file

    from autorl.grading.model_checks import CorruptWeightsError

    adapter = shutil.copytree(models["adapter"], tmp_path / "adapter")
    tensors = load_file(str(adapter / "adapter_model.safetensors"))
    norm = _tensors(models["other"])["model.norm.weight"]
    tensors["base_model.model.model.norm.weight"] = norm
    tensors["base_model.model.model.norm.base_layer.weight"] = norm * 0
    save_file(tensors, str(adapter / "adapter_model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(
        CorruptWeightsError, match="two tensors for base weight 'model.norm.weight'"
    ):
        BaseModel(models["base"]).check(adapter, check_loadable_model(adapter))
