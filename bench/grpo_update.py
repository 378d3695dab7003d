"""Measurement: one online-RL update by TRL's ``GRPOTrainer`` (with a rollout function) and by the
scripted agent's :meth:`agent_kit.scripted.policy.LocalPolicy.clipped_update`, on the same rollouts.

The scripted agent's online GRPO (``agent_kit/scripted/interactive.py``) plays rollouts through the
grading API's env endpoints and updates the policy with ``LocalPolicy.clipped_update``: advantage =
return - group mean (no scaling, no KL term), ``num_iterations`` PPO-clipped steps on the batch,
one AdamW across iterations, the gradient norm clipped to 1. ``GRPOTrainer`` takes a
``rollout_func(prompts, trainer)`` that returns ``prompt_ids``, ``completion_ids`` and ``logprobs``;
with ``loss_type="grpo"``, ``scale_rewards="none"``, ``beta=0`` and a constant learning rate it
optimises the same objective. Both start from the same weights, train on the same 32 rollouts
(8 prompts x a group of 4, fixed token ids: no generation is timed) for two optimizer steps, and
are compared by CPU seconds and by how far apart their weights end up.

The model is the ``small`` model's shape (Qwen3, 4 layers, hidden 256, vocabulary 4096) with random
weights, its tokenizer a word-level one whose token ``w<i>`` is id ``i`` (so both sides see the
same ids). One torch thread (a cell's CPU).

    python bench/grpo_update.py
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

VOCAB = 4096


def tokenizer() -> Any:
    """A word-level tokenizer: ``w<i>`` is token id ``i`` for ``i >= 3``; 0 pads, 1 is unknown, 2
    ends (special tokens that no word contains: an added token is matched inside words)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<unk>": 1, "</s>": 2} | {f"w{i}": i for i in range(3, VOCAB)}
    inner = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    inner.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    inner.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(
        tokenizer_object=inner, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )


def model() -> Any:
    """A randomly initialised causal LM of the ``small`` model's shape (float32), seed 0."""
    from transformers import AutoModelForCausalLM

    from autorl.models.small import SMALL_CONFIG

    torch.manual_seed(0)
    config = SMALL_CONFIG.qwen3_config(
        vocab_size=VOCAB, max_position_embeddings=4096, pad_token_id=0, eos_token_id=2
    )
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


class Rollouts:
    """Fixed rollouts: per prompt (an episode id) a group of completions and their rewards."""

    def __init__(self, prompts: int, group: int, prompt_len: int, completion_len: int) -> None:
        """Random token ids (seed 1); reward 1 for about a third of the rollouts, else 0."""
        g = torch.Generator().manual_seed(1)
        self.group = group
        self.ids = [f"ep{e}" for e in range(prompts)]
        self.prompt = {
            e: torch.randint(3, VOCAB, (prompt_len,), generator=g).tolist() for e in self.ids
        }
        self.completion = {
            (e, k): torch.randint(3, VOCAB, (completion_len,), generator=g).tolist()
            for e in self.ids
            for k in range(group)
        }
        self.reward = {
            (e, k): float((i + k) % 3 == 0) for i, e in enumerate(self.ids) for k in range(group)
        }

    def rollout_func(self, prompts: list[str], trainer: Any) -> dict[str, Any]:
        """``GRPOTrainer``'s rollout function: the prompts come repeated ``group`` times in a
        row."""
        seen: dict[str, int] = {}
        out: dict[str, list[Any]] = {
            "prompt_ids": [],
            "completion_ids": [],
            "logprobs": [],
            "key": [],
        }
        for prompt in prompts:
            k = seen.get(prompt, 0)
            seen[prompt] = k + 1
            out["prompt_ids"].append(self.prompt[prompt])
            out["completion_ids"].append(self.completion[(prompt, k)])
            out["logprobs"].append([0.0] * len(self.completion[(prompt, k)]))  # unused without vLLM
            out["key"].append(f"{prompt}/{k}")
        return out

    def reward_func(
        self, prompts: list[Any], completions: list[Any], key: list[str], **_: Any
    ) -> list[float]:
        """The reward of each rollout (``key`` comes from :meth:`rollout_func`)."""
        return [self.reward[(k.split("/")[0], int(k.split("/")[1]))] for k in key]


def trl_update(rollouts: Rollouts, steps: int, lr: float, clip: float) -> tuple[float, Any]:
    """CPU seconds of ``GRPOTrainer.train()`` over one batch of the rollouts, and the trained
    model."""
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    policy = model()
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="grpo-bench-"),
        use_cpu=True,
        # GRPOConfig's defaults are bf16=True and gradient checkpointing on; the recipe trains in
        # float32 and keeps activations (a small model on a CPU).
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=len(rollouts.ids) * rollouts.group,
        num_generations=rollouts.group,
        max_steps=steps,
        num_iterations=steps,  # all steps on the one generated batch, like clipped_update's epochs
        epsilon=clip,
        beta=0.0,
        loss_type="grpo",
        scale_rewards="none",
        learning_rate=lr,
        lr_scheduler_type="constant",
        weight_decay=0.01,  # torch.optim.AdamW's default, which LocalPolicy.optimizer uses
        max_grad_norm=1.0,
        max_completion_length=max(len(c) for c in rollouts.completion.values()),
        temperature=1.0,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=policy,
        reward_funcs=rollouts.reward_func,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": rollouts.ids}),
        processing_class=tokenizer(),
        rollout_func=rollouts.rollout_func,
    )
    started = time.process_time()
    trainer.train()
    return time.process_time() - started, policy


def local_update(rollouts: Rollouts, steps: int, lr: float, clip: float) -> tuple[float, Any]:
    """CPU seconds of ``LocalPolicy.clipped_update`` on the same rollouts, and the trained model.

    Every rollout is passed, a zero advantage included, so the batch mean divides by the same 32 as
    ``GRPOTrainer``'s (the recipe's ``rl_iteration`` leaves zero-advantage rollouts out).
    """
    from agent_kit.scripted.interactive import group_advantages
    from agent_kit.scripted.policy import LocalPolicy, Sample

    policy = LocalPolicy.__new__(LocalPolicy)  # its __init__ loads a model folder; these are built
    policy.torch, policy.tokenizer, policy.model = torch, tokenizer(), model()
    policy.max_length, policy.prefix, policy.sample, policy.temperature, policy.noise = (
        4096,
        None,
        True,
        1.0,
        None,
    )
    keys = [(e, k) for e in rollouts.ids for k in range(rollouts.group)]
    advantages = group_advantages([rollouts.reward[key] for key in keys], rollouts.group)
    samples = [
        Sample(
            " ".join(f"w{i}" for i in rollouts.prompt[e]),
            " " + " ".join(f"w{i}" for i in rollouts.completion[(e, k)]),
            weight=advantage,
        )
        for (e, k), advantage in zip(keys, advantages, strict=True)
    ]
    optimizer = policy.optimizer(lr)
    started = time.process_time()
    policy.clipped_update(samples, optimizer, epochs=steps, clip=clip, micro_batch=8)
    return time.process_time() - started, policy.model


def logp_shift(rollouts: Rollouts, base: dict[str, Any], trained: Any) -> list[float]:
    """How the update changed each rollout's completion log-likelihood (summed over its tokens).

    Adam moves a weight whose gradient is float noise by about the learning rate in the noise's
    direction, so two equal updates can differ weight by weight; what they do to the rollouts'
    likelihood (what the objective is about) is the comparison that matters.
    """
    before = model()
    before.load_state_dict(base)
    out = []
    for e in rollouts.ids:
        for k in range(rollouts.group):
            ids = torch.tensor([rollouts.prompt[e] + rollouts.completion[(e, k)]])
            n = len(rollouts.completion[(e, k)])
            values = []
            for m in (before, trained):
                with torch.no_grad():
                    logits = m(input_ids=ids).logits[0, -n - 1 : -1]
                logp = torch.log_softmax(logits.float(), dim=-1)
                values.append(float(logp.gather(-1, ids[0, -n:].unsqueeze(-1)).sum()))
            out.append(values[1] - values[0])
    return out


def main() -> None:
    """Run both updates and print their CPU time and the distance between their weights."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps on the batch")
    parser.add_argument("--prompt-len", type=int, default=200, help="prompt tokens per rollout")
    parser.add_argument("--completion-len", type=int, default=40, help="completion tokens")
    parser.add_argument("--lr", type=float, default=1e-5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rollouts = Rollouts(8, 4, args.prompt_len, args.completion_len)
    base = model().state_dict()
    trl_s, trl_model = trl_update(rollouts, args.steps, args.lr, 0.2)
    local_s, local_model = local_update(rollouts, args.steps, args.lr, 0.2)
    deltas = {}
    for name, before in base.items():
        deltas[name] = [m.state_dict()[name] - before for m in (trl_model, local_model)]
    trl_delta = torch.cat([a.flatten() for a, _ in deltas.values()])
    local_delta = torch.cat([b.flatten() for _, b in deltas.values()])
    cosine = float(
        torch.nn.functional.cosine_similarity(trl_delta.double(), local_delta.double(), dim=0)
    )
    shifts = [logp_shift(rollouts, base, m) for m in (trl_model, local_model)]
    agree = max(abs(a - b) for a, b in zip(*shifts, strict=True))
    largest = max(abs(a) for a in shifts[0])
    print(
        f"{len(rollouts.completion)} rollouts of {args.prompt_len} + {args.completion_len} tokens, "
        f"{args.steps} optimizer steps each, lr {args.lr:g}, one torch thread"
    )
    print(f"  GRPOTrainer.train() with rollout_func  {trl_s:6.2f} CPU s")
    print(f"  LocalPolicy.clipped_update             {local_s:6.2f} CPU s")
    print(f"  cosine of the two weight updates {cosine:.4f}")
    print(
        f"  change of each rollout's log-likelihood: largest {largest:.4g}; the two updates'"
        f" changes differ by at most {agree:.3g}"
    )


if __name__ == "__main__":
    main()
