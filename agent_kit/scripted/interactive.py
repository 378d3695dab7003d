"""The scripted agent's recipe for interactive tasks: SFT on expert trajectories, then online RL.

1. Expert trajectories are played through the grading API's env endpoints on training episodes
   (the task's recipe supplies the expert, e.g. a planner's move arriving as
   ``info["expert_action"]``, or an answer known from the public split).
   Each step becomes a (prompt in the eval protocol, expert completion) pair, an episode's pairs
   packed into one sequence where each prompt extends the last; SFT on them; submit.
2. Online RL (GRPO without a KL term, ``agent.online_grpo``): each iteration plays ``group`` sampled
   rollouts of a few training episodes through the env endpoints, gives every step of a rollout the
   advantage ``episode return - group mean``, and takes ``num_iterations`` policy-gradient steps on
   them, PPO-clipped after the first; submit. The return is the env reward, less ``invalid_penalty``
   times the share of the rollout's actions that the env had not listed as admissible, where the
   recipe sets one: that ranks the rollouts of a group that all lost (or all won), which the reward
   alone leaves equal.

   The iterations replay a fixed pool of ``episodes`` training episodes that the expert did not play
   (when enough are left), a batch's worth at a time, and each update also takes ``sft_mix`` of
   SFT's expert sequences (weight ``sft_mix_weight``; InstructGPT's PPO-ptx mixes pretraining data
   the same way). On fresh episodes every iteration the mean reward of a batch followed the episodes
   drawn, not the updates (bench/README.md); on a replayed pool the curve compares the same
   episodes. The SFT sequences are to keep the policy near what SFT taught: replaying 8 ALFWorld
   games without them took one policy from 11 to 3 of 36 eval games (one run; whether they prevent
   it is not measured yet).

   A batch's mean reward is a noisy measure of what an update did: another draw of the same policy's
   32 rollouts moves it by about 0.08. So the stage also plays a **probe** before its first update
   and again after its last: ``probe`` batches' worth of rollouts of the first batch's episodes,
   sampled with common random numbers (:mod:`agent_kit.hf_noise`), so each rollout sees the same
   noise both times and the two rewards differ only where RL changed the policy. The log counts the
   rollouts whose reward rose and fell.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agent_kit.rollout import Episode, EpisodeProtocol, play
from agent_kit.scripted.policy import ApiEpisodes, LocalPolicy, Sample, pack
from agent_kit.scripted.progress import PROGRESS, StageRecord, write_atomically
from agent_kit.scripted.settings import ScriptedSettings

# SFT's expert sequences and the episodes they came from, which RL mixes in and avoids: kept beside
# the progress record so that a resumed run's RL, starting from output/v1, has them.
SFT_SAMPLES_FILE = Path("code") / "scripted_sft_samples.json"


@dataclass
class InteractiveRecipe:
    """What differs between tasks.

    Attributes:
        protocol: The eval protocol (prompts and action parsing).
        expert: The expert's raw completion for an episode's next step (None: stop).
        max_steps: Step limit of training rollouts.
        max_length: Token limit of training sequences.
        expert_episodes: How many training episodes to play with the expert.
        literal_admissible: Whether the env's admissible list names literal commands (ALFWorld's
            does; DeepSearchQA lists templates), so that actions can be judged against it.
        invalid_penalty: RL's return is the env reward less this times :func:`inadmissible_share`.
    """

    protocol: EpisodeProtocol
    expert: Callable[[Episode], str | None]
    max_steps: int
    max_length: int
    expert_episodes: int
    literal_admissible: bool = False
    invalid_penalty: float = 0.0

    def __post_init__(self) -> None:
        """A penalty needs actions to judge."""
        if self.invalid_penalty and not self.literal_admissible:
            raise ValueError(
                "invalid_penalty needs literal_admissible: an env whose admissible list names the "
                "commands themselves"
            )


@dataclass
class RolloutStats:
    """One RL iteration: its rollouts' mean env reward and mean share of inadmissible actions, and
    what the update did to the log-likelihood of the rollouts it trained on (mean change of a
    sequence's summed log-probability, over those with a positive advantage and over those with a
    negative one; None when there were none). An update that learns from the rewards raises the
    first and lowers the
    second."""

    reward: float
    inadmissible: float
    reinforced_shift: float | None = None
    penalized_shift: float | None = None

    def update_text(self) -> str:
        """The update's shifts for the log.

        >>> RolloutStats(0.25, 0.0, 0.42, -0.66).update_text()
        '; update: log-likelihood of rollouts reinforced +0.42, penalized -0.66'
        >>> RolloutStats(0.0, 0.0).update_text()
        '; no update (equal returns)'
        """
        shifts = [
            f"{name} {value:+.2f}"
            for name, value in (
                ("reinforced", self.reinforced_shift),
                ("penalized", self.penalized_shift),
            )
            if value is not None
        ]
        return (
            f"; update: log-likelihood of rollouts {', '.join(shifts)}"
            if shifts
            else "; no update (equal returns)"
        )


def inadmissible_share(episode: Episode) -> float:
    """The share of the episode's actions that were not among the admissible actions the env listed
    just before them (actions after a result that listed none are not judged; 0 when none are).

    >>> from agent_kit.protocol import StepResult
    >>> e = Episode("train/0", "h", StepResult("start", 0.0, False, ["go to desk 1"], {}))
    >>> nothing = StepResult("Nothing happens.", 0.0, False, ["go to desk 1"], {})
    >>> e.record(" go to desk 2", "go to desk 2", nothing)
    >>> e.record(" go to desk 1", "go to desk 1", StepResult("You arrive.", 0.0, False, [], {}))
    >>> inadmissible_share(e)
    0.5
    """
    before = [episode.first, *episode.results[:-1]]
    judged = [
        action not in listed.admissible_actions
        for action, listed in zip(episode.actions, before, strict=True)
        if listed.admissible_actions
    ]
    return sum(judged) / len(judged) if judged else 0.0


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


def expert_samples(
    recipe: InteractiveRecipe,
    envs: ApiEpisodes,
    ids: list[str],
    policy: LocalPolicy,
    deadline: float,
) -> tuple[list[Sample], list[float]]:
    """Play ``ids`` with the expert until ``deadline`` (at least two episodes); returns the training
    sequences (each episode's steps packed, :func:`~agent_kit.scripted.policy.pack`) and the
    expert's
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


def group_advantages(returns: list[float], group: int) -> list[float]:
    """GRPO's advantages without scaling: each return less the mean of its group of ``group``
    consecutive ones.

    With an inadmissible-action penalty a group whose rollouts all lost still ranks them:

    >>> [round(a, 2) for a in group_advantages([1.0, 0.0, 0.0, 0.0, -0.1, -0.3], 3)]
    [0.67, -0.33, -0.33, 0.13, 0.03, -0.17]
    """
    advantages = []
    for start in range(0, len(returns), group):
        chunk = returns[start : start + group]
        advantages += [value - sum(chunk) / len(chunk) for value in chunk]
    return advantages


def replay_pool(ids: list[str], played: list[str], size: int, rng: random.Random) -> list[str]:
    """RL's ``size`` training episodes, drawn by ``rng`` from those not in ``played`` (the expert's)
    while enough are left, else from all.

    >>> replay_pool(["a", "b", "c", "d"], ["a", "b"], 2, random.Random(0))
    ['d', 'c']
    >>> # One unplayed episode: the pool is drawn from all.
    >>> sorted(replay_pool(["a", "b", "c"], ["a", "b"], 2, random.Random(0)))
    ['b', 'c']
    """
    seen = set(played)
    unplayed = [i for i in ids if i not in seen]
    return rng.sample(unplayed if len(unplayed) >= size else ids, min(size, len(ids)))


def iteration_batches(pool: list[str], per_iteration: int, iterations: int) -> list[list[str]]:
    """Each iteration's episodes: ``per_iteration`` at a time from ``pool`` in turn, starting over
    at its end.

    >>> iteration_batches(["a", "b", "c"], 2, 3)
    [['a', 'b'], ['c', 'a'], ['b', 'c']]
    """
    return [
        [pool[(i * per_iteration + k) % len(pool)] for k in range(per_iteration)]
        for i in range(iterations)
    ]


def rl_iteration(
    recipe: InteractiveRecipe,
    envs: ApiEpisodes,
    ids: list[str],
    group: int,
    policy: LocalPolicy,
    optimizer: Any,
    *,
    epochs: int,
    clip: float,
    mixed: list[Sample] | None = None,
) -> RolloutStats:
    """``epochs`` clipped policy-gradient steps (:meth:`LocalPolicy.clipped_update` with
    ``optimizer``) on ``group`` sampled rollouts of each of ``ids``, every rollout's steps in it
    once, each weighted by its return's advantage in its group, plus the ``mixed`` samples as they
    are (SFT's, weighted); returns the rollouts' means and what the update did to their likelihood
    (its first step scores them before it; one
    forward pass without gradients after it). No update when every group's returns are equal."""
    recorder = _Recording(recipe.protocol, policy)
    policy.sample = True
    played = play(
        policy,
        envs,
        [e for e in ids for _ in range(group)],
        recorder,
        max_steps=recipe.max_steps,
        concurrency=len(ids) * group,
    )
    rewards = [e.current.reward for e in played]
    inadmissible = [inadmissible_share(e) if recipe.literal_admissible else 0.0 for e in played]
    returns = [r - recipe.invalid_penalty * i for r, i in zip(rewards, inadmissible, strict=True)]
    samples = []
    for episode, advantage in zip(played, group_advantages(returns, group), strict=True):
        if advantage != 0:
            samples += pack(recorder.prompts[id(episode)], episode.raw_outputs, weight=advantage)
    # Positive advantage -> per-sequence changes.
    shifts: dict[bool, list[float]] = {
        True: [],
        False: [],
    }
    if samples:
        before = policy.clipped_update(
            samples + (mixed or []), optimizer, epochs=epochs, clip=clip
        )[: len(samples)]
        for sample, old, new in zip(samples, before, policy.sequence_logps(samples), strict=True):
            shifts[sample.weight > 0].append(new - old)
    policy.sample = False
    count = max(1, len(played))
    return RolloutStats(
        sum(rewards) / count,
        sum(inadmissible) / count,
        *(
            sum(shifts[side]) / len(shifts[side]) if shifts[side] else None
            for side in (True, False)
        ),
    )


@dataclass
class ProbeResult:
    """The same rollouts played before and after RL (:func:`probe`): each one's reward, in the same
    order."""

    before: list[float]
    after: list[float]

    def text(self) -> str:
        """The comparison for the log.

        >>> ProbeResult([0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 1.0]).text()
        'mean reward 0.500 before RL, 0.750 after; 2 of 4 rollouts rose, 1 fell'
        """
        pairs = list(zip(self.before, self.after, strict=True))
        rose, fell = sum(a > b for b, a in pairs), sum(a < b for b, a in pairs)
        count = max(1, len(pairs))
        return (
            f"mean reward {sum(self.before) / count:.3f} before RL, {sum(self.after) / count:.3f} "
            "after; "
            f"{rose} of {len(pairs)} rollouts rose, {fell} fell"
        )


def probe(
    recipe: InteractiveRecipe,
    envs: ApiEpisodes,
    ids: list[str],
    group: int,
    policy: LocalPolicy,
    label: str,
    concurrency: int,
) -> list[float]:
    """The env reward of ``group`` rollouts of each of ``ids``, sampled at the policy's temperature
    with the noise of ``label`` (:attr:`LocalPolicy.noise`): played again with the same label, a
    rollout takes the same actions until the policy's distribution differs where it samples, so two
    plays' rewards differ by what the weights changed, not by the draw. No update.

    The rollouts are played ``concurrency`` at a time, each such chunk started together under a
    label of its own: a row's noise depends on the rows with its prompt in the same generation call,
    which only rollouts started together keep the same from one play to the next.
    """
    rollouts = [e for e in ids for _ in range(group)]
    rewards = []
    try:
        for index, start in enumerate(range(0, len(rollouts), concurrency)):
            chunk = rollouts[start : start + concurrency]
            policy.sample, policy.noise = True, f"{label}/{index}"
            played = play(
                policy,
                envs,
                chunk,
                recipe.protocol,
                max_steps=recipe.max_steps,
                concurrency=len(chunk),
            )
            rewards += [e.current.reward for e in played]
    finally:
        policy.sample, policy.noise = False, None
    return rewards


def _expert_sft(
    settings: ScriptedSettings,
    recipe: InteractiveRecipe,
    envs: ApiEpisodes,
    ids: list[str],
    policy: LocalPolicy,
    log: Callable[[str], None],
    remaining_s: Callable[[], float],
) -> tuple[list[Sample], list[str]]:
    """The expert plays training episodes, and SFT trains ``policy`` on its packed sequences;
    returns the sequences and the episodes the expert played."""
    sft = settings.sft
    # One packed SFT sequence per episode: enough episodes for every sequence SFT can draw, at most
    # the cap.
    most = max(2, sft.max_steps * sft.per_device_train_batch_size)
    expert_ids = ids[: min(recipe.expert_episodes, most)]
    # Time shares of what is left: expert play 15 %, SFT 50 % (the rest: grading, RL, the final
    # submission). SFT gets the most: RL only learns from rollouts that sometimes win, which takes a
    # policy SFT made.
    left = remaining_s()
    samples, rewards = expert_samples(
        recipe, envs, expert_ids, policy, time.monotonic() + 0.15 * left
    )
    log(
        f"{len(ids)} training episodes; expert played {len(rewards)} (mean reward "
        f"{sum(rewards) / len(rewards):.2f}) "
        f"-> {len(samples)} SFT samples; budget left {remaining_s():.0f} s"
    )
    # sft.per_device_train_batch_size counts actions; a sample is a packed episode of several.
    actions = sum(len(sample.turns()) for sample in samples)
    per_step = max(1, round(sft.per_device_train_batch_size * len(samples) / max(1, actions)))
    loss, taken = policy.train(
        samples,
        steps=sft.max_steps,
        batch_size=per_step,
        lr=sft.learning_rate,
        seed=settings.seed,
        deadline=time.monotonic() + 0.5 * left,
    )
    log(
        f"SFT done: {taken} of {sft.max_steps} steps of {per_step} sequences ({actions} actions in "
        f"{len(samples)} sequences), last loss {loss:.3f}"
    )
    return samples, expert_ids[: len(rewards)]


def save_sft_samples(path: Path, samples: list[Sample], played: list[str]) -> None:
    """Write SFT's sequences and the expert's episodes (:func:`load_sft_samples` reads them)."""
    body = {
        "played": played,
        "samples": [[s.prompt, s.completion, s.weight, [list(t) for t in s.more]] for s in samples],
    }
    write_atomically(path, json.dumps(body))


def load_sft_samples(path: Path) -> tuple[list[Sample], list[str]]:
    """SFT's sequences and the expert's episodes as :func:`save_sft_samples` wrote them.

    Raises:
        ValueError: The file does not load or holds something else (the message says what).
    """
    if not path.is_file():  # not there, or no regular file (a FIFO would block the read)
        raise ValueError(f"{path} is no regular file")
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        played = [str(episode) for episode in body["played"]]
        samples = [
            Sample(str(prompt), str(completion), float(weight), [(str(c), str(t)) for c, t in more])
            for prompt, completion, weight, more in body["samples"]
        ]
    except (OSError, UnicodeDecodeError, KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{path} does not hold SFT's samples: {error!r}") from error
    return samples, played


def _recorded_sft_samples() -> tuple[Callable[[StageRecord], str | None], dict[str, Any]]:
    """A check for :meth:`Progress.finished` that loads a recorded SFT stage's samples, and the
    dict it leaves them in (``samples``, ``played``)."""
    loaded: dict[str, Any] = {}

    def check(record: StageRecord) -> str | None:
        # The file's own name, not one read from the record: that is workspace data.
        if record.extra.get("samples") != SFT_SAMPLES_FILE.as_posix():
            return f"the record names no {SFT_SAMPLES_FILE}"
        try:
            loaded["samples"], loaded["played"] = load_sft_samples(SFT_SAMPLES_FILE)
        except ValueError as error:
            return str(error)
        return None

    return check, loaded


def _rl_batches(
    settings: ScriptedSettings,
    ids: list[str],
    played: list[str],
    rng: random.Random,
    log: Callable[[str], None],
) -> list[list[str]]:
    """The training episodes of each RL batch: a replayed pool, or a fresh draw each batch."""
    rl = settings.online_grpo
    per_iteration = max(1, rl.per_device_train_batch_size // max(2, rl.num_generations))
    if not rl.episodes:
        return [rng.sample(ids, min(per_iteration, len(ids))) for _ in range(rl.batches)]
    pool = replay_pool(ids, played, rl.episodes, rng)
    batches = iteration_batches(pool, min(per_iteration, len(pool)), rl.batches)
    log(
        f"RL replays {len(pool)} training episodes ({len(set(pool) & set(played))} of them in "
        f"SFT's), {len(batches[0])} a batch, with {rl.sft_mix} SFT sequences (weight "
        f"{rl.sft_mix_weight:g}) in each update"
    )
    return batches


def run_recipe(
    settings: ScriptedSettings,
    recipe: InteractiveRecipe,
    log: Callable[[str], None],
    submit: Callable[[str], Any],
    remaining_s: Callable[[], float],
) -> int:
    """SFT on expert trajectories → submit ``output/v1`` → online RL → submit ``output/v2``.

    A resumed run skips the stages it finished before (:mod:`agent_kit.scripted.progress`): after
    SFT, RL starts from ``output/v1`` with SFT's samples read back from :data:`SFT_SAMPLES_FILE`."""
    rl = settings.online_grpo
    envs = ApiEpisodes()
    ids = envs.episodes()
    # RL's episode batches, like SFT's batches, follow the cell's seed.
    rng = random.Random(settings.seed)
    output = Path(os.environ["OUTPUT_DIR"])
    check, loaded = _recorded_sft_samples()
    if PROGRESS.finished("expert_sft", output / "v1", check) is not None:
        # A resumed run that finished SFT: RL starts from its model and mixes in its samples.
        policy = LocalPolicy(output / "v1", recipe.max_length)
        samples, played = loaded["samples"], loaded["played"]
    else:
        policy = LocalPolicy(os.environ["MODEL_PATH"], recipe.max_length)
        samples, played = _expert_sft(settings, recipe, envs, ids, policy, log, remaining_s)
        policy.save(output / "v1")
        save_sft_samples(SFT_SAMPLES_FILE, samples, played)
        PROGRESS.record("expert_sft", output / "v1", {"samples": SFT_SAMPLES_FILE.as_posix()})
    submit("output/v1")
    if PROGRESS.finished("online_grpo", output / "v2") is not None:
        submit("output/v2")
        return 0
    group = max(2, rl.num_generations)
    batches = _rl_batches(settings, ids, played, rng, log)
    policy.temperature = rl.temperature
    # The probe: `probe` batches' worth of rollouts of the first batch's episodes, with noise of its
    # own, as many live at once as in RL.
    probe_ids = batches[0] * rl.probe if batches else []
    probe_label, probe_live = f"probe/{settings.seed}", len(batches[0]) * group if batches else 1
    started = time.monotonic()
    probe_before = (
        probe(recipe, envs, probe_ids, group, policy, probe_label, probe_live) if probe_ids else []
    )
    # The second probe takes about as long: RL leaves room for it.
    probe_s = time.monotonic() - started
    # One Adam for all iterations (LocalPolicy.update)
    optimizer = policy.optimizer(rl.learning_rate)
    # The next iteration must fit with 60 s left for the final submission. Iterations vary (a
    # WebShop one took 160 s, the next ran past the budget's end: no v2), so one counts as half
    # again the slowest so far.
    longest_s, iterations = 0.0, 0
    for iteration in range(rl.batches):
        left_now = remaining_s()
        if left_now < 60 + 1.5 * (longest_s + probe_s):
            log(
                f"{left_now:.0f} s left: not enough for another iteration (1.5 x {longest_s:.0f} "
                f"s), the probe (1.5 x {probe_s:.0f} s) and 60 s to submit; stopping RL"
            )
            break
        started = time.monotonic()
        batch = batches[iteration]
        mixed = [
            replace(sample, weight=rl.sft_mix_weight)
            for sample in rng.sample(samples, min(rl.sft_mix, len(samples)))
        ]
        calls = envs.calls
        stats = rl_iteration(
            recipe, envs, batch, group, policy, optimizer,
            epochs=rl.num_iterations, clip=rl.epsilon, mixed=mixed,
        )  # fmt: skip
        longest_s, iterations = max(longest_s, time.monotonic() - started), iterations + 1
        inadmissible = (
            f", inadmissible actions {100 * stats.inadmissible:.0f} %"
            if recipe.literal_admissible
            else ""
        )
        log(
            f"RL iteration {iteration + 1}/{rl.batches}: {len(batch) * group} rollouts, "
            f"{envs.calls - calls} env-endpoint calls ({envs.calls} in all), mean rollout reward "
            f"{stats.reward:.3f}{inadmissible}{stats.update_text()}"
        )
    if probe_ids and iterations:  # (without an update the probe would play the same rollouts again)
        result = ProbeResult(
            probe_before, probe(recipe, envs, probe_ids, group, policy, probe_label, probe_live)
        )
        log(
            f"RL probe ({len(probe_ids)} x {group} rollouts of the first batch's episodes, the "
            f"same sampling noise before and after): {result.text()}"
        )
    policy.save(output / "v2")
    PROGRESS.record("online_grpo", output / "v2")
    submit("output/v2")
    return 0
