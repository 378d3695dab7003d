"""The `small` base model: a larger offline-built Qwen3-style LM with a tokenizer that knows the tasks' words.

`tiny`'s tokenizer was trained on arithmetic word problems, so an ALFWorld or WebShop prompt falls
apart into letters ("sinkbasin" is five tokens) and its 128-wide layers cannot learn those tasks on a
CPU budget (issue #14: SFT on ALFWorld still wrote "cabinininin" after 200 steps). `small` is four
times wider and trains its byte-level BPE tokenizer on what every agent is given and nothing else:
the public split of each of the six fixtures (seed 0, default options), each task's
``description.md`` and each task's prompt modules (``agent/protocol.py`` and ``agent/shots.py``: the
prompts and in-context examples the evaluators use). The private splits never enter it, nor the
recipes: editing how the scripted agent trains must not change the model it trains. The weights are
a seeded random init, as `tiny`'s: the base scores 0 and everything it learns comes from the agent.

Deterministic: the same task data and agent files give the same tokenizer and weights; their digest
is part of the cache key, so editing a prompt builds a new `small` instead of reusing a stale one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from autorl.models.tiny import TinyModelConfig, ensure_built_model

SMALL_BUILD_VERSION = 2  # 2: every newline is a token of its own
CORPUS_TASKS = ("alfworld", "alpacaeval", "deepsearchqa", "gsm8k", "humaneval", "webshop")
SMALL_CONFIG = TinyModelConfig(vocab_size=4096, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=2048)
# Public files read for text: data rows and descriptions. Game files (PDDL) are skipped.
_TEXT_SUFFIXES = (".jsonl", ".md", ".py")
# The agent-side modules that hold prompts and in-context examples (the rest of agent/ is recipe code).
PROMPT_MODULES = ("protocol.py", "shots.py")


def _strings(value: Any) -> list[str]:
    """Every string inside a JSON value, in order.

    >>> _strings({"a": "x", "b": [1, "y", {"c": "z"}]})
    ['x', 'y', 'z']
    """
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _file_texts(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [s for line in text.splitlines() if line.strip() for s in _strings(json.loads(line))]
    return [text]


def public_corpus(cache_root: Path) -> list[str]:
    """The tokenizer's training text: the six fixtures' public splits, descriptions and prompt modules.

    Builds (or reuses) each fixture's data under ``cache_root/tasks``; files are read in sorted order.
    """
    from autorl.task_spec import get_task
    from autorl.tasks import build_task_data

    texts: list[str] = []
    for task_id in CORPUS_TASKS:
        spec = get_task(task_id)
        data = build_task_data(spec, "fixture", cache_root / "tasks", seed=0)
        prompts = sorted(f for f in spec.agent_dir.glob("*.py") if f.name in PROMPT_MODULES)
        files = [*sorted(data.public_dir.rglob("*")), spec.description_md, *prompts]
        texts += [t for f in files if f.is_file() and f.suffix in _TEXT_SUFFIXES for t in _file_texts(f)]
    return texts


def ensure_small_model(cache_root: Path) -> Path:
    """Return the folder of the small model, building it (and the fixtures it reads) on first use.

    Args:
        cache_root: the cache folder (``cache_dir``): the model goes to ``models/``, fixtures to ``tasks/``.
    """
    corpus = public_corpus(cache_root)
    digest = hashlib.sha256(json.dumps(corpus).encode()).hexdigest()[:12]
    cfg = SMALL_CONFIG
    key = f"small-b{SMALL_BUILD_VERSION}-h{cfg.hidden_size}-l{cfg.num_hidden_layers}-v{cfg.vocab_size}-c{digest}"
    return ensure_built_model(cache_root / "models", key, cfg, lambda: corpus,
                              {"build_version": SMALL_BUILD_VERSION, "corpus_digest": digest, "isolate_newlines": True},
                              isolate_newlines=True)
