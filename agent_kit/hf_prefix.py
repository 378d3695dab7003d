"""Prefix key/value cache for HF generation: a prompt's start that was already encoded is not
encoded again.

Shared by both sides: the grader's HF engine (:mod:`autorl.engine.hf`) and the scripted agent's
policy (:class:`agent_kit.scripted.policy.LocalPolicy`, its RL rollouts).

Every prompt's key/values are kept after generation, keyed by its token ids. A new prompt reuses the
longest token prefix any kept prompt shares with it: the few-shot block shared by every prompt of
an evaluation, and an episode's own history, which the next step's prompt repeats and extends. A
batch is assembled as one left-padded cache (each row's reused key/values right-aligned before its
own uncached tail), so ``generate`` encodes only the tails; the positions of a row's tokens are the
ones plain left-padded generation gives them (``generate`` counts them from the attention mask).

Only models whose every layer is full attention with a plain per-layer key/value cache are served
this way (:func:`supports_prefix_cache`); others generate without it.
"""

from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

BLOCK = 16  # prefixes are indexed at every multiple of this many tokens


def supports_prefix_cache(config: Any) -> bool:
    """Whether the model's layers are all full attention (no sliding window, no recurrent state)."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None:
        return all(t == "full_attention" for t in layer_types)
    return not (getattr(text, "sliding_window", None) and getattr(text, "use_sliding_window", True))


@functools.cache
def _reserved_layer_class() -> type:
    """A ``DynamicLayer`` that appends into room reserved ahead (defined on first use: transformers
    is heavy).
    """
    from transformers.cache_utils import DynamicLayer

    class _ReservedLayer(DynamicLayer):
        """A key/value layer that writes each step's keys into spare room instead of concatenating.

        ``DynamicLayer`` copies the whole cache on every token (``torch.cat``): for long prompts in
        large batches that copying is a large share of the generation time. ``keys``/``values`` are
        views of the filled part of the buffers, so everything that reads them sees what
        ``DynamicLayer`` gives; when something else replaced them (crop, batch selection) the
        buffers are rebuilt from them.
        """

        def __init__(self, spare: int) -> None:
            super().__init__()  # type: ignore[no-untyped-call]
            self.spare = spare
            self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None
            self._filled = 0
            # The keys handed out last: anything else was set from outside.
            self._view: torch.Tensor | None = None

        def seed(self, keys: torch.Tensor, values: torch.Tensor, filled: int) -> None:
            """Start from buffers whose first ``filled`` columns hold the prompt prefix's
            key/values.
            """
            self.lazy_initialization(keys, values)
            self._buffers, self._filled = (keys, values), filled
            self._publish(self._buffers)

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            buffers = self._buffers
            if (
                buffers is None or self.keys is not self._view
            ):  # first update, or crop / batch selection
                kept = self.keys is not None and self.values is not None and self.keys.numel() > 0
                old_keys = self.keys if kept else key_states[:, :, :0]
                old_values = self.values if kept else value_states[:, :, :0]
                buffers = self._grow(old_keys, old_values, need=old_keys.shape[-2])  # type: ignore[union-attr, arg-type]
            new = key_states.shape[-2]
            if self._filled + new > buffers[0].shape[-2]:
                filled = self._filled
                buffers = self._grow(
                    buffers[0][:, :, :filled], buffers[1][:, :, :filled], need=filled + new
                )
            buffers[0][:, :, self._filled : self._filled + new] = key_states
            buffers[1][:, :, self._filled : self._filled + new] = value_states
            self._filled += new
            return self._publish(buffers)

        def _publish(
            self, buffers: tuple[torch.Tensor, torch.Tensor]
        ) -> tuple[torch.Tensor, torch.Tensor]:
            keys, values = buffers[0][:, :, : self._filled], buffers[1][:, :, : self._filled]
            self.keys, self.values, self._view = keys, values, keys
            return keys, values

        def _grow(
            self, keys: torch.Tensor, values: torch.Tensor, *, need: int
        ) -> tuple[torch.Tensor, torch.Tensor]:
            """New buffers with room for ``need`` columns plus ``spare``, holding
            ``keys``/``values`` first.
            """
            filled = keys.shape[-2]
            new_keys = keys.new_empty((*keys.shape[:2], need + self.spare, keys.shape[-1]))
            new_values = values.new_empty((*values.shape[:2], need + self.spare, values.shape[-1]))
            new_keys[:, :, :filled], new_values[:, :, :filled] = keys, values
            self._buffers, self._filled = (new_keys, new_values), filled
            return self._buffers

    return _ReservedLayer


def reserved_cache(
    config: Any, spare: int, prefix: list[tuple[torch.Tensor, torch.Tensor, int]] | None = None
) -> Any:
    """A ``DynamicCache`` whose layers append into reserved room (``spare`` columns beyond what they
    are handed).

    ``prefix``: per layer, key and value buffers (``[rows, heads, capacity, head_dim]``) whose first
    ``filled`` columns hold the prompt prefix; None: empty layers, sized by their first update.
    """
    from transformers import DynamicCache

    layer_class = _reserved_layer_class()
    cache = DynamicCache(config=config)
    layers = [layer_class(spare) for _ in cache.layers]
    for layer, seeded in zip(layers, prefix or [], strict=False):
        layer.seed(*seeded)
    cache.layers = layers
    return cache


def _row_kv(cache: Any, row: int, start: int, end: int) -> torch.Tensor:
    """Row ``row``'s key/values of columns ``start:end`` in every layer of ``cache``, copied into
    one tensor.
    """
    parts = [
        t
        for layer in cache.layers
        for t in (layer.keys[row, :, start:end], layer.values[row, :, start:end])
    ]
    return torch.stack(parts).view(len(cache.layers), 2, *parts[0].shape)


@dataclass
class _Entry:
    ids: torch.Tensor  # 1-D token ids whose key/values are kept
    # Their key/values in one tensor, [layers, 2 (keys, values), heads, tokens, head_dim]: a row is
    # copied into or out of a batch with one operation, not one per layer.
    kv: torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()


def common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    """Length of the common prefix of two 1-D token id tensors.

    >>> common_prefix(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4, 5]))
    2
    """
    m = min(len(a), len(b))
    if m == 0:
        return 0
    differ = (a[:m] != b[:m]).nonzero()
    return int(differ[0, 0]) if len(differ) else m


def _block_digests(ids: torch.Tensor) -> Iterator[tuple[int, bytes]]:
    """``(length, digest of ids[:length])`` for every whole block of ``ids`` (one pass over
    them).
    """
    running = hashlib.blake2b(digest_size=16)
    data = ids.to(torch.int64).numpy().tobytes()
    for end in range(BLOCK, len(ids) + 1, BLOCK):
        running.update(data[(end - BLOCK) * 8 : end * 8])
        yield end, running.copy().digest()


class PrefixCache:
    """Kept key/values of earlier prompts, least recently used dropped beyond ``max_bytes``.

    Entries live on the model's device. A prompt that extends a kept one replaces it (an episode
    keeps one entry, its latest prompt).
    """

    def __init__(self, model: Any, *, max_bytes: int, min_shared_tokens: int = 16) -> None:
        """Args: model: the engine's model; max_bytes: memory kept at most; min_shared_tokens: a
        prefix shared by a batch's rows is encoded once on its own when it is at least this long."""
        self.model = model
        self.max_bytes = max_bytes
        self.min_shared_tokens = min_shared_tokens
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._index: dict[
            bytes, int
        ] = {}  # digest of a block-aligned prefix -> the latest entry holding it
        self._next_key = 0
        self._bytes = 0
        self.reused_tokens = 0  # prompt tokens served from the cache (for benchmarks)
        self.encoded_tokens = 0  # prompt tokens encoded

    def clear(self) -> None:
        """Drop every entry (the weights changed)."""
        self._entries.clear()
        self._index.clear()
        self._bytes = 0

    def lookup(self, ids: torch.Tensor) -> tuple[int, _Entry | None]:
        """The longest kept prefix of ``ids``: its length and the entry holding it (marked recently
        used).

        Found through the block index, then extended token by token within the entry found.
        """
        found_key = None
        for _, digest in _block_digests(ids):
            key = self._index.get(digest)
            if key is None or key not in self._entries:
                break
            found_key = key
        # No whole block kept (or a prompt shorter than one): the latest entries, compared directly.
        candidates = (
            list(self._entries.items())[-4:]
            if found_key is None
            else [(found_key, self._entries[found_key])]
        )
        best, found, best_key = 0, None, None
        for key, entry in candidates:
            length = common_prefix(entry.ids, ids)
            if length > best:
                best, found, best_key = length, entry, key
        if best_key is not None:
            self._entries.move_to_end(best_key)
        return best, found

    def store(self, ids: torch.Tensor, kv: torch.Tensor) -> None:
        """Keep the key/values of ``ids`` (``[layers, 2, heads, len(ids), head_dim]``, owned from
        now on: no slice of a larger tensor, which would keep all of it alive), replacing entries
        they extend."""
        if len(ids) == 0:
            return
        length, extended = self.lookup(ids)
        if extended is not None and length == len(
            extended.ids
        ):  # ``ids`` extends it: it is of no further use
            key = next(k for k, e in self._entries.items() if e is extended)
            self._bytes -= self._entries.pop(key).nbytes
        entry = _Entry(ids.clone(), kv)
        if entry.nbytes > self.max_bytes:
            return
        self._entries[self._next_key] = entry
        for _, digest in _block_digests(entry.ids):
            self._index[digest] = self._next_key
        self._next_key += 1
        self._bytes += entry.nbytes
        while self._bytes > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= dropped.nbytes
        if len(self._index) > 64 * (len(self._entries) + 1) * (
            1 + max((len(e.ids) for e in self._entries.values()), default=0) // BLOCK
        ):
            self._index = {
                d: k for d, k in self._index.items() if k in self._entries
            }  # drop stale digests

    def encode(self, ids: torch.Tensor) -> None:
        """Encode ``ids`` on their own (reusing what is kept of them) and keep their key/values."""
        from transformers import DynamicCache

        kept, entry = self.lookup(ids)
        if kept >= len(ids):
            return
        cache = DynamicCache(config=self.model.config)
        if entry is not None and kept:
            cache = DynamicCache(
                ddp_cache_data=[(kv[0, None, :, :kept], kv[1, None, :, :kept]) for kv in entry.kv],
                config=self.model.config,
            )
        device = self.model.device
        with torch.no_grad():
            out = self.model(
                input_ids=ids[None, kept:].to(device),
                past_key_values=cache,
                use_cache=True,
                position_ids=torch.arange(kept, len(ids), device=device)[None],
            )
        self.encoded_tokens += len(ids) - kept
        self.store(ids, _row_kv(out.past_key_values, 0, 0, len(ids)))

    def prepare(
        self, rows: list[torch.Tensor], pad_id: int, max_new_tokens: int
    ) -> tuple[dict[str, Any], int]:
        """The ``generate`` inputs of a batch of prompts (token ids, unpadded), reusing kept
        prefixes.

        Returns:
            ``input_ids`` and ``attention_mask`` (left-padded to the longest row),
            ``past_key_values`` (a :func:`reserved_cache` holding the reused prefixes, with room
            for the tail and ``max_new_tokens``), and the number of prompt columns (the padded
            length).
        """
        self._encode_shared(rows)
        kept, found = self._kept(rows)
        # Every row encodes as many columns as the row with the most uncached tokens: a row far
        # behind the others (a new episode, a prompt whose start was cut) is encoded on its own
        # first instead.
        tails = sorted(len(ids) - k for ids, k in zip(rows, kept, strict=True))
        limit = max(32, 2 * tails[len(tails) // 2])
        behind = [ids for ids, k in zip(rows, kept, strict=True) if len(ids) - k > limit]
        if behind and len(behind) < len(rows):
            for ids in behind:
                self.encode(ids[:-1])
            kept, found = self._kept(rows)
        inputs, width = left_padded(rows, pad_id, self.model.device)
        tail = max(
            len(ids) - k for ids, k in zip(rows, kept, strict=True)
        )  # columns every row must encode
        past = width - tail
        self.reused_tokens += sum(max(0, len(ids) - tail) for ids in rows)
        self.encoded_tokens += sum(min(len(ids), tail) for ids in rows)
        spare = tail + max_new_tokens  # columns this batch's generate appends
        if past <= 0:
            inputs["past_key_values"] = reserved_cache(self.model.config, spare)
            return inputs, width
        reference = next(e for e in found if e is not None).kv
        layers_, _, heads, _, dim = reference.shape
        # One buffer for every layer's keys and values, so that each row is filled with one copy.
        buffer = reference.new_empty((layers_, 2, len(rows), heads, past + spare, dim))
        for i, (ids, entry) in enumerate(zip(rows, found, strict=True)):
            need = (
                max(0, len(ids) - tail) if entry is not None else 0
            )  # this row's tokens before the tail
            # Padding: masked, but must not be NaN garbage in the product.
            buffer[:, :, i, :, : past - need] = 0
            if need:  # right-aligned in the past columns
                buffer[:, :, i, :, past - need : past] = entry.kv[:, :, :, :need]  # type: ignore[union-attr]
        layers = [(buffer[layer, 0], buffer[layer, 1], past) for layer in range(layers_)]
        inputs["past_key_values"] = reserved_cache(self.model.config, spare, layers)
        return inputs, width

    def keep_prompts(self, rows: list[torch.Tensor], cache: Any, width: int) -> None:
        """After ``generate``: keep each row's prompt key/values from the batch's final
        ``cache``.
        """
        for i, ids in enumerate(rows):
            self.store(ids, _row_kv(cache, i, width - len(ids), width))

    def _kept(self, rows: list[torch.Tensor]) -> tuple[list[int], list[_Entry | None]]:
        """For each row: how many of its tokens are kept (never all: the last one is fed) and
        where.
        """
        kept, found = [], []
        for ids in rows:
            length, entry = self.lookup(ids)
            kept.append(
                min(length, len(ids) - 1)
            )  # the last prompt token's logits pick the first new token
            found.append(entry)
        return kept, found

    def _encode_shared(self, rows: list[torch.Tensor]) -> None:
        """Encode the prefix every row shares once, on its own, when no row has it kept yet."""
        if len(rows) < 2:
            return
        shared = min(common_prefix(rows[0], ids) for ids in rows[1:])
        shared = min(shared, min(len(ids) for ids in rows) - 1)
        if shared < self.min_shared_tokens:
            return
        kept, _ = self.lookup(rows[0][:shared])
        if shared - kept >= self.min_shared_tokens:
            self.encode(rows[0][:shared])


def left_padded(rows: list[torch.Tensor], pad_id: int, device: Any) -> tuple[dict[str, Any], int]:
    """``input_ids`` and ``attention_mask`` of ``rows`` left-padded to the longest, and that
    length.
    """
    width = max(len(ids) for ids in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, ids in enumerate(rows):
        input_ids[i, width - len(ids) :] = ids
        mask[i, width - len(ids) :] = 1
    return {"input_ids": input_ids.to(device), "attention_mask": mask.to(device)}, width


def generate_rows(
    model: Any,
    tokenizer: Any,
    rows: list[torch.Tensor],
    prefix: PrefixCache | None,
    *,
    max_new_tokens: int,
    stop: list[str] | None,
    **sampling: Any,
) -> list[str]:
    """One ``generate`` call over prompts given as token ids: kept prefixes reused (when ``prefix``
    is given, and the prompts' key/values kept in it afterwards), each row stopped at its first stop
    string; the generated texts, cut at the stop (:func:`agent_kit.protocol.cut_at_stop`), in input
    order.

    ``sampling``: ``generate``'s decoding options (``do_sample``, ``temperature``, ...).
    """
    from transformers import StoppingCriteriaList

    from agent_kit.hf_stop import StopOnStrings
    from agent_kit.protocol import cut_at_stop

    pad_id = int(tokenizer.pad_token_id)
    if prefix is not None:
        inputs, width = prefix.prepare(rows, pad_id, max_new_tokens)
    else:
        inputs, width = left_padded(rows, pad_id, model.device)
    criteria = StoppingCriteriaList([StopOnStrings(tokenizer, stop, width)]) if stop else None
    with torch.no_grad():
        generated = model.generate(
            **inputs,
            max_new_tokens=max_new_tokens,
            pad_token_id=pad_id,
            stopping_criteria=criteria,
            return_dict_in_generate=True,
            **sampling,
        )
    if prefix is not None and generated.past_key_values is not None:
        prefix.keep_prompts(rows, generated.past_key_values, width)
    texts = tokenizer.batch_decode(generated.sequences[:, width:], skip_special_tokens=True)
    return [cut_at_stop(text, stop) for text in texts]
