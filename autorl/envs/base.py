"""The environment contract shared by every interactive task.

An episode is named by an :class:`EpisodeSpec`: which task data it belongs to (an
:class:`EnvSource`, enough to rebuild that data on any node through the task cache) and its episode
id inside that data (``"train/12"``, ``"eval/3"``, ...). An :class:`Env` instance plays one episode
at a time: :meth:`Env.reset` starts it, :meth:`Env.step` takes one text action, each answering a
:class:`StepResult` (defined in :mod:`agent_kit.protocol`, which the agent side shares).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agent_kit.protocol import (
    StepResult as StepResult,
)  # the agent side reads it too: defined there
from autorl.errors import AutorlError, ConfigError
from autorl.registry import Registry

TRAIN_PREFIX = "train/"
EVAL_PREFIX = "eval/"


class EnvError(AutorlError):
    """An environment could not be created, reset or stepped (bad episode id, missing data, ...)."""


@dataclass(frozen=True)
class EnvSource:
    """Which built task data an episode comes from.

    Attributes:
        task_id: The task (``tasks/<id>``).
        source: Its data source (``fixture``, ``hub``).
        seed: Seed of the data build.
        build_options: Options of the data build (part of its cache key).
        env_options: Options of the environment itself (search backend, judge, step limit ...).
    """

    task_id: str
    source: str
    seed: int = 0
    build_options: dict[str, Any] = field(default_factory=dict, hash=False)
    env_options: dict[str, Any] = field(default_factory=dict, hash=False)

    def key(self) -> str:
        """A string key of the data this source names (options included).

        >>> EnvSource("webshop", "fixture", 0, {"a": 1}).key()
        'webshop:fixture:0:{"a": 1}'
        """
        import json

        options = json.dumps(self.build_options, sort_keys=True)
        return f"{self.task_id}:{self.source}:{self.seed}:{options}"


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode: its data source and its id within that data (``train/…`` or ``eval/…``)."""

    source: EnvSource
    episode_id: str


@dataclass(frozen=True)
class EnvData:
    """The built task data an environment reads (public: training episodes; private: eval
    episodes).
    """

    public_dir: Path
    private_dir: Path


class Env(Protocol):
    """One environment instance; plays one episode at a time."""

    def reset(self, episode: EpisodeSpec, data: EnvData) -> StepResult:
        """Start ``episode`` (any earlier episode of this instance is abandoned)."""
        ...

    def step(self, action: str) -> StepResult:
        """Apply one text action to the running episode."""
        ...

    def close(self) -> None:
        """Release what the instance holds (game processes, files, connections)."""
        ...


def environments() -> Registry[Callable[[], Env]]:
    """Environment kind → factory: each interactive task's ``env`` entry point, under its task
    id.
    """
    from autorl.tasks import discover_tasks

    return Registry(
        "environment kind",
        {
            task_id: f"{spec.package}.{spec.entry_points['env']}"
            for task_id, spec in discover_tasks().items()
            if "env" in spec.entry_points
        },
    )


def make_env(kind: str) -> Env:
    """A fresh environment instance of ``kind`` (an interactive task's id).

    Raises:
        EnvError: No interactive task of that id ("did you mean" and the known kinds).
    """
    try:
        factory = environments().get(kind)
    except ConfigError as error:
        raise EnvError(str(error)) from error
    return factory()


def split_of(episode_id: str) -> str:
    """``"train"`` or ``"eval"`` for a well-formed episode id.

    >>> split_of("train/3"), split_of("eval/pick_and_place_simple-Apple/trial_1")
    ('train', 'eval')

    Raises:
        EnvError: The id does not start with ``train/`` or ``eval/``.
    """
    for prefix in (TRAIN_PREFIX, EVAL_PREFIX):
        if (
            isinstance(episode_id, str)
            and episode_id.startswith(prefix)
            and len(episode_id) > len(prefix)
        ):
            return prefix[:-1]
    raise EnvError(f"episode id {episode_id!r} must look like 'train/<name>' or 'eval/<name>'")
