"""Sampling with common random numbers (:mod:`agent_kit.hf_noise`): a true sample, and each row's
noise its key's."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from agent_kit.hf_noise import KeyedGumbelNoise
from agent_kit.scripted.policy import LocalPolicy


def test_greedy_over_keyed_noise_samples_the_softmax_at_the_temperature() -> None:
    """The Gumbel-max trick: the argmax of the processed scores is distributed as ``softmax(scores /
    T)``, each
    token's frequency over 6000 keys within four standard errors of its probability."""
    scores = torch.tensor([[2.0, 1.0, 0.0, -1.0, float("-inf")]])
    temperature, draws = 0.7, 6000
    counts = torch.zeros(5)
    for key in range(draws):
        counts[
            int(
                KeyedGumbelNoise([key], temperature)(
                    torch.zeros(1, 1, dtype=torch.long), scores
                ).argmax()
            )
        ] += 1
    expected = torch.softmax(scores[0] / temperature, dim=-1)
    for count, p in zip(counts.tolist(), expected.tolist(), strict=True):
        assert abs(count / draws - p) <= 4 * math.sqrt(p * (1 - p) / draws) + 1e-9, (
            counts,
            expected,
        )
    assert counts[4] == 0  # a masked token is never drawn


def test_a_keys_noise_does_not_depend_on_the_other_rows() -> None:
    """Row 0 of one batch and row 1 of another with the same key get the same draws, step after
    step."""
    scores = torch.zeros(2, 50)
    ids = torch.zeros(2, 1, dtype=torch.long)
    alone, shared = KeyedGumbelNoise([7, 8], 1.0), KeyedGumbelNoise([9, 7], 1.0)
    for _ in range(3):
        assert torch.equal(alone(ids, scores)[0], shared(ids, scores)[1])
    with pytest.raises(ValueError, match="3 rows to sample but 2 keys"):
        alone(torch.zeros(3, 1, dtype=torch.long), torch.zeros(3, 50))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        KeyedGumbelNoise([1], 0.0)


def test_a_labelled_policy_samples_a_prompt_alike_in_any_batch(tiny_model_dir: Path) -> None:
    """With :attr:`LocalPolicy.noise` set, a prompt's completion is a function of the label, the
    prompt and how often the prompt came before it in the call: the same in another batch, different
    under another label and for a repeat of the prompt (a GRPO group's rollouts), which torch's
    global generator cannot
    give."""
    policy = LocalPolicy(tiny_model_dir, max_length=128)
    policy.temperature, policy.noise = 1.0, "probe/0"
    prompts = [f"Q: {n} apples and {n + 3} more?\nA:" for n in range(6)]
    first = policy.generate_text(prompts[:3], max_new_tokens=8)
    torch.manual_seed(123)  # the global generator plays no part
    again = policy.generate_text(
        [prompts[5], prompts[1], prompts[0], prompts[0], prompts[2]], max_new_tokens=8
    )
    assert [again[2], again[1], again[4]] == first
    assert again[3] != again[2]  # the prompt's second row in the call has noise of its own
    policy.noise = "probe/1"
    assert policy.generate_text(prompts[:3], max_new_tokens=8) != first
