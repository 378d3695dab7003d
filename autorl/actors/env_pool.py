"""EnvPool: the sweep's environment actors of one kind, behind a named supervisor
``envpool:<kind>``.

Each :class:`EnvActor` (declared CPUs and memory) hosts up to ``envs_per_actor`` live episodes of
one environment kind (:class:`autorl.envs.host.EnvHost`). The :class:`EnvPool` supervisor places
new episodes on the least loaded actor, sends every batched reset/step to all actors concurrently,
and remembers each live episode's spec and actions. When an actor dies, the supervisor starts a
replacement and restarts each of that actor's episodes from reset, replaying its actions, so
callers see no difference: no episode is dropped or counted as a failure. Graders (evaluation) and
the grading API's env endpoints (agents' training episodes) are its clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError

from autorl.envs.base import EnvError, EpisodeSpec, StepResult
from autorl.envs.host import EnvHost, cache_resolver
from autorl.schema import EnvPoolConfig

logger = logging.getLogger(__name__)
_DEAD = (ActorDiedError, ActorUnavailableError, RayActorError)


def pool_name(kind: str) -> str:
    """The named actor of a kind's pool in the sweep's namespace."""
    return f"envpool:{kind}"


class EnvActor:
    """Hosts live episodes of one kind; wrapped with ``ray.remote`` by the pool."""

    def __init__(self, kind: str, capacity: int, cache_dir: str) -> None:
        """Resolve task data through the node's cache (built on first use)."""
        from pathlib import Path

        self.host = EnvHost(kind, capacity, cache_resolver(Path(cache_dir)))

    def reset(self, items: list[tuple[str, EpisodeSpec]]) -> list[StepResult]:
        """Start episodes."""
        return self.host.reset(items)

    def step(self, moves: list[tuple[str, str]]) -> list[StepResult]:
        """Step episodes."""
        return self.host.step(moves)

    def close(self, handles: list[str]) -> None:
        """End episodes."""
        self.host.close(handles)

    def stats(self) -> dict[str, Any]:
        """Instance counts."""
        return self.host.stats()


@dataclass
class _Live:
    spec: EpisodeSpec
    actor: int
    actions: list[str] = field(default_factory=list)
    replays: int = 0


class EnvPool:
    """Async supervisor actor of one environment kind; wrapped with ``ray.remote`` by the
    scheduler."""

    def __init__(self, kind: str, cfg: EnvPoolConfig, cache_dir: str) -> None:
        """Start ``cfg.actors`` env actors with the declared resources."""
        self.kind = kind
        self.cfg = cfg
        self.cache_dir = cache_dir
        self.actors = [self._start_actor() for _ in range(cfg.actors)]
        self.live: dict[str, _Live] = {}
        self.load = [0] * len(self.actors)
        self.capacity = cfg.envs_per_actor
        self.free = asyncio.Semaphore(self.capacity * len(self.actors))
        self.locks = [asyncio.Lock() for _ in self.actors]
        self.ids = itertools.count()
        self.restarts = 0
        self.episodes_started = 0

    def _start_actor(self) -> Any:
        options = {
            "num_cpus": self.cfg.cpus_per_actor,
            "memory": self.cfg.memory_mb_per_actor * 2**20,
            "max_restarts": 0,
        }
        return (
            ray.remote(EnvActor)
            .options(**options)
            .remote(self.kind, self.cfg.envs_per_actor, self.cache_dir)
        )

    # ---- the client API ------------------------------------------------------------------------

    async def reset(self, specs: list[EpisodeSpec]) -> list[tuple[str, StepResult]]:
        """Start one episode per spec (waits while the pool is full); returns handles and first
        results."""
        handles = []
        for spec in specs:
            await self.free.acquire()
            index = min(range(len(self.actors)), key=self.load.__getitem__)
            self.load[index] += 1
            handle = f"{self.kind}-{next(self.ids)}"
            self.live[handle] = _Live(spec, index)
            handles.append(handle)
        try:
            results = await self._fan_out("reset", [(h, self.live[h].spec) for h in handles])
        except BaseException:
            await self.close(handles)
            raise
        self.episodes_started += len(handles)
        return list(zip(handles, results, strict=True))

    async def step(self, moves: list[tuple[str, str]]) -> list[StepResult]:
        """One action per live episode, all actors stepping concurrently."""
        for handle, _ in moves:
            if handle not in self.live:
                raise EnvError(f"no live {self.kind} episode {handle!r}; reset one first")
        results = await self._fan_out("step", moves)
        for handle, action in moves:
            self.live[handle].actions.append(action)
        return results

    async def close(self, handles: list[str]) -> None:
        """End episodes and free their places."""
        by_actor: dict[int, list[str]] = {}
        for handle in handles:
            episode = self.live.pop(handle, None)
            if episode is None:
                continue
            by_actor.setdefault(episode.actor, []).append(handle)
            self.load[episode.actor] -= 1
            self.free.release()
        for index, group in by_actor.items():
            with contextlib.suppress(*_DEAD):  # a dead actor's replacement never had them
                await self.actors[index].close.remote(group)

    # ---- fan-out and recovery ------------------------------------------------------------------

    async def _fan_out(self, method: str, items: list[tuple[str, Any]]) -> list[StepResult]:
        """Send each item to its episode's actor (one call per actor, concurrently), in item
        order."""
        by_actor: dict[int, list[int]] = {}
        for position, (handle, _) in enumerate(items):
            by_actor.setdefault(self.live[handle].actor, []).append(position)
        out: list[StepResult | None] = [None] * len(items)

        async def run(index: int, positions: list[int]) -> None:
            batch = [items[p] for p in positions]
            for _attempt in range(self.cfg.max_replays + 1):
                actor = self.actors[index]
                try:
                    results = await getattr(actor, method).remote(batch)
                except RayTaskError as error:
                    raise error.as_instanceof_cause() from None
                except _DEAD as error:
                    logger.warning(
                        "env actor %d of %s died (%s); replacing it", index, self.kind, error
                    )
                    await self._recover(
                        index, actor, skip={h for h, _ in batch} if method == "reset" else set()
                    )
                    continue
                for p, result in zip(positions, results, strict=True):
                    out[p] = result
                return
            raise EnvError(
                f"{self.kind} env actor {index} kept dying ({self.cfg.max_replays} replacements)"
            )

        await asyncio.gather(*(run(i, ps) for i, ps in by_actor.items()))
        return [r for r in out if r is not None]

    async def _recover(self, index: int, dead: Any, skip: set[str]) -> None:
        """Replace a dead actor (once, however many callers noticed) and replay its episodes."""
        async with self.locks[index]:
            if self.actors[index] is not dead:
                return  # someone else already replaced it
            self.restarts += 1
            self.actors[index] = self._start_actor()
            mine = [(h, e) for h, e in self.live.items() if e.actor == index and h not in skip]
            if not mine:
                return
            for _, episode in mine:
                episode.replays += 1
                if episode.replays > self.cfg.max_replays:
                    raise EnvError(
                        f"{self.kind} episode {episode.spec.episode_id} was replayed too often"
                    )
            actor = self.actors[index]
            await actor.reset.remote([(h, e.spec) for h, e in mine])
            for k in range(max(len(e.actions) for _, e in mine)):
                moves = [(h, e.actions[k]) for h, e in mine if len(e.actions) > k]
                await actor.step.remote(moves)
            logger.warning("replayed %d %s episodes on a new actor", len(mine), self.kind)

    # ---- operators and tests -------------------------------------------------------------------

    async def ready(self) -> int:
        """Wait until every env actor is up; returns how many there are."""
        await asyncio.gather(*(actor.stats.remote() for actor in self.actors))
        return len(self.actors)

    def actor_handles(self) -> list[Any]:
        """The current env actors (for fault-injection tests)."""
        return list(self.actors)

    async def stats(self) -> dict[str, Any]:
        """Live episodes, restarts and the declared resources."""
        return {
            "kind": self.kind,
            "actors": len(self.actors),
            "live": len(self.live),
            "restarts": self.restarts,
            "episodes_started": self.episodes_started,
            "load": list(self.load),
            "cpus_per_actor": self.cfg.cpus_per_actor,
            "memory_mb_per_actor": self.cfg.memory_mb_per_actor,
        }

    def ping(self) -> bool:
        """Liveness check."""
        return True


class PoolEnvClient:
    """A synchronous :class:`autorl.envs.host.EnvClient` over an EnvPool actor handle."""

    def __init__(self, pool: Any) -> None:
        """Wrap the pool's handle."""
        self.pool = pool

    def _get(self, ref: Any) -> Any:
        try:
            return ray.get(ref)
        except RayTaskError as error:
            raise error.as_instanceof_cause() from None

    def reset(self, specs: list[EpisodeSpec]) -> list[tuple[str, StepResult]]:
        """Start episodes."""
        return self._get(self.pool.reset.remote(specs))  # type: ignore[no-any-return]

    def step(self, moves: list[tuple[str, str]]) -> list[StepResult]:
        """Step episodes."""
        return self._get(self.pool.step.remote(moves))  # type: ignore[no-any-return]

    def close(self, handles: list[str]) -> None:
        """End episodes."""
        self._get(self.pool.close.remote(handles))


def find_pool_client(kind: str) -> PoolEnvClient | None:
    """The client of the named pool of ``kind`` in this job's namespace, or None when there is
    none."""
    try:
        return PoolEnvClient(ray.get_actor(pool_name(kind)))
    except ValueError:
        return None


def start_env_pools(cells: list[Any], cache_dir: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Create ``envpool:<kind>`` for every interactive task among ``cells`` (one per kind) and wait
    until their actors run, so they hold their resources before any cell is placed.

    The pool settings come from the first cell of each kind (``task.env_pool``).

    Raises:
        AutorlError: The env actors could not be placed within ``timeout_s`` (the message says what
            they ask for and how to lower it).
    """
    from ray.exceptions import GetTimeoutError

    from autorl.errors import AutorlError
    from autorl.tasks import get_task

    pools: dict[str, Any] = {}
    asks: dict[str, str] = {}
    for cell in cells:
        spec = get_task(cell.task)
        if spec.kind != "interactive" or spec.env in pools:
            continue
        cfg = cell.config.task.env_pool
        if cfg is None:
            raise AutorlError(
                f"task {spec.id!r} is interactive ({spec.env} environments) but "
                f"{spec.folder / 'task.yaml'} has no run.env_pool "
                "block (actors, envs_per_actor, cpus_per_actor, memory_mb_per_actor, max_replays)"
            )
        pools[spec.env] = (
            ray.remote(EnvPool)
            .options(name=pool_name(spec.env), num_cpus=0, get_if_exists=True, max_concurrency=1000)
            .remote(spec.env, cfg, cache_dir)
        )
        asks[spec.env] = (
            f"{cfg.actors} x (CPU {cfg.cpus_per_actor:g}, {cfg.memory_mb_per_actor} MB)"
        )
    try:
        ray.get([pool.ready.remote() for pool in pools.values()], timeout=timeout_s)
    except GetTimeoutError as error:
        raise AutorlError(
            f"env pools could not start within {timeout_s:.0f} s; their actors ask for {asks} and "
            "the cluster has "
            f"{ray.cluster_resources()}; lower task.env_pool.cpus_per_actor / actors / "
            "memory_mb_per_actor"
        ) from error
    return pools
