"""How the grader decodes: the task's settings, never the submission's ``generation_config.json``.

A submission's ``generation_config.json`` (and generation keys in its ``config.json``) would
otherwise pick beams, sampling, temperature, penalties, minimum lengths, forced or banned tokens:
decoding the eval prompts in a way the task did not choose. The engines decode greedily with the
task's ``max_new_tokens`` and stop strings; from the submission they take only what the model
learned to end a text with (docs/threat-model.md):

* end-of-sequence ids: the union of ``config.json``'s ``eos_token_id``, the tokenizer's
  ``eos_token`` and ``generation_config.json``'s ``eos_token_id`` (its only key read, from a file
  of bounded size);
* the padding id: the tokenizer's ``pad_token`` (its ``eos_token`` when it has none); padded
  positions are masked, so it changes no text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GENERATION_CONFIG = "generation_config.json"
MAX_GENERATION_CONFIG_BYTES = 1 << 20  # real files are a few hundred bytes


def _ids(value: Any) -> list[int]:
    """The token ids in an ``eos_token_id`` value (an int, a list of ints, or anything else: none).

    >>> _ids(2), _ids([3, "x", True, 4]), _ids("2"), _ids(None)
    ([2], [3, 4], [], [])
    """
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0]


def generation_config_eos(folder: Path) -> list[int]:
    """``eos_token_id`` of ``folder/generation_config.json``; nothing else of the file is read.

    A missing, oversized, unreadable or malformed file has none (the config and the tokenizer still
    give the model's end token).
    """
    path = folder / GENERATION_CONFIG
    try:
        if not path.is_file() or path.stat().st_size > MAX_GENERATION_CONFIG_BYTES:
            return []
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return []
    return _ids(data.get("eos_token_id")) if isinstance(data, dict) else []


def eos_token_ids(weights_dir: Path, config: Any, tokenizer: Any) -> list[int]:
    """The end-of-sequence ids generation stops at, sorted (the rule in this module's docstring).

    Args:
        weights_dir: The folder whose ``config.json`` the weights came with (an adapter's base).
        config: That loaded config.
        tokenizer: The submission's tokenizer.
    """
    ids = set(_ids(getattr(config, "eos_token_id", None)))
    ids.update(_ids(getattr(tokenizer, "eos_token_id", None)))
    ids.update(generation_config_eos(weights_dir))
    return sorted(ids)


def pad_token_id(tokenizer: Any) -> int | None:
    """The padding id: the tokenizer's pad token (set to its eos token when it has none)."""
    value = getattr(tokenizer, "pad_token_id", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def greedy_generation_config(weights_dir: Path, config: Any, tokenizer: Any) -> Any:
    """A ``transformers.GenerationConfig``: plain greedy decoding with the model's end and pad ids.

    Every other field keeps transformers' default: one beam, no sampling, no penalties, no minimum
    length, no forced or banned tokens. ``max_new_tokens`` and stop strings come with each call.
    """
    from transformers import GenerationConfig

    eos = eos_token_ids(weights_dir, config, tokenizer)
    bos = getattr(config, "bos_token_id", None)
    return GenerationConfig(
        do_sample=False,
        num_beams=1,
        eos_token_id=eos or None,
        pad_token_id=pad_token_id(tokenizer),
        bos_token_id=bos if isinstance(bos, int) and not isinstance(bos, bool) else None,
    )
