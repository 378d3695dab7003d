"""The `tiny` base model: a small Qwen3-style causal LM built offline and deterministically.

It exists so that the embedded default and the tests run on a CPU with no model hub: a byte-level
BPE tokenizer trained on a generated corpus, a ChatML chat template and a randomly initialised
Qwen3 model (with a Qwen2 config `AutoTokenizer` swaps in Qwen2Tokenizer, which splits text into
other ids than the tokenizer trained here). head_dim is 64 so that the same model also loads in
vLLM.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

# Bump when anything below changes the built files: it is part of the cache path.
TINY_BUILD_VERSION = 1
MARKER = "autorl_tiny.json"  # written last into a complete build (the small model's too)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_WORDS = (  # noqa: SIM905 - one split string reads better than a list of 100 word literals
    "the a an and of to in is are was were has have had he she it they them his her their how "
    "many much more less left now each total altogether after before buys gives gets eats "
    "loses finds sells makes apples pencils books marbles stickers cookies coins cards toys "
    "balls flowers candies eggs shells Tom Anna Ben Sara Leo Mia Sam Lily Max Emma Noah Zoe "
    "Jack Ella friend friends mother father teacher question answer think step by let's what "
    "if then so there at on for with from some all day days store box bag basket class school "
    "garden week price cost dollars minutes hours first second third"
).split()


@dataclass(frozen=True)
class TinyModelConfig:
    """Shape of the tiny model; every field changes the built weights and so the cache key."""

    vocab_size: int = 1024
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 4
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    head_dim: int = 64
    max_position_embeddings: int = 1024
    seed: int = 0

    def qwen3_config(self, **fields: Any) -> Any:
        """A transformers ``Qwen3Config`` of this shape; ``fields`` add settings or override it."""
        from transformers import Qwen3Config

        shape = {
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "max_position_embeddings": self.max_position_embeddings,
        }
        return Qwen3Config(**{**shape, **fields})


def _corpus(seed: int) -> list[str]:
    """Generated text that covers word problems, arithmetic and the prompt protocol's phrases."""
    rng = random.Random(seed)
    lines = []
    for _ in range(6000):
        a, b = rng.randint(0, 40), rng.randint(0, 40)
        lines.append(f"{a} + {b} = {a + b}. {max(a, b)} - {min(a, b)} = {max(a, b) - min(a, b)}.")
        lines.append(" ".join(rng.choice(_WORDS) for _ in range(10)) + "?")
        lines.append(
            f"Question: {rng.choice(_WORDS)}\nLet's think step by step\n"
            f"Answer: The answer is {a}.\n#### {b}"
        )
    return lines


def _build(
    target: Path,
    cfg: TinyModelConfig,
    corpus: list[str],
    meta: dict[str, object],
    *,
    isolate_newlines: bool = False,
) -> None:
    r"""Train the tokenizer on ``corpus``, initialise the model and save both into ``target``
    (``meta`` goes into ``autorl_tiny.json`` beside the build's shape).

    ``isolate_newlines`` makes every ``\n`` a token of its own. Without it a tokenizer trained on
    code learns ``"\n    "`` as one token, and a chat prompt that ends in ``"assistant\n"`` then
    never continues the way training text did (``"assistant"`` + ``"\n    "`` + ``"return"``).
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3ForCausalLM

    raw = Tokenizer(models.BPE(unk_token=None))
    raw.normalizer = normalizers.NFC()
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Split("\n", behavior="isolated"), byte_level])
        if isolate_newlines
        else byte_level
    )
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(corpus, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>", "<|endoftext|>"],
        padding_side="left",
        model_max_length=cfg.max_position_embeddings,
    )
    tokenizer.chat_template = CHAT_TEMPLATE

    torch.manual_seed(cfg.seed)
    model_cfg = cfg.qwen3_config(
        vocab_size=len(tokenizer),
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen3ForCausalLM(model_cfg)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    (target / MARKER).write_text(json.dumps({**meta, **asdict(cfg)}, indent=2))


def _readable_by_all(folder: Path) -> None:
    """Make a built model readable by every user: a sealed agent reads it as a uid of its own, and
    mkdtemp (0700) and the safetensors writer (0600) leave it private."""
    folder.chmod(0o755)
    for path in folder.iterdir():
        path.chmod(0o755 if path.is_dir() else 0o644)


def ensure_built_model(
    cache_root: Path,
    key: str,
    cfg: TinyModelConfig,
    corpus: Callable[[], list[str]],
    meta: dict[str, object],
    *,
    isolate_newlines: bool = False,
) -> Path:
    """Return ``cache_root/key``, building it on first use from ``corpus()`` with shape ``cfg``.

    Concurrent callers (several cells on one node) are serialised by a file lock and see either no
    folder or a complete one, never a half-written one.
    """
    target = cache_root / key
    cache_root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache_root / f".{key}.lock")):
        if (target / MARKER).exists():
            # A folder built by an older autorl may have parts private to their builder.
            _readable_by_all(target)
            return target
        staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache_root))
        try:
            _build(staging, cfg, corpus(), meta, isolate_newlines=isolate_newlines)
            _readable_by_all(staging)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def ensure_tiny_model(cache_root: Path, cfg: TinyModelConfig | None = None) -> Path:
    """Return the folder of the tiny model, building it on first use.

    The build is deterministic (fixed seeds), so the same config always yields the same weights
    and the same weights hash.

    Args:
        cache_root: folder that holds built models (e.g. ``~/.cache/autorl/models``).
        cfg: model shape; defaults to :class:`TinyModelConfig`.

    Returns:
        Path of a folder loadable with ``AutoModelForCausalLM``/``AutoTokenizer``.
    """
    cfg = cfg or TinyModelConfig()
    shape = f"h{cfg.hidden_size}-l{cfg.num_hidden_layers}-v{cfg.vocab_size}"
    key = f"tiny-b{TINY_BUILD_VERSION}-{shape}-s{cfg.seed}"
    meta: dict[str, object] = {"build_version": TINY_BUILD_VERSION}
    return ensure_built_model(cache_root, key, cfg, lambda: _corpus(cfg.seed), meta)
