"""The scripted agent's recipe for interactive tasks: SFT on expert trajectories, then online RL.

1. Expert trajectories are played through the grading API's env endpoints on training episodes
   (the task's recipe supplies the expert, e.g. a planner's move arriving as ``info["expert_action"]``,
   or an answer known from the public split).
   Each step becomes a (prompt in the eval protocol, expert completion) pair, an episode's pairs packed
   into one sequence where each prompt extends the last; SFT on them; submit.
2. Online RL (GRPO without a KL term, ``agent.online_grpo``): each iteration plays ``group`` sampled
   rollouts of a few training episodes through the env endpoints, gives every step of a rollout the
   advantage ``episode reward - group mean``, and takes ``num_iterations`` policy-gradient steps on them,
   PPO-clipped after the first; submit.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_kit.rollout import Episode, EpisodeProtocol, play
from agent_kit.scripted.policy import ApiEpisodes, LocalPolicy, Sample, pack


@dataclass
class InteractiveRecipe:
    """What differs between tasks.

    Attributes:
        protocol: The eval protocol (prompts and action parsing).
        expert: The expert's raw completion for an episode's next step (None: stop).
        max_steps: Step limit of training rollouts.
        max_length: Token limit of training sequences.
        expert_episodes: How many training episodes to play with the expert.
    """

    protocol: EpisodeProtocol
    expert: Callable[[Episode], str | None]
    max_steps: int
    max_length: int
    expert_episodes: int


class _Recording:
    """Wraps a protocol to keep the rendered prompt of every step of every episode."""

    def __init__(self, inner: EpisodeProtocol, policy: LocalPolicy) -> None:
        self.inner, self.policy = inner, policy
        self.mode, self.max_new_tokens, self.stop = inner.mode, inner.max_new_tokens, inner.stop
        self.prompts: dict[int, list[str]] = {}

    def text(self, rendered: Any) -> str:
        return rendered if isinstance(rendered, str) else self.policy.chat_prompt(rendered)

    def render(self, episode: Episode) -> Any:
        rendered = self.inner.render(episode)
        self.prompts.setdefault(id(episode), []).append(self.text(rendered))
        return rendered

    def parse(self, episode: Episode, output: str) -> str:
        return self.inner.parse(episode, output)


def expert_samples(recipe: InteractiveRecipe, envs: ApiEpisodes, ids: list[str], policy: LocalPolicy,
                   deadline: float) -> tuple[list[Sample], list[float]]:
    """Play ``ids`` with the expert until ``deadline`` (at least two episodes); returns the training
    sequences (each episode's steps packed, :func:`~agent_kit.scripted.policy.pack`) and the expert's
    reward per episode played."""
    recorder = _Recording(recipe.protocol, policy)
    samples: list[Sample] = []
    rewards: list[float] = []
    eos = policy.tokenizer.eos_token or ""
    for episode_id in ids:
        if len(rewards) >= 2 and time.monotonic() > deadline:
            break
        ((handle, first),) = envs.reset([episode_id])
        episode = Episode(episode_id, handle, first)
        prompts, completions = [], []
        try:
            while not episode.current.done and episode.steps < recipe.max_steps:
                completion = recipe.expert(episode)
                if completion is None:
                    break
                prompts.append(recorder.text(recipe.protocol.render(episode)))
                completions.append(completion + (eos if recipe.protocol.mode == "chat" else ""))
                action = recipe.protocol.parse(episode, completion)
                (result,) = envs.step([(handle, action)])
                episode.record(completion, action, result)
        finally:
            envs.close([handle])
        samples += pack(prompts, completions)
        rewards.append(episode.current.reward)
    return samples, rewards


def rl_iteration(recipe: InteractiveRecipe, envs: ApiEpisodes, ids: list[str], group: int, policy: LocalPolicy,
                 optimizer: Any, *, epochs: int, clip: float) -> float:
    """``epochs`` clipped policy-gradient steps (:meth:`LocalPolicy.clipped_update` with ``optimizer``) on
    ``group`` sampled rollouts of each of ``ids``, every rollout's steps in it once; returns their mean reward."""
    recorder = _Recording(recipe.protocol, policy)
    policy.sample = True
    played = play(policy, envs, [e for e in ids for _ in range(group)], recorder, max_steps=recipe.max_steps,
                  concurrency=len(ids) * group)
    rewards = [e.current.reward for e in played]
    samples = []
    for start in range(0, len(played), group):
        chunk = played[start:start + group]
        mean = sum(e.current.reward for e in chunk) / len(chunk)
        for episode in chunk:
            advantage = episode.current.reward - mean
            if advantage == 0:
                continue
            samples += pack(recorder.prompts[id(episode)], episode.raw_outputs, weight=advantage)
    if samples:
        policy.clipped_update(samples, optimizer, epochs=epochs, clip=clip)
    policy.sample = False
    return sum(rewards) / max(1, len(rewards))


def run_recipe(args: argparse.Namespace, recipe: InteractiveRecipe, log: Callable[[str], None],
               submit: Callable[[str], Any], remaining_s: Callable[[], float]) -> int:
    """SFT on expert trajectories → submit ``output/v1`` → online RL → submit ``output/v2``."""
    envs = ApiEpisodes()
    ids = envs.episodes()
    rng = random.Random(args.seed)  # RL's episode batches, like SFT's batches, follow the cell's seed
    output = Path(os.environ["OUTPUT_DIR"])
    policy = LocalPolicy(os.environ["MODEL_PATH"], recipe.max_length)
    # One packed SFT sequence per episode: enough episodes for every sequence SFT can draw, at most the cap.
    expert_ids = ids[: min(recipe.expert_episodes, max(2, args.sft_steps * args.sft_batch_size))]
    # Time shares of what is left: expert play 15 %, SFT 50 % (the rest: grading, RL, the final submission).
    # SFT gets the most: RL only learns from rollouts that sometimes win, which takes a policy SFT made.
    left = remaining_s()
    samples, rewards = expert_samples(recipe, envs, expert_ids, policy, time.monotonic() + 0.15 * left)
    log(f"{len(ids)} training episodes; expert played {len(rewards)} (mean reward {sum(rewards) / len(rewards):.2f}) "
        f"-> {len(samples)} SFT samples; budget left {remaining_s():.0f} s")
    # sft.batch_size counts actions; a sample is a packed episode of several.
    actions = sum(len(sample.turns()) for sample in samples)
    per_step = max(1, round(args.sft_batch_size * len(samples) / max(1, actions)))
    loss, taken = policy.train(samples, steps=args.sft_steps, batch_size=per_step, lr=args.sft_lr, seed=args.seed,
                               deadline=time.monotonic() + 0.5 * left)
    log(f"SFT done: {taken} of {args.sft_steps} steps of {per_step} sequences ({actions} actions in "
        f"{len(samples)} sequences), last loss {loss:.3f}")
    policy.save(output / "v1")
    submit("output/v1")
    group = max(2, args.online_grpo_generations)
    per_iteration = max(1, args.online_grpo_batch_size // group)
    policy.temperature = args.online_grpo_temperature
    optimizer = policy.optimizer(args.online_grpo_lr)  # one Adam for all iterations (see LocalPolicy.update)
    # The next iteration must fit with 60 s left for the final submission. Iterations vary (a WebShop one
    # took 160 s, the next ran past the budget's end: no v2), so one counts as half again the slowest so far.
    longest_s = 0.0
    for iteration in range(args.online_grpo_batches):
        left_now = remaining_s()
        if left_now < 60 + 1.5 * longest_s:
            log(f"{left_now:.0f} s left: not enough for another iteration (1.5 x {longest_s:.0f} s) and 60 s to submit; "
                "stopping RL")
            break
        started = time.monotonic()
        batch = rng.sample(ids, min(per_iteration, len(ids)))
        calls = envs.calls
        mean = rl_iteration(recipe, envs, batch, group, policy, optimizer, epochs=args.online_grpo_iterations,
                            clip=args.online_grpo_epsilon)
        longest_s = max(longest_s, time.monotonic() - started)
        log(f"RL iteration {iteration + 1}/{args.online_grpo_batches}: {len(batch) * group} rollouts, "
            f"{envs.calls - calls} env-endpoint calls ({envs.calls} in all), mean rollout reward {mean:.3f}")
    policy.save(output / "v2")
    submit("output/v2")
    return 0
