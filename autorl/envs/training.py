"""Agents' online rollouts: training episodes of a cell's interactive task (docs/design.md#tasks).

The grading API's env endpoints are a thin HTTP shell over :class:`TrainingEnvs`: it lists the
training episodes of the task's public data, starts one by id (``train/…`` only: evaluation
episodes are refused with :class:`EpisodeRefused`), steps it by session id, and ends it. The
episodes run in the sweep's EnvPool (or in-process when there is none); the Workspace actor hands
in the pool lookup, so this module needs no Ray.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autorl.envs.base import EVAL_PREFIX, TRAIN_PREFIX, EnvError, EnvSource, EpisodeSpec, StepResult
from autorl.envs.host import EnvClient, LocalEnvClient, cache_resolver


class EpisodeRefused(Exception):
    """The agent asked for an episode it may not play (HTTP 403)."""


class UnknownEpisode(Exception):
    """No such training episode or session (HTTP 404)."""


class TooManySessions(Exception):
    """The cell already has the most live sessions allowed (HTTP 429)."""


def training_episode_ids(public_dir: Path) -> list[str]:
    """Every ``train/…`` episode id listed in the ``*.jsonl`` files of the public data, in file
    order.
    """
    ids: list[str] = []
    for path in sorted(Path(public_dir).glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                episode_id = json.loads(line).get("episode_id")
                if isinstance(episode_id, str) and episode_id.startswith(TRAIN_PREFIX):
                    ids.append(episode_id)
    return ids


class TrainingEnvs:
    """One cell's training sessions."""

    def __init__(
        self,
        kind: str,
        source: EnvSource,
        public_dir: Path,
        client: Callable[[], EnvClient],
        max_sessions: int = 32,
    ) -> None:
        """Read the training episode ids; ``client`` makes the env client on first use."""
        self.kind = kind
        self.source = source
        self.episodes = training_episode_ids(public_dir)
        self._known = set(self.episodes)
        self._client_factory = client
        self._client: EnvClient | None = None
        self.max_sessions = max_sessions
        self._sessions: dict[str, tuple[str, str]] = {}  # session id -> (handle, episode id)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def client(self) -> EnvClient:
        """The env client (made once)."""
        with self._lock:
            if self._client is None:
                self._client = self._client_factory()
            return self._client

    def reset(self, episode_id: object) -> tuple[str, StepResult]:
        """Start a training episode; returns its session id and first observation.

        Raises:
            EpisodeRefused: ``episode_id`` is an evaluation episode.
            UnknownEpisode: not a training episode of this task.
            TooManySessions: ``max_sessions`` are live.
        """
        if not isinstance(episode_id, str) or not episode_id:
            raise UnknownEpisode(
                'send {"episode_id": "train/..."}; GET /env/episodes lists the training episodes'
            )
        if episode_id.startswith(EVAL_PREFIX):
            raise EpisodeRefused(
                f"episode {episode_id!r} belongs to the evaluation split: agents may only play "
                "training episodes (GET /env/episodes lists them)"
            )
        if episode_id not in self._known:
            raise UnknownEpisode(
                f"no training episode {episode_id!r}; GET /env/episodes lists the "
                f"{len(self.episodes)} training episodes"
            )
        with self._lock:
            if len(self._sessions) >= self.max_sessions:
                raise TooManySessions(
                    f"{len(self._sessions)} env sessions are open; close some (POST /env/close) "
                    "first"
                )
        ((handle, result),) = self.client().reset([EpisodeSpec(self.source, episode_id)])
        with self._lock:
            session_id = f"s{next(self._ids)}"
            self._sessions[session_id] = (handle, episode_id)
        return session_id, result

    def step(self, session_id: object, action: object) -> StepResult:
        """One action in a live session.

        Raises:
            UnknownEpisode: no such live session.
            EnvError: the episode is over, or the action is not text.
        """
        handle = self._handle(session_id)
        if not isinstance(action, str):
            raise EnvError(f'"action" must be a string, got {type(action).__name__}')
        (result,) = self.client().step([(handle, action)])
        return result

    def close(self, session_id: object) -> None:
        """End a session."""
        handle = self._handle(session_id)
        with self._lock:
            self._sessions.pop(str(session_id), None)
        self.client().close([handle])

    def close_all(self) -> None:
        """End every session (the cell is over)."""
        with self._lock:
            handles = [h for h, _ in self._sessions.values()]
            self._sessions.clear()
        if handles and self._client is not None:
            self._client.close(handles)

    def _handle(self, session_id: object) -> str:
        with self._lock:
            entry = self._sessions.get(str(session_id))
        if entry is None:
            raise UnknownEpisode(
                f"no live env session {session_id!r}; start one with POST /env/reset"
            )
        return entry[0]

    def describe(self) -> dict[str, Any]:
        """What GET /env/episodes answers."""
        return {
            "kind": self.kind,
            "episodes": list(self.episodes),
            "live_sessions": len(self._sessions),
        }


def training_envs(
    spec: Any,
    target: Any,
    public_dir: Path,
    cache_dir: Path,
    *,
    find_pool: Callable[[str], EnvClient | None] | None = None,
) -> TrainingEnvs | None:
    """A cell's training sessions for an interactive task (``None`` for a static one).

    Args:
        spec: The task (:class:`autorl.tasks.TaskSpec`).
        target: The cell's eval target (:class:`autorl.grading.scoring.EvalTarget`): which data, and
            the env options (step limit, search backend, judge) the training episodes use too.
        public_dir: The task's built public data (the training episodes).
        cache_dir: The cache root, for in-process environments when the sweep has no EnvPool.
        find_pool: The sweep's EnvPool client of an environment kind, or None when there is none
            (the Workspace actor passes :func:`autorl.actors.env_pool.find_pool_client`); called on
            first use. Without it, or when it finds none, the environments run in-process.
    """
    if spec.kind != "interactive":
        return None
    from autorl.tasks import build_options, eval_options

    source = EnvSource(
        target.task_id,
        target.source,
        target.seed,
        build_options(spec, target.source, target.build_options),
        eval_options(spec, target.source, target.eval_options),
    )
    kind = spec.env

    def make() -> EnvClient:
        pool = find_pool(kind) if find_pool is not None else None
        return pool if pool is not None else LocalEnvClient(kind, cache_resolver(Path(cache_dir)))

    return TrainingEnvs(kind, source, public_dir, make)
