"""EnvPool on a real local Ray: named per-kind supervisor, declared resources, batched evaluation,
and a killed env actor replaced mid-evaluation with its episodes replayed (same score, none
lost)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from autorl.actors.env_pool import EnvPool, find_pool_client, pool_name
from autorl.envs.base import EnvSource
from autorl.envs.host import EpisodeClient
from autorl.schema import EnvPoolConfig
from autorl.tasks import EvalContext, build_task_data, eval_options, get_task, load_evaluator

pytestmark = pytest.mark.integration
BUILD = {"catalogue_size": 36, "train_size": 4, "eval_size": 12}
POOL = EnvPoolConfig(
    actors=2, envs_per_actor=8, cpus_per_actor=0.25, memory_mb_per_actor=256, max_replays=3
)


class _Shopper:
    """A deterministic policy: search the instruction, open the first result, pick the first option,
    buy.

    ``kill`` is called before the engine call with that number (1-based), to kill an env actor
    mid-run.
    """

    def __init__(self, kill_at: int | None = None, kill: object = None) -> None:
        self.calls, self.kill_at, self.kill = 0, kill_at, kill

    def generate_chat(
        self,
        conversations: list[list[dict[str, str]]],
        *,
        max_new_tokens: int,
        stop: list[str] | None = None,
    ) -> list[str]:
        self.calls += 1
        if self.calls == self.kill_at:
            self.kill()  # type: ignore[operator]
        replies = []
        for conversation in conversations:
            # Either prompt shape: the fixture's multi-turn chat (the current page's actions end the
            # last user turn, past actions are assistant turns) or the reference's single user turn.
            user = conversation[-1]["content"]
            listed = user.split("Available actions:\n", 1)[1].split("\n\n", 1)[0].splitlines()
            actions = [
                line.strip() for line in listed if line.startswith("  ")
            ]  # both prompts indent them
            instruction = conversation[1]["content"].split("Instruction: ", 1)[1].split("\n", 1)[0]
            products = [a for a in actions if re.fullmatch(r"click\[b\d+\]", a)]
            previous = [
                m["content"] for m in conversation if m["role"] == "assistant"
            ] or re.findall(r"\nAction \d+: (.*)", user)
            if actions == ["search[<your query>]"]:
                replies.append(f"search[{instruction.split(', with')[0]}]")
            elif products:
                replies.append(products[0])
            elif previous and re.fullmatch(r"click\[b\d+\]", previous[-1]):
                options = [
                    a
                    for a in actions
                    if a
                    not in (
                        "click[back to search]",
                        "click[< prev]",
                        "click[description]",
                        "click[features]",
                        "click[reviews]",
                        "click[buy now]",
                    )
                ]
                replies.append(options[0] if options else "click[buy now]")
            else:
                replies.append("click[buy now]")
        return replies


@pytest.fixture()
def cluster(ray_tmp: Path) -> Iterator[None]:
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        _temp_dir=str(ray_tmp),
        log_to_driver=False,
        namespace="envpool-test",
    )
    try:
        yield
    finally:
        ray.shutdown()


def test_pool_steps_episodes_in_parallel_and_survives_a_dead_actor(
    cluster: None, cache_dir: Path
) -> None:
    data = build_task_data(
        get_task("webshop"), "fixture", cache_dir / "tasks", seed=0, options=BUILD
    )
    pool = (
        ray.remote(EnvPool)
        .options(name=pool_name("webshop"), num_cpus=0)
        .remote("webshop", POOL, str(cache_dir))
    )
    client = find_pool_client("webshop")
    assert client is not None and find_pool_client("alfworld") is None
    assert ray.get(pool.ready.remote()) == 2
    stats = ray.get(pool.stats.remote())
    assert stats["actors"] == 2 and stats["cpus_per_actor"] == 0.25
    assert ray.available_resources()["CPU"] == pytest.approx(
        2 - 2 * 0.25
    )  # the declared CPUs are reserved
    options = eval_options(get_task("webshop"), "fixture", {"max_steps": 6})
    envs = EpisodeClient(client, EnvSource("webshop", "fixture", 0, BUILD, options))
    evaluate = load_evaluator(get_task("webshop"))

    ctx = EvalContext(data.private_dir, options, envs=envs)
    calm = evaluate(_Shopper(), ctx)
    assert (
        calm.num_examples == 12
        and calm.details["max_live"] == 12
        and calm.details["avg_reward"] > 0
    )
    assert ray.get(pool.stats.remote())["live"] == 0  # every episode was closed

    first_actor = ray.get(pool.actor_handles.remote())[0]
    shopper = _Shopper(kill_at=3, kill=lambda: ray.kill(first_actor, no_restart=True))
    stormy = evaluate(shopper, ctx)
    after = ray.get(pool.stats.remote())
    assert after["restarts"] == 1 and after["live"] == 0
    assert ray.get(pool.actor_handles.remote())[0] != first_actor
    # Every episode of the dead actor was restarted from reset and replayed: nothing lost or failed.
    assert stormy.num_examples == calm.num_examples and stormy.score == calm.score
    assert stormy.details["avg_reward"] == pytest.approx(calm.details["avg_reward"])
    assert [s["actions"] for s in stormy.details["samples"]] == [
        s["actions"] for s in calm.details["samples"]
    ]
