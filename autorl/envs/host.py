"""Hosting environment instances: :class:`EnvHost` (used inside each EnvPool actor) and the
in-process :class:`LocalEnvClient` (unit tests, benches, evaluators run without a pool).

Episodes are addressed by opaque handles. A client that is bound to one task's data
(:class:`EpisodeClient`) is what evaluators and the grading API's env endpoints use: they only
name episode ids (``train/…``/``eval/…``) and send actions.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from autorl.envs.base import (
    Env,
    EnvData,
    EnvError,
    EnvSource,
    EpisodeSpec,
    StepResult,
    make_env,
    split_of,
)

logger = logging.getLogger(__name__)

DataResolver = Callable[[EnvSource], EnvData]


def cache_resolver(cache_root: Path) -> DataResolver:
    """Resolve an :class:`EnvSource` by (re)building its task data in ``cache_root/tasks``.

    The build is deterministic and cached, so every node (an env actor, a grader) gets the same
    data without a shared filesystem.
    """
    built: dict[str, EnvData] = {}

    def resolve(source: EnvSource) -> EnvData:
        key = source.key()
        if key not in built:
            from autorl.tasks import build_task_data, get_task

            data = build_task_data(
                get_task(source.task_id),
                source.source,
                Path(cache_root) / "tasks",
                seed=source.seed,
                options=dict(source.build_options),
            )
            built[key] = EnvData(data.public_dir, data.private_dir)
        return built[key]

    return resolve


class EnvHost:
    """Up to ``capacity`` live episodes of one environment kind, stepped one after the other."""

    def __init__(self, kind: str, capacity: int, resolve: DataResolver) -> None:
        """Create nothing yet; instances are made on the first reset and reused after close."""
        self.kind = kind
        self.capacity = capacity
        self.resolve = resolve
        self.live: dict[str, Env] = {}
        self.idle: list[Env] = []
        self.episodes_started = 0

    def reset(self, items: list[tuple[str, EpisodeSpec]]) -> list[StepResult]:
        """Start one episode per ``(handle, spec)``; a handle already live restarts its episode.

        Raises:
            EnvError: Over capacity, or an episode cannot be started (bad id, missing data).
        """
        new = {h for h, _ in items if h not in self.live}
        if len(self.live) + len(new) > self.capacity:
            raise EnvError(
                f"{self.kind} host holds {len(self.live)} of {self.capacity} episodes; "
                f"cannot start {len(new)} more"
            )
        results = []
        for handle, spec in items:
            split_of(spec.episode_id)
            env = self.live.get(handle) or (self.idle.pop() if self.idle else make_env(self.kind))
            self.live[handle] = env
            try:
                results.append(env.reset(spec, self.resolve(spec.source)))
            except Exception:
                self._drop(handle)
                raise
            self.episodes_started += 1
        return results

    def step(self, moves: list[tuple[str, str]]) -> list[StepResult]:
        """Apply one action to each named live episode, in order.

        Raises:
            EnvError: A handle is not live here (never started, or closed).
        """
        results = []
        for handle, action in moves:
            env = self.live.get(handle)
            if env is None:
                raise EnvError(
                    f"episode handle {handle!r} is not live on this {self.kind} host; reset it "
                    "first"
                )
            if not isinstance(action, str):
                raise EnvError(f"an action must be a string, got {type(action).__name__}")
            results.append(env.step(action))
        return results

    def close(self, handles: list[str]) -> None:
        """End these episodes (unknown handles are ignored) and keep their instances for reuse."""
        for handle in handles:
            env = self.live.pop(handle, None)
            if env is not None:
                self.idle.append(env)

    def _drop(self, handle: str) -> None:
        env = self.live.pop(handle, None)
        if env is not None:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - a broken instance is discarded either way
                logger.warning("closing a failed %s instance raised", self.kind, exc_info=True)

    def shutdown(self) -> None:
        """Close every instance."""
        for handle in list(self.live):
            self._drop(handle)
        for env in self.idle:
            env.close()
        self.idle.clear()

    def stats(self) -> dict[str, Any]:
        """Live and idle instance counts."""
        return {
            "kind": self.kind,
            "live": len(self.live),
            "idle": len(self.idle),
            "capacity": self.capacity,
            "episodes_started": self.episodes_started,
        }


class EnvClient(Protocol):
    """Batched access to environments of one kind (an EnvPool actor, or :class:`LocalEnvClient`)."""

    def reset(self, specs: list[EpisodeSpec]) -> list[tuple[str, StepResult]]:
        """Start one episode per spec; returns a handle and the first observation of each."""
        ...

    def step(self, moves: list[tuple[str, str]]) -> list[StepResult]:
        """One action per ``(handle, action)``; all of them are stepped (in parallel where
        possible).
        """
        ...

    def close(self, handles: list[str]) -> None:
        """End episodes."""
        ...


class LocalEnvClient:
    """An :class:`EnvClient` that runs the environments in this process, one after the other."""

    def __init__(self, kind: str, resolve: DataResolver, capacity: int = 10_000) -> None:
        """Host up to ``capacity`` live episodes."""
        self.host = EnvHost(kind, capacity, resolve)
        self._ids = itertools.count()

    def reset(self, specs: list[EpisodeSpec]) -> list[tuple[str, StepResult]]:
        """Start one episode per spec."""
        handles = [f"local-{next(self._ids)}" for _ in specs]
        return list(
            zip(handles, self.host.reset(list(zip(handles, specs, strict=True))), strict=True)
        )

    def step(self, moves: list[tuple[str, str]]) -> list[StepResult]:
        """Step each named episode."""
        return self.host.step(moves)

    def close(self, handles: list[str]) -> None:
        """End episodes."""
        self.host.close(handles)

    def shutdown(self) -> None:
        """Close every instance."""
        self.host.shutdown()


@dataclass
class EpisodeClient:
    """An :class:`EnvClient` bound to one task's data: callers name episode ids only.

    This is the ``envs`` object an interactive task's ``evaluate()`` receives.
    """

    client: EnvClient
    source: EnvSource

    def reset(self, episode_ids: list[str]) -> list[tuple[str, StepResult]]:
        """Start these episodes of the bound data."""
        return self.client.reset([EpisodeSpec(self.source, e) for e in episode_ids])

    def step(self, moves: list[tuple[str, str]]) -> list[StepResult]:
        """Step episodes by handle."""
        return self.client.step(moves)

    def close(self, handles: list[str]) -> None:
        """End episodes by handle."""
        self.client.close(handles)


def local_episode_client(
    kind: str, task_id: str, private_dir: Path, env_options: dict[str, Any]
) -> EpisodeClient:
    """An in-process client over already built data (``private_dir`` and its sibling ``public``)."""
    data = EnvData(Path(private_dir).parent / "public", Path(private_dir))
    source = EnvSource(task_id, "local", 0, {}, dict(env_options))
    return EpisodeClient(LocalEnvClient(kind, lambda _source: data), source)
