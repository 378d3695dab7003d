"""The warm HF engine (issue #13): weight swap, stop strings and prompt-prefix reuse never change a
text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_kit.protocol import cut_at_stop

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
    "red",
    "blue",
    "big",
    "small",
    "went",
    "to",
    "see",
    "it",
    "and",
    "then",
]
SHARED = "the big red dog went to see a small blue cat and then sat on the mat far away home " * 2
PROMPTS = [
    SHARED + tail for tail in ("the cat", "a dog ran", "blue", "then it went far away", "mat")
] + ["dog", "the red"]
MAX_NEW = 12


def _tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece()  # joins words with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", eos_token="</s>"
    )


def _save_model(path: Path, seed: int, **overrides: Any) -> Path:
    """A small random Qwen3 whose greedy texts vary (a wide init), saved with its tokenizer."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    shape = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "vocab_size": len(WORDS),
        "initializer_range": 0.3,
        "eos_token_id": 2,
        "pad_token_id": 1,
        "max_position_embeddings": 256,
    }
    Qwen3ForCausalLM(Qwen3Config(**{**shape, **overrides})).save_pretrained(path)
    _tokenizer().save_pretrained(path)
    return path


def _save_adapter(base: Path, path: Path) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    config = LoraConfig(
        r=2,
        lora_alpha=16,
        target_modules=["q_proj", "v_proj", "down_proj"],
        init_lora_weights=False,
    )
    get_peft_model(AutoModelForCausalLM.from_pretrained(base), config).save_pretrained(path)
    _tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("warm-models")
    found = {
        "a": _save_model(root / "a", 1),
        "b": _save_model(root / "b", 2),
        "deeper": _save_model(root / "deeper", 3, num_hidden_layers=3),
    }
    found["adapter"] = _save_adapter(found["a"], root / "adapter")
    return found


def _engine(model_dir: Path, base_dir: Path | None = None, **options: Any) -> Any:
    from autorl.engine.hf import HFEngine

    return HFEngine(model_dir, batch_size=4, device="cpu", base_dir=base_dir, **options)


def _texts(engine: Any, prompts: list[str] = PROMPTS, stop: list[str] | None = None) -> list[str]:
    return list(engine.generate_text(prompts, max_new_tokens=MAX_NEW, stop=stop))


def test_prefix_reuse_and_stop_strings_give_the_plain_engines_texts(
    models: dict[str, Path],
) -> None:
    plain = _engine(models["a"], prefix_cache=False)
    cached = _engine(models["a"], min_shared_tokens=4)
    full = _texts(plain)  # no stop: every row runs to MAX_NEW tokens
    assert len(set(full)) > 3, f"the fixture model must generate varied texts: {full}"
    stop = ["cat", "ran", "red"]  # every row of the fixture model holds one (or ends at EOS)
    expected = [cut_at_stop(text, stop) for text in full]
    assert any(e != f for e, f in zip(expected, full, strict=True)), (
        "a stop string must cut some row"
    )

    calls = {"n": 0}
    plain.model.register_forward_hook(lambda *_: calls.__setitem__("n", calls["n"] + 1))
    assert _texts(plain, stop=stop) == expected
    stopped_early = calls["n"]
    calls["n"] = 0
    _texts(plain)
    assert stopped_early < calls["n"], (
        "a batch whose rows all hit a stop string or EOS must stop generating"
    )

    assert _texts(cached, stop=stop) == expected  # first call: the shared block is encoded once
    reused = cached.prefix.reused_tokens
    assert reused > 0
    assert _texts(cached, stop=stop) == expected  # every prompt now cached whole
    assert [_texts(cached, [p], stop=stop)[0] for p in PROMPTS] == expected  # one by one
    # An episode's next step repeats its prompt and adds to it: only the new tokens are encoded.
    longer = [p + " " + t + " the dog sat" for p, t in zip(PROMPTS, full, strict=True)]
    before = cached.prefix.encoded_tokens
    assert _texts(cached, longer) == _texts(plain, longer)
    new_tokens = sum(len(t.split()) + 3 for t in full) + len(
        longer
    )  # generous: tails, batch padding aside
    assert cached.prefix.encoded_tokens - before <= new_tokens * 4
    assert cached.prefix.reused_tokens > reused
    # A row far behind the others (nothing of it kept) is encoded on its own before the batch.
    mixed = [longer[0] + " the cat sat", "far away home " * 20 + "dog", longer[1] + " a"]
    assert _texts(cached, mixed) == _texts(plain, mixed)


def test_swap_gives_a_fresh_engines_texts(models: dict[str, Path]) -> None:
    expected = {name: _texts(_engine(models[name], prefix_cache=False)) for name in ("a", "b")}
    expected["adapter"] = _texts(
        _engine(models["adapter"], base_dir=models["a"], prefix_cache=False)
    )
    assert len({tuple(t) for t in expected.values()}) == 3, (
        "the three submissions must generate differently"
    )

    engine = _engine(models["a"])
    modules = engine.model.get_input_embeddings()
    _texts(engine)  # fill the prefix cache with a's key/values: a swap must drop them
    assert engine.swap(models["b"]) is True
    assert _texts(engine) == expected["b"]
    assert (
        engine.swap(models["adapter"], base_dir=models["a"]) is True
    )  # merged on a fresh copy of a
    assert _texts(engine) == expected["adapter"]
    assert engine.swap(models["adapter"], base_dir=models["a"]) is True  # not merged twice
    assert _texts(engine) == expected["adapter"]
    assert engine.swap(models["a"]) is True
    assert _texts(engine) == expected["a"]
    assert engine.model.get_input_embeddings() is modules, "a swap loads into the same modules"

    assert engine.swap(models["deeper"]) is False  # another architecture: the caller builds anew
    assert _texts(engine) == expected["a"], "a refused swap leaves the engine as it was"
    from autorl.engine.hf import AdapterBaseMissing

    with pytest.raises(AdapterBaseMissing):
        engine.swap(models["adapter"])


def test_reserved_cache_layers_hold_what_dynamic_layers_hold() -> None:
    import torch
    from transformers.cache_utils import DynamicLayer

    from agent_kit.hf_prefix import _reserved_layer_class

    reserved, dynamic = _reserved_layer_class()(spare=2), DynamicLayer()
    generator, rows = torch.Generator().manual_seed(0), 3
    for step, width in enumerate(
        [5, 1, 1, 1, 3, 1]
    ):  # a prefill, decode steps, then more than the spare room
        keys = torch.randn(rows, 2, width, 4, generator=generator)
        values = torch.randn(rows, 2, width, 4, generator=generator)
        got, want = reserved.update(keys, values), dynamic.update(keys, values)
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True)), step
        if (
            step == 3
        ):  # replaced from outside (as generate's crop / batch selection do): continued from there
            reserved.batch_select_indices(torch.tensor([0, 2]))
            dynamic.batch_select_indices(torch.tensor([0, 2]))
            rows = 2
    assert reserved.get_seq_length() == dynamic.get_seq_length() == 12
