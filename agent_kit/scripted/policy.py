"""Agent-side helpers for interactive tasks: the grading API's env endpoints as an env client, a
sampling engine, and small SFT and policy-gradient (GRPO) loops over (prompt, completion) pairs.

Used by the scripted recipes of interactive tasks (`tasks/<id>/agent/recipe.py`);
a coding agent would write the same. Everything runs in the agent's own process on its own CPUs.
"""

from __future__ import annotations

import json
import os
import random
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_kit.protocol import StepResult, cut_at_stop


def env_api(method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """Call the cell's grading API (``$GRADING_SERVER_URL``) with its token; errors raise with the API's message."""
    request = urllib.request.Request(
        os.environ["GRADING_SERVER_URL"] + path, data=None if body is None else json.dumps(body).encode(), method=method,
        headers={"Authorization": f"Bearer {os.environ['GRADING_TOKEN']}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=600) as response:  # noqa: S310 - loopback URL from env
            return json.loads(response.read())  # type: ignore[no-any-return]
    except urllib.error.HTTPError as error:
        raise RuntimeError(f"{method} {path} -> HTTP {error.code}: {error.read().decode(errors='replace')}") from error


def _result(body: dict[str, Any]) -> StepResult:
    return StepResult(body["observation"], float(body["reward"]), bool(body["done"]), list(body["admissible_actions"]),
                      dict(body.get("info") or {}))


class ApiEpisodes:
    """:class:`agent_kit.rollout.EpisodeEnvs` over the env endpoints (training episodes only).

    ``calls`` counts the env-endpoint requests made (reset, step and close), for the recipe's log.
    """

    def __init__(self) -> None:
        """No requests made yet."""
        self.calls = 0

    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        return env_api("POST", path, body)

    def episodes(self) -> list[str]:
        """The training episode ids."""
        return list(env_api("GET", "/env/episodes")["episodes"])

    def reset(self, episode_ids: list[str]) -> list[tuple[str, StepResult]]:
        """Start episodes (one request each)."""
        out = []
        for episode_id in episode_ids:
            body = self._call("/env/reset", {"episode_id": episode_id})
            out.append((str(body["session_id"]), _result(body)))
        return out

    def step(self, moves: list[tuple[str, str]]) -> list[StepResult]:
        """Step sessions (one request each)."""
        return [_result(self._call("/env/step", {"session_id": s, "action": a})) for s, a in moves]

    def close(self, handles: list[str]) -> None:
        """End sessions."""
        for handle in handles:
            self._call("/env/close", {"session_id": handle})


@dataclass
class Sample:
    """One training sequence: the prompt text (chat already rendered) and the completion to learn,
    optionally followed by more (context, completion) turns of the same episode (:func:`pack`)."""

    prompt: str
    completion: str
    weight: float = 1.0
    more: list[tuple[str, str]] = field(default_factory=list)

    def turns(self) -> list[tuple[str, str]]:
        """Every (context, completion) pair in order; only completions are learned."""
        return [(self.prompt, self.completion), *self.more]


def pack(prompts: list[str], completions: list[str], weight: float = 1.0) -> list[Sample]:
    """One episode's steps as few training sequences: while each step's prompt is the previous prompt
    plus its completion plus new text (no truncation in between), the steps share one sequence, so one
    forward pass learns every action of the episode instead of re-reading the prompt for each.

    >>> [s.turns() for s in pack(["Q>", "Q> a|ok>", "X>"], [" a|", " b|", " c|"])]
    [[('Q>', ' a|'), ('ok>', ' b|')], [('X>', ' c|')]]
    """
    samples: list[Sample] = []
    text = None
    for prompt, completion in zip(prompts, completions, strict=True):
        if text is not None and prompt.startswith(text):
            samples[-1].more.append((prompt[len(text):], completion))
        else:
            samples.append(Sample(prompt, completion, weight))
        text = prompt + completion
    return samples


class LocalPolicy:
    """A causal LM being trained: sampling or greedy generation, SFT and policy-gradient updates."""

    def __init__(self, model_dir: str | Path, max_length: int) -> None:
        """Load model and tokenizer; sequences are cut to ``max_length`` tokens (prompt cut on the left)."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.max_length = max_length
        self.sample = True
        # Sampling temperature; the policy-gradient updates score tokens at the same temperature, so
        # what they train is the distribution the rollouts were drawn from (TRL GRPO's ``temperature``).
        self.temperature = 1.0

    def chat_prompt(self, messages: list[dict[str, str]]) -> str:
        """A conversation rendered with the model's chat template, ready for the assistant turn."""
        return str(self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))

    # ---- GenerationEngine ---------------------------------------------------------------------

    def generate_chat(self, conversations: list[list[dict[str, str]]], *, max_new_tokens: int,
                      stop: list[str] | None = None) -> list[str]:
        """Generate assistant replies."""
        return self.generate_text([self.chat_prompt(c) for c in conversations], max_new_tokens=max_new_tokens, stop=stop)

    def generate_text(self, prompts: list[str], *, max_new_tokens: int, stop: list[str] | None = None) -> list[str]:
        """Sample (or greedily decode, with ``sample = False``) a completion of each prompt."""
        self.tokenizer.truncation_side = "left"
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, truncation=True,
                             max_length=max(1, self.max_length - max_new_tokens), add_special_tokens=False)
        self.model.eval()
        with self.torch.no_grad():
            out = self.model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=self.sample,
                temperature=self.temperature if self.sample else None,
                top_k=0 if self.sample else None,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        texts = self.tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        return [cut_at_stop(t, stop) for t in texts]

    # ---- training -----------------------------------------------------------------------------

    def _token_logps(self, batch: list[Sample], temperature: float = 1.0) -> tuple[Any, Any]:
        """Each sequence's per-token log-probability of its next token (logits divided by ``temperature``),
        and the mask of the tokens learned (its completions'), both ``(len(batch), width - 1)``."""
        torch = self.torch
        rows, masks = [], []
        for s in batch:
            row: list[int] = []
            learned: list[int] = []
            for context, completion in s.turns():
                context_ids = self.tokenizer(context, add_special_tokens=False)["input_ids"]
                completion_ids = self.tokenizer(completion, add_special_tokens=False)["input_ids"][: self.max_length // 2]
                row += context_ids + completion_ids
                learned += [0] * len(context_ids) + [1] * len(completion_ids)
            rows.append(row[-self.max_length:])  # the sequence's end is kept, as a prompt is cut on the left
            masks.append(learned[-self.max_length:])
        width = max(map(len, rows))
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(m)) + m for m in masks], dtype=torch.float32)
        attention = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        logits = self.model(input_ids=ids, attention_mask=attention).logits[:, :-1]
        logp = torch.log_softmax(logits.float() / temperature, dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        return logp, mask[:, 1:]

    def _batch_loss(self, batch: list[Sample]) -> Any:
        """Weighted mean over samples of the completion tokens' negative log-likelihood."""
        logp, mask = self._token_logps(batch)
        per_sample = -(logp * mask).sum(1) / mask.sum(1).clamp(min=1)
        weights = self.torch.tensor([s.weight for s in batch])
        return (per_sample * weights).mean()

    def optimizer(self, lr: float) -> Any:
        """A fresh AdamW over the model's parameters."""
        return self.torch.optim.AdamW(self.model.parameters(), lr=lr)

    def _step(self, batch: list[Sample], optimizer: Any, micro_batch: int,
              loss_of: Callable[[int, list[Sample]], Any]) -> float:
        """One optimizer step on exactly ``batch``: gradients of ``loss_of(index, part)`` (a part's mean
        loss) accumulated over the ``micro_batch``-sized parts, so a large RL batch fits in memory; the
        gradient norm clipped to 1. Returns the batch's loss."""
        self.model.train()
        optimizer.zero_grad()
        total = 0.0
        for index, start in enumerate(range(0, len(batch), micro_batch)):
            part = batch[start:start + micro_batch]
            loss = loss_of(index, part) * (len(part) / len(batch))  # the batch mean, part by part
            loss.backward()
            total += float(loss.detach())
        self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        optimizer.step()
        self.model.eval()
        return total

    def update(self, batch: list[Sample], optimizer: Any, micro_batch: int = 8) -> float:
        """One optimizer step on ``batch``'s weighted negative log-likelihood (SFT; with advantages as
        weights, REINFORCE); returns the batch's loss.

        ``optimizer`` (from :meth:`optimizer`) carries Adam's moment estimates across calls, as online RL's
        iterations need: a fresh Adam's first step moves every weight by ``lr`` whatever its gradient.
        """
        return self._step(batch, optimizer, micro_batch, lambda _, part: self._batch_loss(part))

    def clipped_update(self, batch: list[Sample], optimizer: Any, *, epochs: int, clip: float,
                       micro_batch: int = 8) -> float:
        """``epochs`` optimizer steps on ``batch`` with PPO's clipped objective, each sample's ``weight``
        its advantage, tokens scored at :attr:`temperature` (TRL GRPO's ``num_iterations``, ``epsilon``);
        returns the first step's loss.

        The first step is :meth:`update`'s REINFORCE step (the probability ratio to the rollout policy is 1).
        Later steps reuse the same rollouts; a token whose probability has already moved by more than
        ``clip`` (relative) in its advantage's direction stops pulling, so several steps per batch learn
        more from each rollout without running away from the policy that played it.
        """
        torch = self.torch
        rollout_logps: list[Any] = []  # per micro-batch, the log-probabilities under the rollout policy

        def clipped_loss(index: int, part: list[Sample]) -> Any:
            logp, mask = self._token_logps(part, self.temperature)
            if index == len(rollout_logps):  # the first step: the weights are still the rollout policy's
                rollout_logps.append(logp.detach())
            ratio = torch.exp(logp - rollout_logps[index])
            advantage = torch.tensor([s.weight for s in part]).unsqueeze(1)
            objective = torch.minimum(ratio * advantage, ratio.clamp(1 - clip, 1 + clip) * advantage)
            return (-(objective * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()

        losses = [self._step(batch, optimizer, micro_batch, clipped_loss) for _ in range(epochs)]
        return losses[0] if losses else 0.0

    def train(self, samples: list[Sample], *, steps: int, batch_size: int, lr: float, seed: int = 0,
              deadline: float | None = None) -> tuple[float, int]:
        """Up to ``steps`` AdamW updates on random batches, stopping at ``deadline`` (``time.monotonic``).

        Returns:
            The last loss and the number of steps taken.
        """
        import time

        if not samples:
            return 0.0, 0
        rng = random.Random(seed)
        optimizer = self.optimizer(lr)
        loss_value, taken = 0.0, 0
        for _ in range(steps):
            if deadline is not None and taken and time.monotonic() > deadline:
                break
            taken += 1
            loss_value = self.update([rng.choice(samples) for _ in range(batch_size)], optimizer, micro_batch=batch_size)
        return loss_value, taken

    def save(self, target: Path) -> None:
        """Save model and tokenizer (a full model folder the grader can load)."""
        self.model.save_pretrained(str(target))
        self.tokenizer.save_pretrained(str(target))
