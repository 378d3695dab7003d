"""Sampling with common random numbers: each row's sampling noise is a function of a key, not of the
call.

``generate(do_sample=True)`` draws every token from torch's global generator, so the noise a rollout
is sampled with depends on everything sampled before it, in any row. Comparing two policies on
rollouts sampled that way compares two independent draws: on 32 DeepSearchQA rollouts a batch's mean
reward has a standard error of about 0.08 from the draw alone (bench/README.md, "Online RL curves").

:class:`KeyedGumbelNoise` gives every row a generator of its own, seeded by a key the caller derives
from the row's identity (the scripted policy keys a row by its prompt). The Gumbel-max trick turns
the noise into a sample: ``argmax(logits / T + G)``, with ``G`` i.i.d. standard Gumbel, is
distributed exactly as ``softmax(logits / T)``. So greedy decoding over these scores samples at
temperature ``T`` (no top-k or top-p), and two policies sampled with the same keys see the same
noise: where their distributions agree they write the same tokens, and their rewards differ only
where the policies do.

Shared by the scripted agent's policy (:mod:`agent_kit.scripted.policy`), like
:mod:`agent_kit.hf_stop`.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList


def noise_key(*parts: object) -> int:
    """A 63-bit seed of ``parts`` (their ``repr``), the same in every process (unlike ``hash`` of a
    str).

    >>> noise_key("probe", "Question: x", 0) == noise_key("probe", "Question: x", 0)
    True
    >>> noise_key("probe", "Question: x", 0) == noise_key("probe", "Question: x", 1)
    False
    """
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


class KeyedGumbelNoise(LogitsProcessor):
    """Adds a fixed Gumbel draw per row and position to ``scores / temperature``; with greedy
    decoding, a sample at ``temperature`` whose noise is a function of the row's key only.

    Row ``i``'s ``n``-th generated token is chosen with the ``n``-th draw of ``torch.Generator``
    seeded by ``keys[i]``, whatever the other rows are and whichever call generates it.
    """

    def __init__(self, keys: list[int], temperature: float) -> None:
        """Args: keys: one seed per row, in the batch's order; temperature: > 0."""
        if temperature <= 0:
            raise ValueError(
                f"temperature must be > 0 to sample, got {temperature}; decode greedily instead"
            )
        self.temperature = temperature
        self.generators = [torch.Generator().manual_seed(key) for key in keys]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """Each row's scores at the temperature, plus the row's next Gumbel draw over the
        vocabulary.
        """
        if scores.shape[0] != len(self.generators):
            raise ValueError(f"{scores.shape[0]} rows to sample but {len(self.generators)} keys")
        uniform = torch.stack(
            [torch.rand(scores.shape[1], generator=g, dtype=torch.float64) for g in self.generators]
        ).to(scores.device)
        # In float64 -log(-log(u)) is finite for every u that torch.rand returns but 0, whose -inf
        # only rules the token out of this one step (probability 2 ** -53).
        gumbel = -torch.log(-torch.log(uniform))
        return (scores.double() / self.temperature + gumbel).to(scores.dtype)  # type: ignore[return-value]


def keyed_sampling(keys: list[int], temperature: float) -> dict[str, Any]:
    """``generate``'s options to sample every row with its key's noise at ``temperature``."""
    return {
        "do_sample": False,
        "logits_processor": LogitsProcessorList([KeyedGumbelNoise(keys, temperature)]),
    }
