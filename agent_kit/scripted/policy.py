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

from agent_kit.protocol import StepResult


def env_api(method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """Call the cell's grading API (``$GRADING_SERVER_URL``) with its token; errors raise with the
    API's message."""
    request = urllib.request.Request(
        os.environ["GRADING_SERVER_URL"] + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={
            "Authorization": f"Bearer {os.environ['GRADING_TOKEN']}",
            "Content-Type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=600) as response:  # noqa: S310 - loopback URL from env
            return json.loads(response.read())  # type: ignore[no-any-return]
    except urllib.error.HTTPError as error:
        raise RuntimeError(
            f"{method} {path} -> HTTP {error.code}: {error.read().decode(errors='replace')}"
        ) from error


def _result(body: dict[str, Any]) -> StepResult:
    return StepResult(
        body["observation"],
        float(body["reward"]),
        bool(body["done"]),
        list(body["admissible_actions"]),
        dict(body.get("info") or {}),
    )


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
    """One episode's steps as few training sequences: while each step's prompt is the previous
    prompt plus its completion plus new text (no truncation in between), the steps share one
    sequence, so one forward pass learns every action of the episode instead of re-reading the
    prompt for each.

    >>> [s.turns() for s in pack(["Q>", "Q> a|ok>", "X>"], [" a|", " b|", " c|"])]
    [[('Q>', ' a|'), ('ok>', ' b|')], [('X>', ' c|')]]
    """
    samples: list[Sample] = []
    text = None
    for prompt, completion in zip(prompts, completions, strict=True):
        if text is not None and prompt.startswith(text):
            samples[-1].more.append((prompt[len(text) :], completion))
        else:
            samples.append(Sample(prompt, completion, weight))
        text = prompt + completion
    return samples


class LocalPolicy:
    """A causal LM being trained: sampling or greedy generation, SFT and policy-gradient updates."""

    def __init__(self, model_dir: str | Path, max_length: int) -> None:
        """Load model and tokenizer; sequences are cut to ``max_length`` tokens (prompt cut on the
        left)."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from agent_kit.hf_prefix import PrefixCache, supports_prefix_cache

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.max_length = max_length
        # Key/values of prompts generated from, reused by later prompts that start the same way;
        # emptied whenever the weights change (:meth:`_step`). None for models it cannot serve.
        self.prefix = (
            PrefixCache(self.model, max_bytes=512 << 20)
            if supports_prefix_cache(self.model.config)
            else None
        )
        self.sample = True
        # Sampling temperature; the policy-gradient updates score tokens at the same temperature, so
        # what they train is the distribution the rollouts were drawn from (TRL GRPO's
        # ``temperature``).
        self.temperature = 1.0
        # When set, sampling draws each row's noise from a generator keyed by this label, the row's
        # prompt and how many rows before it in the call have the same prompt (a GRPO group's
        # rollouts start alike), not from torch's global generator: rollouts with the same label see
        # the same noise whatever the weights, as long as their histories are the same
        # (:mod:`agent_kit.hf_noise`).
        self.noise: str | None = None

    def chat_prompt(self, messages: list[dict[str, str]]) -> str:
        """A conversation rendered with the model's chat template, ready for the assistant turn."""
        return str(
            self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        )

    # ---- GenerationEngine ---------------------------------------------------------------------

    def generate_chat(
        self,
        conversations: list[list[dict[str, str]]],
        *,
        max_new_tokens: int,
        stop: list[str] | None = None,
    ) -> list[str]:
        """Generate assistant replies."""
        return self.generate_text(
            [self.chat_prompt(c) for c in conversations], max_new_tokens=max_new_tokens, stop=stop
        )

    def generate_text(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str] | None = None
    ) -> list[str]:
        """Sample (or greedily decode, with ``sample = False``) a completion of each prompt; a row
        stops at its first stop string.

        Prompt prefixes encoded since the weights last changed are not encoded again
        (:attr:`prefix`): an episode's next prompt extends its last one, and a GRPO group's rollouts
        start from the same prompt.
        """
        from agent_kit.hf_prefix import generate_rows

        self.tokenizer.truncation_side = "left"
        encoded = self.tokenizer(
            prompts,
            truncation=True,
            max_length=max(1, self.max_length - max_new_tokens),
            add_special_tokens=False,
        )["input_ids"]
        rows = [self.torch.tensor(ids, dtype=self.torch.long) for ids in encoded]
        sampling: dict[str, Any] = {"do_sample": False}
        if self.sample and self.noise is not None:
            from agent_kit.hf_noise import keyed_sampling

            sampling = keyed_sampling(self.row_keys(prompts), self.temperature)
        elif self.sample:
            sampling = {"do_sample": True, "temperature": self.temperature, "top_k": 0}
        self.model.eval()
        return generate_rows(
            self.model,
            self.tokenizer,
            rows,
            self.prefix,
            max_new_tokens=max_new_tokens,
            stop=stop,
            **sampling,
        )

    def row_keys(self, prompts: list[str]) -> list[int]:
        """The noise key of each prompt's row: :attr:`noise`, the prompt, and its count among the
        prompts before it."""
        from agent_kit.hf_noise import noise_key

        seen: dict[str, int] = {}
        keys = []
        for prompt in prompts:
            keys.append(noise_key(self.noise, prompt, seen.get(prompt, 0)))
            seen[prompt] = seen.get(prompt, 0) + 1
        return keys

    # ---- training -----------------------------------------------------------------------------

    def token_row(self, sample: Sample) -> tuple[list[int], list[bool]]:
        """The sample's token ids, all turns in order, and which of them are learned (its
        completions'),
        cut to the last ``max_length`` (the end is kept, as a prompt is cut on the left)."""
        row: list[int] = []
        learned: list[bool] = []
        for context, completion in sample.turns():
            context_ids = self.tokenizer(context, add_special_tokens=False)["input_ids"]
            completion_ids = self.tokenizer(completion, add_special_tokens=False)["input_ids"][
                : self.max_length // 2
            ]
            row += context_ids + completion_ids
            learned += [False] * len(context_ids) + [True] * len(completion_ids)
        return row[-self.max_length :], learned[-self.max_length :]

    def _completion_logps(self, sample: Sample, temperature: float = 1.0) -> Any:
        """The log-probabilities (logits divided by ``temperature``) of the sample's learned tokens,
        its completions', as one 1-D tensor in order.

        One sequence per forward pass, unpadded: packed episodes differ a lot in length, and on a
        CPU a padded batch of them took 1.7 times as long per step (``bench/README.md``, "Policy
        updates").
        """
        torch = self.torch
        row, learned = self.token_row(sample)
        ids = torch.tensor([row])
        # Position i's logits predict token i + 1: score only where that token is learned.
        targets = torch.tensor(learned[1:]).nonzero().squeeze(1)
        if not len(targets):
            return torch.zeros(0)
        logits = self.model(input_ids=ids, logits_to_keep=targets).logits[0]
        logp = torch.log_softmax(logits.float() / temperature, dim=-1)
        return logp.gather(-1, ids[0, targets + 1].unsqueeze(-1)).squeeze(-1)

    def sequence_logps(self, samples: list[Sample]) -> list[float]:
        """Each sample's completions' summed log-probability at :attr:`temperature`, without
        gradients (what an
        update did to a batch: compare before and after)."""
        with self.torch.no_grad():
            return [float(self._completion_logps(s, self.temperature).sum()) for s in samples]

    def _batch_loss(self, batch: list[Sample]) -> Any:
        """Weighted mean over samples of the completion tokens' negative log-likelihood."""
        scored = [(s, self._completion_logps(s)) for s in batch]
        losses = [
            -logp.mean() * s.weight for s, logp in scored if len(logp)
        ]  # an empty completion learns nothing
        return (
            self.torch.stack(losses).sum() / len(batch)
            if losses
            else self.torch.zeros((), requires_grad=True)
        )

    def optimizer(self, lr: float) -> Any:
        """A fresh AdamW over the model's parameters."""
        return self.torch.optim.AdamW(self.model.parameters(), lr=lr)

    def _step(
        self,
        batch: list[Sample],
        optimizer: Any,
        micro_batch: int,
        loss_of: Callable[[int, list[Sample]], Any],
    ) -> float:
        """One optimizer step on exactly ``batch``: gradients of ``loss_of(index, part)`` (a part's
        mean loss) accumulated over the ``micro_batch``-sized parts, so a large RL batch fits in
        memory; the
        gradient norm clipped to 1. Returns the batch's loss."""
        self.model.train()
        optimizer.zero_grad()
        total = 0.0
        for index, start in enumerate(range(0, len(batch), micro_batch)):
            part = batch[start : start + micro_batch]
            loss = loss_of(index, part) * (len(part) / len(batch))  # the batch mean, part by part
            loss.backward()
            total += float(loss.detach())
        self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        optimizer.step()
        if self.prefix is not None:
            self.prefix.clear()  # kept key/values are the old weights'
        self.model.eval()
        return total

    def update(self, batch: list[Sample], optimizer: Any, micro_batch: int = 8) -> float:
        """One optimizer step on ``batch``'s weighted negative log-likelihood (SFT; with advantages
        as weights, REINFORCE); returns the batch's loss.

        ``optimizer`` (from :meth:`optimizer`) carries Adam's moment estimates across calls, as
        online RL's iterations need: a fresh Adam's first step moves every weight by ``lr`` whatever
        its gradient.
        """
        return self._step(batch, optimizer, micro_batch, lambda _, part: self._batch_loss(part))

    def clipped_update(
        self, batch: list[Sample], optimizer: Any, *, epochs: int, clip: float, micro_batch: int = 8
    ) -> list[float]:
        """``epochs`` optimizer steps on ``batch`` with PPO's clipped objective, each sample's
        ``weight`` its advantage, tokens scored at :attr:`temperature` (TRL GRPO's
        ``num_iterations``, ``epsilon``); returns each sample's summed log-probability under the
        rollout policy (the weights before the update, as its first step scored them; compare
        :meth:`sequence_logps` after it).

        The first step is :meth:`update`'s REINFORCE step (the probability ratio to the rollout
        policy is 1). Later steps reuse the same rollouts; a token whose probability has already
        moved by more than ``clip`` (relative) in its advantage's direction stops pulling, so
        several steps per batch learn more from each rollout without running away from the policy
        that played it.
        """
        torch = self.torch
        rollout_logps: list[
            Any
        ] = []  # per micro-batch, the log-probabilities under the rollout policy

        def clipped_loss(index: int, part: list[Sample]) -> Any:
            logps = [self._completion_logps(s, self.temperature) for s in part]
            if index == len(
                rollout_logps
            ):  # the first step: the weights are still the rollout policy's
                rollout_logps.append([logp.detach() for logp in logps])
            terms = []
            for sample, logp, before in zip(part, logps, rollout_logps[index], strict=True):
                if not len(logp):
                    continue
                ratio = torch.exp(logp - before)
                objective = torch.minimum(
                    ratio * sample.weight, ratio.clamp(1 - clip, 1 + clip) * sample.weight
                )
                terms.append(-objective.mean())
            return (
                torch.stack(terms).sum() / len(part)
                if terms
                else torch.zeros((), requires_grad=True)
            )

        for _ in range(epochs):
            self._step(batch, optimizer, micro_batch, clipped_loss)
        if not rollout_logps:  # no step taken: the weights are the rollout policy's
            return self.sequence_logps(batch)
        return [float(logp.sum()) for part in rollout_logps for logp in part]

    def train(
        self,
        samples: list[Sample],
        *,
        steps: int,
        batch_size: int,
        lr: float,
        seed: int = 0,
        deadline: float | None = None,
    ) -> tuple[float, int]:
        """Up to ``steps`` AdamW updates on random batches, stopping at ``deadline``
        (``time.monotonic``).

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
            loss_value = self.update(
                [rng.choice(samples) for _ in range(batch_size)], optimizer, micro_batch=batch_size
            )
        return loss_value, taken

    def save(self, target: Path) -> None:
        """Save model and tokenizer (a full model folder the grader can load)."""
        self.model.save_pretrained(str(target))
        self.tokenizer.save_pretrained(str(target))
