"""LoRA adapter submissions: which adapters the grader accepts, how their tensors map onto the base,
and their dedupe key.

An adapter is always applied to the base model the grader was given, never to the model its
``adapter_config.json`` names in ``base_model_name_or_path`` (the engine loads it that way:
:func:`autorl.engine.hf.load_adapter_on_base`), so its dedupe key covers the base
(:func:`adapter_digest`).

PEFT loads every tensor of an adapter file whose name matches a parameter of the wrapped model, not
only the LoRA matrices: an adapter can carry full replacements of base weights (``modules_to_save``,
``save_embedding_layers``, or any hand-written ``base_model.model.<name>.weight``).
:func:`adapter_layout` therefore sorts an adapter's tensors into LoRA pairs and replacements, so
that the weight distance (:mod:`autorl.grading.identity`) measures what is actually scored.

Only plain LoRA is accepted (:func:`unsupported_adapter_features`): variants whose merged weights
are not ``W + scale * B @ A`` (DoRA, LoRA biases, layer replication, ...) are refused at submission
with a hint to merge the adapter and submit the full model, which every grader path supports.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AdapterLayout",
    "LoraPair",
    "adapter_digest",
    "adapter_layout",
    "lora_scale",
    "unsupported_adapter_features",
]

# Prefix of every parameter of a PeftModel wrapping a causal LM (PeftModel.base_model is the
# LoraModel, whose .model is the transformers model); PEFT ignores file tensors without it
# (load_state_dict(strict=False)).
PEFT_PREFIX = "base_model.model."
# Config fields that change what merging an adapter means, with the values that keep it plain LoRA.
_PLAIN_LORA: dict[str, tuple[Any, ...]] = {
    "use_dora": (False, None),
    "lora_bias": (False, None),
    "layer_replication": (None, []),
    "target_parameters": (None, []),
    "trainable_token_indices": (None, [], {}),
    "alora_invocation_tokens": (None, []),
    "use_qalora": (False, None),
}
_DIGEST_DOMAIN = b"autorl-adapter-on-base-v1\0"
_LORA_KEY = re.compile(r"^(?P<module>.+)\.(?P<kind>lora_A|lora_B)\.weight$")
_EMBEDDING_KEY = re.compile(r"^(?P<module>.+)\.(?P<kind>lora_embedding_A|lora_embedding_B)$")


def unsupported_adapter_features(config: dict[str, Any]) -> list[str]:
    """Lists what in an ``adapter_config.json`` the grader does not score faithfully.

    Args:
        config: The parsed ``adapter_config.json``.

    Returns:
        One phrase per problem; empty for a plain LoRA adapter.

    Examples:
        >>> unsupported_adapter_features({"peft_type": "LORA", "r": 8, "use_dora": False})
        []
        >>> unsupported_adapter_features({"peft_type": "IA3"})
        ["peft_type 'IA3' (only 'LORA' is supported)"]
        >>> unsupported_adapter_features({"peft_type": "LORA", "use_dora": True})
        ['use_dora=True']
    """
    problems: list[str] = []
    if config.get("peft_type") != "LORA":
        problems.append(f"peft_type {config.get('peft_type')!r} (only 'LORA' is supported)")
    for name, plain in _PLAIN_LORA.items():
        value = config.get(name)
        if value is not None and value not in plain:
            problems.append(f"{name}={value!r}")
    return problems


def adapter_digest(adapter_hash: str, config: dict[str, Any], base_hash: str) -> str:
    """The dedupe key of an adapter scored on a base.

    It covers the adapter's tensors, its config (``lora_alpha``, ``target_modules``... change the
    merged weights; ``base_model_name_or_path`` does not, as the grader ignores it) and the base, so
    the same adapter on two bases never shares a cached score, and no adapter's key equals a full
    model's hash.

    Args:
        adapter_hash: :func:`autorl.grading.model_checks.weights_hash` of the adapter file.
        config: The parsed ``adapter_config.json``.
        base_hash: The weights hash of the base the adapter is scored on.

    Returns:
        A sha256 hex digest.

    Examples:
        >>> on_b, on_c = (adapter_digest("a" * 64, {"r": 8}, base * 64) for base in "bc")
        >>> on_b != on_c
        True
        >>> named = adapter_digest("a", {"r": 8, "base_model_name_or_path": "x"}, "b")
        >>> named == adapter_digest("a", {"r": 8}, "b")
        True
    """
    kept = {k: v for k, v in config.items() if k != "base_model_name_or_path"}
    payload = json.dumps([adapter_hash, kept, base_hash], sort_keys=True, default=str)
    return hashlib.sha256(_DIGEST_DOMAIN + payload.encode()).hexdigest()


def lora_scale(config: dict[str, Any], module: str) -> float:
    """The factor PEFT multiplies ``B @ A`` by for ``module`` (a base-model module name).

    Follows PEFT's ``LoraModel._create_and_replace``: ``rank_pattern``/``alpha_pattern`` keys match
    a module name's dotted suffix as a regex; ``use_rslora`` divides by ``sqrt(r)`` instead of
    ``r``.

    >>> lora_scale({"r": 4, "lora_alpha": 8}, "model.layers.0.q_proj")
    2.0
    >>> config = {"r": 4, "lora_alpha": 8, "rank_pattern": {"q_proj": 16}, "use_rslora": True}
    >>> lora_scale(config, "m.q_proj")
    2.0
    """
    r = _pattern_value(config.get("rank_pattern") or {}, module, config.get("r", 8))
    alpha = _pattern_value(config.get("alpha_pattern") or {}, module, config.get("lora_alpha", 8))
    return float(alpha) / (math.sqrt(float(r)) if config.get("use_rslora") else float(r))


def _pattern_value(patterns: dict[str, Any], module: str, default: Any) -> Any:
    """PEFT's ``get_pattern_key`` lookup: the first pattern whose regex matches a dotted suffix of
    ``module``.
    """
    for pattern, value in patterns.items():
        if re.match(rf"(.*\.)?({pattern})$", module):
            return value
    return default


@dataclass(frozen=True)
class LoraPair:
    """One LoRA-adapted module of the base.

    Attributes:
        module: The module's name in the base model (``model.layers.0.self_attn.q_proj``).
        a_key: The adapter-file tensor holding ``A``.
        b_key: The adapter-file tensor holding ``B``.
        embedding: True for an embedding (its delta is ``(B @ A).T``).
    """

    module: str
    a_key: str
    b_key: str
    embedding: bool

    @property
    def weight(self) -> str:
        """The base tensor the pair's delta is added to."""
        return f"{self.module}.weight"


@dataclass(frozen=True)
class AdapterLayout:
    """An adapter file's tensors, sorted by what PEFT does with them.

    Attributes:
        pairs: LoRA pairs, by base tensor name.
        replacements: Base tensor name -> the adapter tensor PEFT loads in its place.
        ignored: Tensors PEFT does not load into the model (no ``base_model.model.`` prefix, or half
            a LoRA pair).
        conflicts: Base tensors two adapter tensors both replace (``x.weight`` and
            ``x.base_layer.weight``): which one PEFT keeps is not something to measure, so such an
            adapter is refused.
    """

    pairs: dict[str, LoraPair] = field(default_factory=dict)
    replacements: dict[str, str] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()


def adapter_layout(names: Iterable[str]) -> AdapterLayout:
    """Sorts an adapter file's tensor names into LoRA pairs, base-weight replacements and ignored
    ones.

    >>> names = ["m.q.lora_A.weight", "m.q.lora_B.weight", "lm_head.weight"]
    >>> names.append("m.e.base_layer.weight")
    >>> layout = adapter_layout([f"base_model.model.{name}" for name in names] + ["x"])
    >>> list(layout.pairs), sorted(layout.replacements), layout.ignored
    (['m.q.weight'], ['lm_head.weight', 'm.e.weight'], ('x',))
    """
    halves: dict[tuple[str, bool], dict[str, str]] = {}
    replacements: dict[str, str] = {}
    ignored: list[str] = []
    conflicts: list[str] = []
    for key in sorted(names):
        if not key.startswith(PEFT_PREFIX):
            ignored.append(key)
            continue
        name = key.removeprefix(PEFT_PREFIX)
        match = _LORA_KEY.match(name) or _EMBEDDING_KEY.match(name)
        if match is not None:
            embedding = match["kind"].startswith("lora_embedding")
            halves.setdefault((match["module"], embedding), {})[match["kind"][-1]] = key
            continue
        # A wrapped layer's own weight (save_embedding_layers, or any hand-written one) replaces the
        # base's.
        target = name.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")
        if target in replacements:
            conflicts.append(target)
        replacements[target] = key
    pairs: dict[str, LoraPair] = {}
    for (module, embedding), keys in halves.items():
        if set(keys) == {"A", "B"}:
            pair = LoraPair(module, keys["A"], keys["B"], embedding)
            pairs[pair.weight] = pair
        else:
            ignored.extend(keys.values())
    return AdapterLayout(pairs, replacements, tuple(sorted(ignored)), tuple(sorted(conflicts)))
