"""Playing many episodes with one model: every live episode advances together.

Each round renders the prompt of every live episode, asks the engine for all of them in **one**
batched call, then steps all of their environments in one batched env call (in parallel in the
EnvPool). Finished episodes are closed and replaced from the queue, so at most ``concurrency``
are live at once. ``concurrency=1`` is the reference's way (one game at a time, one generate call
per step) and, with greedy decoding and deterministic environments, gives the same results.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent_kit.protocol import ChatMessage, GenerationEngine, StepResult


@dataclass
class Episode:
    """One episode being played: what the prompt renderer and the scorer read.

    Attributes:
        episode_id: ``train/…`` or ``eval/…``.
        handle: The env client's handle of the running episode.
        first: The reset result (the task statement).
        actions: The actions sent so far.
        results: The env result of each action so far (its page's actions too, which a multi-turn
            prompt shows for every step).
        raw_outputs: The model's raw generations, one per step.
    """

    episode_id: str
    handle: str
    first: StepResult
    actions: list[str] = field(default_factory=list)
    results: list[StepResult] = field(default_factory=list)
    raw_outputs: list[str] = field(default_factory=list)

    @property
    def steps(self) -> int:
        """Actions taken."""
        return len(self.results)

    @property
    def history(self) -> list[tuple[str, str]]:
        """``(action, observation)`` pairs so far, what the prompts show."""
        return [
            (action, result.observation)
            for action, result in zip(self.actions, self.results, strict=True)
        ]

    @property
    def current(self) -> StepResult:
        """The latest env result (the reset result before any step)."""
        return self.results[-1] if self.results else self.first

    def record(self, output: str, action: str, result: StepResult) -> None:
        """One step: the model's raw output, the action sent and the env's result."""
        self.raw_outputs.append(output)
        self.actions.append(action)
        self.results.append(result)


class EpisodeProtocol(Protocol):
    """How one task talks to the model: prompt format, generation settings and action parsing."""

    mode: str  # "text" (raw completion) or "chat" (the model's chat template)
    max_new_tokens: int
    stop: list[str] | None

    def render(self, episode: Episode) -> str | list[ChatMessage]:
        """The prompt (text) or conversation (chat) for the episode's next action."""
        ...

    def parse(self, episode: Episode, output: str) -> str:
        """The env action to send for the model's raw output."""
        ...


class EpisodeEnvs(Protocol):
    """What :func:`play` needs from the environments (the grader's
    ``autorl.envs.host.EpisodeClient``, the agent's :class:`agent_kit.scripted.policy.ApiEpisodes`).
    """

    def reset(self, episode_ids: list[str]) -> list[tuple[str, StepResult]]:
        """Start these episodes."""
        ...

    def step(self, moves: list[tuple[str, str]]) -> list[StepResult]:
        """Step episodes by handle."""
        ...

    def close(self, handles: list[str]) -> None:
        """End episodes by handle."""
        ...


@dataclass
class PlayStats:
    """Counters of one :func:`play` run."""

    engine_calls: int = 0
    env_step_calls: int = 0
    generations: int = 0
    max_live: int = 0


def _generate(engine: GenerationEngine, protocol: EpisodeProtocol, prompts: list[Any]) -> list[str]:
    if protocol.mode == "chat":
        outputs = engine.generate_chat(
            prompts, max_new_tokens=protocol.max_new_tokens, stop=protocol.stop
        )
    else:
        outputs = engine.generate_text(
            prompts, max_new_tokens=protocol.max_new_tokens, stop=protocol.stop
        )
    if len(outputs) != len(prompts):
        raise RuntimeError(f"engine returned {len(outputs)} generations for {len(prompts)} prompts")
    return [o or "" for o in outputs]


def play(
    engine: GenerationEngine,
    envs: EpisodeEnvs,
    episode_ids: list[str],
    protocol: EpisodeProtocol,
    *,
    max_steps: int,
    concurrency: int,
    stats: PlayStats | None = None,
) -> list[Episode]:
    """Play every episode to its end (env ``done``) or ``max_steps`` actions.

    Args:
        engine: Greedy generation engine.
        envs: Environments bound to the task's data.
        episode_ids: Episodes to play; results come back in this order.
        protocol: The task's prompt/parse protocol.
        max_steps: Most actions per episode.
        concurrency: Most episodes live at once (``1``: one at a time).
        stats: Filled with call counts when given.

    Returns:
        The finished episodes, in the order of ``episode_ids``.
    """
    if concurrency < 1 or max_steps < 1:
        raise ValueError(
            f"concurrency and max_steps must be at least 1, got {concurrency} and {max_steps}"
        )
    stats = stats if stats is not None else PlayStats()
    queue = deque(
        enumerate(episode_ids)
    )  # positions, so the same episode may be played several times
    live: list[tuple[int, Episode]] = []
    finished: dict[int, Episode] = {}
    try:
        while queue or live:
            room = min(concurrency - len(live), len(queue))
            if room > 0:
                batch = [queue.popleft() for _ in range(room)]
                started = envs.reset([episode_id for _, episode_id in batch])
                for (position, episode_id), (handle, first) in zip(batch, started, strict=True):
                    episode = Episode(episode_id, handle, first)
                    if first.done:
                        finished[position] = episode
                        envs.close([handle])
                    else:
                        live.append((position, episode))
            if not live:
                continue
            stats.max_live = max(stats.max_live, len(live))
            outputs = _generate(engine, protocol, [protocol.render(e) for _, e in live])
            stats.engine_calls += 1
            stats.generations += len(live)
            actions = [protocol.parse(e, out) for (_, e), out in zip(live, outputs, strict=True)]
            results = envs.step([(e.handle, a) for (_, e), a in zip(live, actions, strict=True)])
            stats.env_step_calls += 1
            still: list[tuple[int, Episode]] = []
            done_handles = []
            for (position, episode), output, action, result in zip(
                live, outputs, actions, results, strict=True
            ):
                episode.record(output, action, result)
                if result.done or episode.steps >= max_steps:
                    finished[position] = episode
                    done_handles.append(episode.handle)
                else:
                    still.append((position, episode))
            if done_handles:
                envs.close(done_handles)
            live = still
    finally:
        if live:
            envs.close([e.handle for _, e in live])
    return [finished[i] for i in range(len(episode_ids))]
