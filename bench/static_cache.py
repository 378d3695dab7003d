"""Measurement: could transformers' ``StaticCache`` replace the reserved layers of
``agent_kit.hf_prefix``?

The scripted agent's policy and the grader's HF engine generate through
:func:`agent_kit.hf_prefix.generate_rows`: a batch of left-padded prompts whose key/values are a
:func:`~agent_kit.hf_prefix.reserved_cache`, a ``DynamicCache`` whose layers (``_ReservedLayer``)
write each new token into room reserved ahead instead of ``torch.cat``-ing the whole cache, and
which :class:`~agent_kit.hf_prefix.PrefixCache` seeds with prompt prefixes it kept. transformers'
``StaticCache`` also preallocates and writes in place (``index_copy_``), but hands attention its
whole buffer (``max_cache_len`` columns, the unfilled ones masked) where a reserved layer hands a
view of the filled part.

Three caches generate the same greedy tokens from the same batch, side by side in one run:

- ``dynamic``: transformers' default ``DynamicCache`` (``torch.cat`` per token);
- ``reserved``: what the code uses (:func:`~agent_kit.hf_prefix.reserved_cache`);
- ``static``: ``StaticCache(max_cache_len=prompt width + new tokens)``, the smallest that fits.

Two cases: ``cold`` (no kept prefix: the batch's prompts are encoded in full) and ``prefix`` (each
row extends a prompt generated from before by ``--tail`` tokens, an episode's next step, so
:class:`~agent_kit.hf_prefix.PrefixCache` seeds the cache and only the tails are encoded; for
``static`` and ``dynamic`` the same seeded key/values are copied into their cache). Only
``generate`` is timed, in CPU seconds. The model is the ``small`` model's shape (Qwen3, 4 layers,
hidden 256, vocabulary 4096) with random weights: the cache's cost depends on the shape, not the
weights, and random token ids need no tokenizer. One torch thread (a cell's CPU).

    python bench/static_cache.py --reps 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_kit.hf_prefix import PrefixCache, left_padded, reserved_cache  # noqa: E402

KINDS = ("dynamic", "reserved", "static")


def small_shaped_model() -> Any:
    """A randomly initialised causal LM of the ``small`` model's shape (float32, eval mode)."""
    from transformers import AutoModelForCausalLM

    from autorl.models.small import SMALL_CONFIG

    torch.manual_seed(0)
    config = SMALL_CONFIG.qwen3_config(max_position_embeddings=4096)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def seeded_layers(reserved: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The key/values a seeded reserved cache holds (its filled columns), per layer."""
    return [(layer.keys, layer.values) for layer in reserved.layers]


def cache_of(kind: str, model: Any, width: int, new: int, seeded: Any | None) -> Any:
    """A fresh cache of ``kind`` for a batch ``width`` columns wide, holding ``seeded``'s prefix."""
    from transformers import DynamicCache, StaticCache

    config = model.config
    if kind == "reserved":
        if seeded is None:
            return reserved_cache(config, width + new)
        layers = [(k.clone(), v.clone(), k.shape[-2]) for k, v in seeded_layers(seeded)]
        # Same room as PrefixCache.prepare gives: the tail still to encode plus the new tokens.
        return reserved_cache(config, width - layers[0][2] + new, layers)
    if kind == "dynamic":
        if seeded is None:
            return DynamicCache(config=config)
        data = [(k.clone(), v.clone()) for k, v in seeded_layers(seeded)]
        return DynamicCache(ddp_cache_data=data, config=config)
    cache = StaticCache(config=config, max_cache_len=width + new)
    if seeded is not None:
        keys = seeded_layers(seeded)
        rows, heads, past, dim = keys[0][0].shape
        cache.early_initialization(rows, heads, dim, torch.float32, torch.device("cpu"))
        for layer, (k, v) in zip(cache.layers, keys, strict=True):
            layer.keys[:, :, :past] = k
            layer.values[:, :, :past] = v
            layer.cumulative_length.fill_(past)
    return cache


def timed_generate(model: Any, inputs: dict[str, Any], cache: Any, new: int) -> tuple[float, Any]:
    """CPU seconds of one greedy ``generate`` of exactly ``new`` tokens per row, and the tokens.

    CPU time, not wall time: with one torch thread it counts the work done, which other jobs on a
    shared machine stretch far less than the wall clock.
    """
    width = inputs["input_ids"].shape[1]
    started = time.process_time()
    with torch.no_grad():
        out = model.generate(
            **inputs,
            cache=cache,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
        )
    return time.process_time() - started, out[:, width:]


def batch(rows: int, low: int, high: int, seed: int) -> list[torch.Tensor]:
    """``rows`` random prompts of ``low`` to ``high`` tokens."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(low, high, (rows,), generator=g).tolist()
    return [torch.randint(1, 4096, (n,), generator=g) for n in lengths]


def run_case(
    model: Any, name: str, rows: list[torch.Tensor], new: int, reps: int, prefix: PrefixCache | None
) -> None:
    """Time every kind ``reps`` times, interleaved, and print the medians; the tokens must agree."""
    seeded = None
    inputs, width = left_padded(rows, 0, "cpu")
    if prefix is not None:
        prepared, width = prefix.prepare(rows, 0, new)
        seeded = prepared.pop("cache")
        inputs = prepared
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    tokens: dict[str, Any] = {}
    for _ in range(reps):
        for kind in KINDS:
            seconds, out = timed_generate(
                model, inputs, cache_of(kind, model, width, new, seeded), new
            )
            times[kind].append(seconds)
            tokens[kind] = out
    same = all(torch.equal(tokens[kind], tokens["dynamic"]) for kind in KINDS)
    base = statistics.median(times["reserved"])
    print(
        f"\n{name}: {len(rows)} rows, prompt width {width}, {new} new tokens, "
        f"{reps} runs each; same tokens from all three: {same}"
    )
    for kind in KINDS:
        median = statistics.median(times[kind])
        runs = ", ".join(f"{t:.2f}" for t in times[kind])
        print(
            f"  {kind:9s} median {median:6.2f} CPU s ({median / base:.2f}x reserved)  runs: {runs}"
        )


def main() -> None:
    """Run both cases."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3, help="runs of each cache per case")
    parser.add_argument("--rows", type=int, default=36, help="prompts per batch (a GRPO batch)")
    parser.add_argument("--new", type=int, default=48, help="tokens generated per row")
    parser.add_argument("--tail", type=int, default=40, help="tokens a next step adds (prefix)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = small_shaped_model()
    rows = batch(args.rows, 500, 600, seed=1)
    run_case(model, "cold", rows, args.new, args.reps, None)
    # Keep the prompts as generate_rows does after a step, then extend each by a tail.
    prefix = PrefixCache(model, max_bytes=2 << 30)
    first, width = prefix.prepare(rows, 0, args.new)
    cache = first.pop("cache")
    timed_generate(model, first, cache, args.new)
    prefix.keep_prompts(rows, cache, width)
    tails = batch(args.rows, args.tail, args.tail + 1, seed=2)
    extended = [torch.cat([r, t]) for r, t in zip(rows, tails, strict=True)]
    run_case(model, "prefix", extended, args.new, args.reps, prefix)


if __name__ == "__main__":
    main()
