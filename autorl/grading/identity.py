"""Model identity: is a submission the cell's base model, fine-tuned?

Two checks on the grader's private snapshot of a submission, against the grader's copy of the base:

* **Architecture and vocabulary** (:func:`compare_architecture`): ``model_type``, ``architectures``
  and the shape-defining config fields must equal the base's, and the vocabulary may only grow
  (an agent that adds tokens resizes its embeddings larger; that is not a mismatch). Any other
  difference flags the submission :data:`MISMATCH_FLAG`; it is still scored, but counts towards the
  cell's best only with ``integrity.allow_substitution`` (docs/design.md#the-grading-api).
* **Relative weight distance** (:meth:`BaseModel.distance`):
  ``sqrt(sum ||W - W0||^2) / sqrt(sum ||W0||^2)`` over the base's tensors, 0 for a copy. A
  same-family substitution (another checkpoint of the same architecture) cannot be proven offline,
  so the distance is reported, never judged.

How the distance treats tensors that do not line up one to one:

* a base tensor the submission lacks, or holds in another shape, counts as ``W = 0`` (it adds
  ``||W0||^2`` to the numerator), so a model that shares nothing with the base is about 1 or more;
* a resized embedding (or output layer) compares its first ``rows(W0)`` rows; the added rows are
  new tokens and have no base value;
* tensors only the submission has are not counted, except an untied ``lm_head.weight`` on a base
  that ties its output layer to its input embeddings: that is compared with the base's embeddings
  (its base value), in numerator and denominator alike;
* an adapter's merged weights are ``W0`` (or the tensor the adapter replaces it with) plus
  ``scale * B @ A`` (:mod:`autorl.grading.lora`).

Tensors are streamed in row chunks of at most :data:`CHUNK_ELEMENTS` values, accumulated in float32
per chunk and summed in Python floats, so memory stays bounded by a few chunks.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autorl.grading.lora import AdapterLayout, adapter_layout, lora_scale
from autorl.grading.model_checks import ADAPTER_CONFIG, check_loadable_model
from autorl.grading.weights import CorruptWeightsError, ModelFiles, TensorReaders, tensor_locations

if TYPE_CHECKING:
    import torch

__all__ = ["MISMATCH_FLAG", "SHAPE_FIELDS", "BaseModel", "IdentityReport", "compare_architecture"]

logger = logging.getLogger(__name__)

MISMATCH_FLAG = "model_mismatch"
SHAPE_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "head_dim",
)
"""Config fields that decide the shapes of a model's weights (compared when either config has them).
"""
CHUNK_ELEMENTS = 1 << 22
"""Values per streamed chunk (16 MiB in float32)."""
# Names of the input embeddings in the common architectures, for a base that ties lm_head to them.
_EMBEDDING_SUFFIXES = (
    "embed_tokens.weight",
    "wte.weight",
    "embed_in.weight",
    "word_embeddings.weight",
)
_LM_HEAD = "lm_head.weight"


@dataclass(frozen=True)
class _Source:
    """Where the submission's value of one base tensor comes from.

    Attributes:
        shape: The submission tensor's shape (decides whether it lines up with the base's).
        rows: ``(start, stop, W0 rows) -> the submission's rows start:stop``.
    """

    shape: tuple[int, ...]
    rows: Callable[[int, int, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class IdentityReport:
    """The identity checks of one submission.

    Attributes:
        differences: What differs from the base's architecture or vocabulary (empty: none).
        weight_distance: Relative weight distance to the base (0: a copy).
    """

    differences: tuple[str, ...]
    weight_distance: float

    @property
    def flag(self) -> str | None:
        """:data:`MISMATCH_FLAG` when the architecture or vocabulary differs, else None."""
        return MISMATCH_FLAG if self.differences else None

    def details(self) -> dict[str, Any]:
        """The fields a submission's details get: the distance, and the flag with its reason."""
        details: dict[str, Any] = {"weight_distance": self.weight_distance}
        if self.differences:
            details["flag"] = MISMATCH_FLAG
            details["flag_reason"] = "differs from the base model: " + "; ".join(self.differences)
        return details


def compare_architecture(base: dict[str, Any], submission: dict[str, Any]) -> list[str]:
    """Lists how a submission's ``config.json`` differs from the base's in architecture or
    vocabulary.

    Args:
        base: The base model's parsed ``config.json``.
        submission: The submission's parsed ``config.json``.

    Returns:
        One phrase per difference; empty when the architecture matches and the vocabulary is the
        base's or larger (added tokens).

    Examples:
        >>> base = {"model_type": "qwen3", "hidden_size": 128, "num_attention_heads": 2}
        >>> base["vocab_size"] = 1024
        >>> compare_architecture(base, {**base, "vocab_size": 1030})
        []
        >>> other = {**base, "hidden_size": 256, "vocab_size": 1000}
        >>> for line in compare_architecture(base, other):
        ...     print(line)
        hidden_size 256 (base: 128)
        head_dim 128 (base: 64)
        vocab_size 1000 (base: 1024, fewer tokens)
    """
    differences: list[str] = []
    for key in ("model_type", "architectures"):
        mine, theirs = submission.get(key), base.get(key)
        # A config without "architectures" loads by model_type alone, so only two lists are
        # compared.
        if mine != theirs and (key == "model_type" or (mine is not None and theirs is not None)):
            differences.append(f"{key} {mine!r} (base: {theirs!r})")
    mine_shape, base_shape = _shape(submission), _shape(base)
    for key in SHAPE_FIELDS:
        if mine_shape[key] != base_shape[key]:
            differences.append(f"{key} {mine_shape[key]!r} (base: {base_shape[key]!r})")
    mine_vocab, base_vocab = _field(submission, "vocab_size"), _field(base, "vocab_size")
    if not isinstance(mine_vocab, int) or not isinstance(base_vocab, int):
        if mine_vocab != base_vocab:
            differences.append(f"vocab_size {mine_vocab!r} (base: {base_vocab!r})")
    elif mine_vocab < base_vocab:
        differences.append(f"vocab_size {mine_vocab} (base: {base_vocab}, fewer tokens)")
    return differences


def _field(config: dict[str, Any], key: str) -> Any:
    """A config value, from the top level or else from a multimodal model's ``text_config``."""
    if config.get(key) is not None:
        return config[key]
    text = config.get("text_config")
    return text.get(key) if isinstance(text, dict) else None


def _shape(config: dict[str, Any]) -> dict[str, Any]:
    """The shape fields, with the defaults transformers applies (kv heads = heads, head_dim = hidden
    / heads).
    """
    shape = {key: _field(config, key) for key in SHAPE_FIELDS}
    if shape["num_key_value_heads"] is None:
        shape["num_key_value_heads"] = shape["num_attention_heads"]
    hidden, heads = shape["hidden_size"], shape["num_attention_heads"]
    if (
        shape["head_dim"] is None
        and isinstance(hidden, int)
        and isinstance(heads, int)
        and heads > 0
    ):
        shape["head_dim"] = hidden // heads
    return shape


class BaseModel:
    """The grader's copy of a cell's base model, read once and compared with every submission."""

    def __init__(self, model_dir: Path) -> None:
        """Index the base's config and tensors.

        Raises:
            FileNotFoundError: ``model_dir`` does not exist (the sweep's error, not the agent's).
            SubmissionRejected: The base folder is not a loadable full model.
        """
        if not model_dir.is_dir():
            raise FileNotFoundError(f"the cell's base model folder {model_dir} does not exist")
        self.model_dir = model_dir
        files = check_loadable_model(model_dir)
        if files.is_adapter:
            raise ValueError(
                f"the base model {model_dir} is an adapter; a cell's base must be a full model"
            )
        self.files = files
        self.config: dict[str, Any] = json.loads(
            (model_dir / "config.json").read_text(encoding="utf-8")
        )
        self.where = tensor_locations(files)

    def check(self, snapshot: Path, files: ModelFiles) -> IdentityReport:
        """Compares a submission (the grader's snapshot) with the base.

        Args:
            snapshot: The snapshot folder, already passed by :func:`check_loadable_model`.
            files: What :func:`check_loadable_model` returned for it.

        Returns:
            The differences and the weight distance.

        Raises:
            CorruptWeightsError: A weight file of the submission cannot be read.
        """
        if files.is_adapter:
            # Always applied to this base (autorl.grading.lora), so its architecture is the base's.
            config = json.loads((snapshot / ADAPTER_CONFIG).read_text(encoding="utf-8"))
            return IdentityReport((), self._adapter_distance(files, config))
        config = json.loads((snapshot / "config.json").read_text(encoding="utf-8"))
        differences = tuple(compare_architecture(self.config, config))
        return IdentityReport(differences, self._model_distance(files))

    # ---- distances ----------------------------------------------------------------------------

    def _model_distance(self, files: ModelFiles) -> float:
        """The distance of a full model: the submission's tensors matched to the base's by name."""
        where = tensor_locations(files)
        with TensorReaders() as reader:

            def lookup(name: str) -> _Source | None:
                found = _match_name(name, where)
                if found is None:
                    return None
                path = where[found]
                return _Source(
                    reader.shape(path, found),
                    lambda start, stop, w0: reader.rows(path, found, start, stop),
                )

            return self._distance(lookup, extra=_LM_HEAD if _LM_HEAD in where else None)

    def _adapter_distance(self, files: ModelFiles, config: dict[str, Any]) -> float:
        """The distance of an adapter's merged weights: base (or its replacement) plus each LoRA
        delta.
        """
        where = tensor_locations(files)
        layout = adapter_layout(where)
        if layout.conflicts:
            raise CorruptWeightsError(
                f"the adapter holds two tensors for base weight {layout.conflicts[0]!r} (e.g. as "
                "x.weight and x.base_layer.weight): save the adapter again with "
                "peft_model.save_pretrained(path)"
            )
        if layout.ignored:
            logger.info(
                "adapter tensors PEFT does not load (not counted): %s",
                ", ".join(layout.ignored[:5]),
            )
        with TensorReaders() as reader:

            def lookup(name: str) -> _Source | None:
                return _adapter_source(name, self._shape_of(name), layout, where, reader, config)

            touched = _LM_HEAD in layout.replacements or _LM_HEAD in layout.pairs
            return self._distance(lookup, extra=_LM_HEAD if touched else None)

    def _shape_of(self, name: str) -> tuple[int, ...] | None:
        """The base's shape of tensor ``name``, or None if the base has no such tensor."""
        if name not in self.where:
            return None
        with TensorReaders() as reader:
            return reader.shape(self.where[name], name)

    def _distance(self, lookup: Callable[[str], _Source | None], extra: str | None) -> float:
        """Streams every base tensor with its submission counterpart (``lookup``) into the distance.

        ``extra`` names a submission tensor the base does not store because it ties it to its input
        embeddings; it is compared with those embeddings.
        """
        plan = [(name, name) for name in sorted(self.where)]
        embedding = self._tied_embedding()
        if extra is not None and extra not in self.where and embedding is not None:
            plan.append((embedding, extra))
        vocab = _field(self.config, "vocab_size")
        squared_diff = squared_base = 0.0
        with TensorReaders() as base_reader:
            for base_name, sub_name in plan:
                path = self.where[base_name]
                shape = base_reader.shape(path, base_name)
                source = lookup(sub_name)
                if source is not None and not _lines_up(source.shape, shape, vocab):
                    source = None
                for start, stop in _row_chunks(shape):
                    w0 = base_reader.rows(path, base_name, start, stop).float()
                    squared_base += float(w0.square().sum())
                    diff = w0 if source is None else source.rows(start, stop, w0).float() - w0
                    squared_diff += float(diff.square().sum())
        if squared_base == 0.0:
            return 0.0 if squared_diff == 0.0 else math.inf
        return math.sqrt(squared_diff) / math.sqrt(squared_base)

    def _tied_embedding(self) -> str | None:
        """The base's input-embedding tensor when it ties ``lm_head`` to it (it then stores no
        lm_head).
        """
        if _LM_HEAD in self.where or self.config.get("tie_word_embeddings") is False:
            return None
        return next((n for n in sorted(self.where) if n.endswith(_EMBEDDING_SUFFIXES)), None)


def _match_name(name: str, where: dict[str, Path]) -> str | None:
    """The submission's name for base tensor ``name``: the same, or with a model prefix added or
    dropped (``model.norm.weight`` / ``norm.weight``), as checkpoints saved from a base class differ
    that way."""
    if name in where:
        return name
    if "." in name and (short := name.split(".", 1)[1]) in where:
        return short
    longer = [n for n in where if n.endswith("." + name) and n.count(".") == name.count(".") + 1]
    return longer[0] if len(longer) == 1 else None


def _lines_up(shape: tuple[int, ...], base: tuple[int, ...], vocab: Any) -> bool:
    """Whether a submission tensor of ``shape`` can be compared with the base's tensor of ``base``.

    The same shape; or, for a tensor with one row per token (an embedding or output layer: its rows
    are the base's ``vocab_size``), more rows of the same width, as adding tokens resizes it.

    >>> _lines_up((70, 16), (64, 16), 64), _lines_up((32, 16), (16, 16), 64)
    (True, False)
    >>> _lines_up((64, 32), (64, 16), 64)
    False
    """
    if shape == base:
        return True
    return (
        bool(base)
        and base[0] == vocab
        and len(shape) == len(base)
        and shape[1:] == base[1:]
        and shape[0] >= base[0]
    )


def _adapter_source(
    name: str,
    base_shape: tuple[int, ...] | None,
    layout: AdapterLayout,
    where: dict[str, Path],
    reader: TensorReaders,
    config: dict[str, Any],
) -> _Source | None:
    """The merged value of base tensor ``name`` under an adapter: its replacement (or W0) plus the
    LoRA delta.
    """
    replacement = layout.replacements.get(name)
    pair = layout.pairs.get(name)
    if replacement is not None:
        shape = reader.shape(where[replacement], replacement)
    elif base_shape is not None:
        shape = base_shape
    else:
        return None  # a LoRA pair on a tensor the base does not have (PEFT cannot place it either)
    delta_parts: tuple[torch.Tensor, torch.Tensor, bool] | None = None
    if pair is not None:
        a = reader.get(where[pair.a_key], pair.a_key).float()
        b = reader.get(where[pair.b_key], pair.b_key).float() * lora_scale(config, pair.module)
        transposed = _delta_orientation(
            a, b, shape, pair.embedding, bool(config.get("fan_in_fan_out"))
        )
        if transposed is None:
            logger.info(
                "LoRA pair of %s (A %s, B %s) does not fit the weight %s: not counted",
                name,
                a.shape,
                b.shape,
                shape,
            )
        else:
            delta_parts = (a, b, transposed)

    def rows(start: int, stop: int, w0: torch.Tensor) -> torch.Tensor:
        w = (
            reader.rows(where[replacement], replacement, start, stop).float()
            if replacement is not None
            else w0
        )
        if delta_parts is not None:
            a, b, transposed = delta_parts
            delta = a[:, start:stop].T @ b.T if transposed else b[start:stop] @ a
            w = w + delta
        return w

    return _Source(shape, rows)


def _delta_orientation(
    a: torch.Tensor, b: torch.Tensor, shape: tuple[int, ...], embedding: bool, fan_in_fan_out: bool
) -> bool | None:
    """Whether the delta ``B @ A`` is stored transposed in a weight of ``shape``; None if it fits
    neither way.

    PEFT transposes it for embeddings, and for ``fan_in_fan_out`` layers (GPT-2's Conv1D) — but it
    resets ``fan_in_fan_out`` on ``nn.Linear`` layers, so the flag alone cannot be trusted: the
    shapes decide, and the flag only breaks the tie of a square weight.
    """
    if a.dim() != 2 or b.dim() != 2 or len(shape) != 2:
        return None
    plain, flipped = (b.shape[0], a.shape[1]), (a.shape[1], b.shape[0])

    def fits(
        delta: tuple[int, int],
    ) -> bool:  # the weight's rows of a delta, which may have more (added tokens)
        return delta[1] == shape[1] and delta[0] >= shape[0]

    if embedding:
        return True if fits(flipped) else None
    if plain == flipped == shape:
        return fan_in_fan_out
    if fits(plain):
        return False
    return True if fits(flipped) else None


def _row_chunks(shape: tuple[int, ...]) -> list[tuple[int, int]]:
    """Row ranges covering a tensor in chunks of at most :data:`CHUNK_ELEMENTS` values (a 0-d
    tensor: one).

    >>> _row_chunks((10, 1 << 21))
    [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]
    >>> _row_chunks(())
    [(0, 1)]
    """
    if not shape:
        return [(0, 1)]
    per_row = max(1, math.prod(shape[1:]))
    step = max(1, CHUNK_ELEMENTS // per_row)
    return [(start, min(start + step, shape[0])) for start in range(0, shape[0], step)] or [(0, 0)]
