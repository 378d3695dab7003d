"""Measurement: one SFT step of the interactive recipes, padded batch vs one unpadded sequence at a
time.

:class:`agent_kit.scripted.policy.LocalPolicy` scores every training sequence in a forward pass of
its own, with the LM head only where a completion token is learned. Before, a step's sequences went
through one left-padded batch. Packed episodes differ a lot in length (an ALFWorld one holds 1 to 20
actions), so the padded batch computed many pad positions. This script times both on the same
batches, side by side in one run, and checks they give the same loss:

- ``padded``: the earlier computation, kept here as the reference (``padded_loss``);
- ``unpadded``: :meth:`LocalPolicy.update`'s loss, as the recipe runs it.

The batches are the ALFWorld recipe's: the searching expert's packed games of the default fixture,
as many per step as the recipe's cell takes (``--batch``, 5), on the `small` model, one torch thread
(a cell's CPU). Each step is a forward and backward pass; no weights change, so both see the same
model.

    python bench/policy_update_speed.py --steps 20
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def padded_loss(policy: Any, batch: list[Any]) -> Any:
    """The earlier loss: one left-padded batch, logits at every position, masked to the
    completions.
    """
    torch = policy.torch
    rows, masks = zip(*(policy.token_row(sample) for sample in batch), strict=True)
    width = max(map(len, rows))
    pad = policy.tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[False] * (width - len(m)) + m for m in masks], dtype=torch.float32)[:, 1:]
    attention = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    logits = policy.model(input_ids=ids, attention_mask=attention).logits[:, :-1]
    logp = (
        torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    )
    per_sample = -(logp * mask).sum(1) / mask.sum(1).clamp(min=1)
    return (per_sample * torch.tensor([s.weight for s in batch])).mean()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=20, help="SFT steps timed per variant")
    parser.add_argument(
        "--batch", type=int, default=5, help="packed games per step (the ALFWorld cell's)"
    )
    parser.add_argument("--games", type=int, default=60, help="expert games played for the samples")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ.get("AUTORL_CACHE_DIR", Path.home() / ".cache/autorl")),
    )
    args = parser.parse_args()

    import torch

    from agent_kit.scripted.interactive import expert_samples
    from agent_kit.scripted.policy import LocalPolicy
    from autorl.envs.host import local_episode_client
    from autorl.envs.training import training_episode_ids
    from autorl.models.small import ensure_small_model
    from autorl.task_code.alfworld.agent.recipe import make_recipe
    from autorl.task_spec import get_task
    from autorl.tasks import build_task_data, eval_options
    from bench.online_rl_curve import LocalEnvs

    torch.set_num_threads(1)
    spec = get_task("alfworld")
    data = build_task_data(spec, "fixture", args.cache_dir / "tasks", seed=0, options={})
    envs = LocalEnvs(
        local_episode_client(
            "alfworld", "alfworld", data.private_dir, eval_options(spec, "fixture", {})
        )
    )
    recipe = make_recipe()
    policy = LocalPolicy(ensure_small_model(args.cache_dir), recipe.max_length)
    ids = training_episode_ids(data.public_dir)[: args.games]
    samples, _ = expert_samples(recipe, envs, ids, policy, deadline=time.monotonic() + 3600)
    rng = random.Random(0)
    batches = [[rng.choice(samples) for _ in range(args.batch)] for _ in range(args.steps)]
    variants = {"padded": lambda b: padded_loss(policy, b), "unpadded": policy._batch_loss}
    seconds: dict[str, float] = {}
    losses: dict[str, list[float]] = {}
    policy.model.train()
    for name, loss_of in variants.items():
        started, values = time.monotonic(), []
        for batch in batches:
            policy.model.zero_grad()
            loss = loss_of(batch)
            loss.backward()
            values.append(float(loss.detach()))
        seconds[name], losses[name] = (time.monotonic() - started) / len(batches), values
    differs = max(abs(a - b) for a, b in zip(losses["padded"], losses["unpadded"], strict=True))
    tokens = sum(
        len(policy.tokenizer("".join(c + d for c, d in s.turns()))["input_ids"])
        for b in batches
        for s in b
    )
    print(
        f"{len(samples)} packed games from {len(ids)} expert games; {args.steps} steps of "
        f"{args.batch}, {tokens / args.steps:.0f} tokens a step"
    )
    for name in variants:
        print(f"{name:>9}: {seconds[name]:.3f} s a step")
    print(
        f"padded / unpadded: {seconds['padded'] / seconds['unpadded']:.2f}x; largest loss "
        f"difference {differs:.2e}"
    )


if __name__ == "__main__":
    main()
