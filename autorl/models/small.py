"""The `small` base model: an offline-built Qwen3-style LM whose tokenizer knows the tasks' words.

`tiny`'s tokenizer was trained on arithmetic word problems, so an ALFWorld or WebShop prompt falls
apart into letters ("sinkbasin" is five tokens) and its 128-wide layers cannot learn those tasks on
a CPU budget. `small` is four times wider and trains its byte-level BPE tokenizer on what the six
built-in tasks show a model (:mod:`autorl.models.small_corpus`: public data, descriptions and the
prompts the evaluators render), never on source code, so refactoring a task changes no token id.
The weights are a seeded random init, as `tiny`'s: the base scores 0 and everything it learns comes
from the agent.

Deterministic: the same corpus gives the same tokenizer and weights. The corpus digest is part of
the cache key and is pinned by a test; :data:`SMALL_BUILD_VERSION` names the build, and a cell
recorded on another build runs again when its sweep resumes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from autorl.models.small_corpus import public_corpus
from autorl.models.tiny import TinyModelConfig, ensure_built_model

# A new number for each deliberate change of the corpus or the architecture (pin the new digest in
# tests/unit/test_small_model.py with it).
SMALL_BUILD_VERSION = 3
SMALL_CONFIG = TinyModelConfig(
    vocab_size=4096,
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=2048,
)


def corpus_digest(corpus: list[str]) -> str:
    """The short digest of a tokenizer corpus (part of the model's cache key).

    >>> corpus_digest(["a", "b"])
    '3554d2b8a1e3'
    """
    return hashlib.sha256(json.dumps(corpus).encode()).hexdigest()[:12]


def ensure_small_model(cache_root: Path) -> Path:
    """Return the folder of the small model, building it (and the fixtures it reads) on first use.

    Args:
        cache_root: the cache folder (``cache_dir``): the model goes to ``models/``, fixtures to
            ``tasks/``.
    """
    corpus = public_corpus(cache_root)
    digest = corpus_digest(corpus)
    cfg = SMALL_CONFIG
    shape = f"h{cfg.hidden_size}-l{cfg.num_hidden_layers}-v{cfg.vocab_size}"
    key = f"small-b{SMALL_BUILD_VERSION}-{shape}-c{digest}"
    return ensure_built_model(
        cache_root / "models",
        key,
        cfg,
        lambda: corpus,
        {"build_version": SMALL_BUILD_VERSION, "corpus_digest": digest, "isolate_newlines": True},
        isolate_newlines=True,
    )
