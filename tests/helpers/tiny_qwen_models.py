"""Tiny real Qwen3 models for the identity tests: full models, LoRA adapters, and the set of
variants of one base that the tests compare."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

WORDS = [
    "[UNK]",
    "[PAD]",
    "</s>",
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "dog",
    "ran",
    "far",
    "away",
    "home",
]


def tiny_model(
    seed: int, **overrides: Any
) -> Any:  # -> Qwen3ForCausalLM (typed loosely: collection stays light)
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    shape = {
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 8,
        "vocab_size": 64,
    }
    return Qwen3ForCausalLM(Qwen3Config(**{**shape, **overrides}))


def tokenizer() -> Any:  # -> PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", eos_token="</s>"
    )


def save_model(model: Any, path: Path, **kwargs: Any) -> Path:
    model.save_pretrained(path, **kwargs)
    tokenizer().save_pretrained(path)
    return path


def save_lora(model: Any, path: Path, names_base: str | None = None, **config: Any) -> Path:
    """Saves a LoRA adapter with non-zero B (so it changes the model) and the tokenizer."""
    from peft import LoraConfig, get_peft_model

    settings = {
        "r": 2,
        "lora_alpha": 8,
        "target_modules": ["q_proj", "v_proj", "down_proj"],
        "init_lora_weights": False,
    }
    peft_model = get_peft_model(model, LoraConfig(**{**settings, **config}))
    peft_model.save_pretrained(path)
    tokenizer().save_pretrained(path)
    if names_base is not None:
        set_adapter_config(path, base_model_name_or_path=names_base)
    return path


def set_adapter_config(path: Path, **fields: Any) -> None:
    config_path = path / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config.update(fields)
    config_path.write_text(json.dumps(config))


def build_models(root: Path) -> dict[str, Path]:
    """The cell's base, another model of the same architecture, and variants of the base."""
    import torch

    dirs = {
        "base": save_model(tiny_model(0), root / "base"),
        "other": save_model(tiny_model(1), root / "other"),
    }
    dirs["wide"] = save_model(tiny_model(2, hidden_size=32, intermediate_size=64), root / "wide")
    llama = tiny_model(0)  # same shapes, another model_type: its config says so
    config = json.loads((dirs["base"] / "config.json").read_text())
    dirs["llama"] = save_model(llama, root / "llama")
    llama_config = {**config, "model_type": "llama", "architectures": ["LlamaForCausalLM"]}
    (dirs["llama"] / "config.json").write_text(json.dumps(llama_config))
    dirs["sharded"] = save_model(tiny_model(0), root / "sharded", max_shard_size="20KB")
    perturbed = tiny_model(0)
    with torch.no_grad():
        perturbed.model.layers[0].mlp.up_proj.weight.add_(
            0.01 * torch.randn_like(perturbed.model.layers[0].mlp.up_proj.weight)
        )
        perturbed.model.norm.weight.add_(0.5)
    dirs["perturbed"] = save_model(perturbed, root / "perturbed")
    grown = tiny_model(0)
    grown.resize_token_embeddings(70)  # added tokens: 6 new rows, the old rows untouched
    dirs["grown"] = save_model(grown, root / "grown")
    dirs["adapter"] = save_lora(tiny_model(0), root / "adapter", names_base=str(dirs["other"]))
    return dirs
