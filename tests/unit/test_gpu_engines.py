"""The engines on GPUs, checked without one: conf/engine/vllm.yaml's GPU options reach
``vllm.LLM``, the HF engine's dtype per device, and what ``grader.engine=auto`` picks."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from autorl.config import compose
from autorl.engine import auto_engine, resolve_engine
from autorl.engine.hf import dtype_name
from autorl.engine.vllm import VLLMEngineError, llm_kwargs

GPU_OVERRIDES = [
    "grader.gpus=2",
    "grader.engines.vllm.options.gpu_memory_utilization=0.6",
    "grader.engines.vllm.options.tensor_parallel_size=2",
    "grader.engines.vllm.options.max_model_len=2048",
]


def _save_model(path: Path) -> Path:
    """A two-layer random Llama with a word-level tokenizer: what the vLLM engine reads first."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["[UNK]", "[PAD]", "</s>", "a", "b"]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    config = LlamaConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=len(words),
        eos_token_id=2,
        pad_token_id=1,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", eos_token="</s>"
    ).save_pretrained(path)
    return path


class _FakeLLM:
    """Stands in for ``vllm.LLM``: keeps the keyword arguments it was built with."""

    built: list[dict[str, Any]] = []

    def __init__(self, **kwargs: Any) -> None:
        _FakeLLM.built.append(kwargs)
        config = types.SimpleNamespace(max_model_len=kwargs["max_model_len"] or 256)
        self.llm_engine = types.SimpleNamespace(model_config=config)


@pytest.fixture
def fake_cuda_vllm(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """A ``vllm`` module built for CUDA, on a process that sees two GPUs with bf16."""
    import autorl.engine.hf as hf
    import autorl.engine.vllm as engine

    vllm = types.ModuleType("vllm")
    platforms = types.ModuleType("vllm.platforms")
    vllm.LLM = _FakeLLM  # type: ignore[attr-defined]
    platforms.current_platform = types.SimpleNamespace(device_type="cuda")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    monkeypatch.setattr(engine, "visible_gpus", lambda: 2)
    real = hf.dtype_name
    monkeypatch.setattr(engine, "dtype_name", lambda d: real(d, bf16_supported=lambda: True))
    _FakeLLM.built = []
    return _FakeLLM.built


def test_the_yaml_gpu_options_reach_vllm_llm(
    fake_cuda_vllm: list[dict[str, Any]], tmp_path: Path
) -> None:
    from autorl.engine.vllm import VLLMEngine

    cfg = compose(GPU_OVERRIDES)
    options = dict(cfg.grader.engines["vllm"].options)  # what the grader pool hands each grader
    VLLMEngine(_save_model(tmp_path / "model"), batch_size=4, **options)
    (kwargs,) = fake_cuda_vllm
    assert kwargs["gpu_memory_utilization"] == 0.6
    assert kwargs["tensor_parallel_size"] == 2
    assert kwargs["max_model_len"] == 2048
    assert kwargs["distributed_executor_backend"] == "mp"  # one worker process per GPU
    assert kwargs["dtype"] == "bfloat16"
    assert "kv_cache_memory_bytes" not in kwargs  # gpu_memory_utilization sizes it on a GPU


def test_tensor_parallel_defaults_to_the_graders_gpus(
    fake_cuda_vllm: list[dict[str, Any]], tmp_path: Path
) -> None:
    from autorl.engine.vllm import VLLMEngine

    options = dict(compose([]).grader.engines["vllm"].options)
    assert options["tensor_parallel_size"] is None
    VLLMEngine(_save_model(tmp_path / "model"), batch_size=4, **options)
    assert fake_cuda_vllm[0]["tensor_parallel_size"] == 2  # the two GPUs this process sees


def _kwargs(platform: str, **options: Any) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "model": "m",
        "tokenizer": "m",
        "batch_size": 8,
        "dtype": None,
        "max_model_len": None,
        "enable_prefix_caching": True,
        "kv_cache_gb": 1.0,
        "gpu_memory_utilization": 0.85,
        "tensor_parallel_size": None,
        "visible_gpus": 0,
        "enforce_eager": True,
        "max_lora_rank": 64,
        "seed": 0,
    }
    return llm_kwargs(platform=platform, **{**defaults, **options})


def test_the_cpu_keeps_its_kv_cache_size_fp32_and_one_process() -> None:
    kwargs = _kwargs("cpu")
    assert kwargs["kv_cache_memory_bytes"] == 1 << 30
    assert (kwargs["dtype"], kwargs["tensor_parallel_size"]) == ("float32", 1)
    assert kwargs["distributed_executor_backend"] == "uni"
    assert (kwargs["enable_lora"], kwargs["max_lora_rank"], kwargs["max_loras"]) == (True, 64, 1)
    assert _kwargs("cpu", max_lora_rank=None)["enable_lora"] is False


def test_more_tensor_parallel_gpus_than_seen_is_refused_with_the_numbers() -> None:
    assert _kwargs("cuda", visible_gpus=1)["tensor_parallel_size"] == 1
    with pytest.raises(VLLMEngineError, match="tensor_parallel_size=4 needs 4 GPUs.* sees 2"):
        _kwargs("cuda", tensor_parallel_size=4, visible_gpus=2)


def test_hf_dtype_is_bf16_on_cuda_and_fp32_on_the_cpu() -> None:
    assert dtype_name("cpu") == "float32"  # CPU scores stay bit-identical
    assert dtype_name("cpu", bf16_supported=lambda: True) == "float32"
    assert dtype_name("cuda", bf16_supported=lambda: True) == "bfloat16"
    assert dtype_name("cuda:1", bf16_supported=lambda: True) == "bfloat16"
    assert dtype_name("cuda", bf16_supported=lambda: False) == "float32"  # no bf16: no fp16 either


def test_auto_picks_vllm_on_a_gpu_node_with_vllm_else_hf() -> None:
    def yes() -> bool:
        return True

    def no() -> bool:
        return False

    assert resolve_engine("auto", gpus=yes, vllm=yes) == "vllm"
    assert resolve_engine("auto", gpus=no, vllm=yes) == "hf"
    assert resolve_engine("auto", gpus=yes, vllm=no) == "hf"
    assert resolve_engine("auto", gpus=no, vllm=no) == "hf"
    assert resolve_engine("hf", gpus=yes, vllm=yes) == "hf"  # a named engine is never replaced
    assert [auto_engine(g, v) for g in (True, False) for v in (True, False)] == [
        "vllm",
        "hf",
        "hf",
        "hf",
    ]
