"""webshop: the built-in shop, WebShop's reward, the HTTP client against a stand-in site, the
evaluator."""

from __future__ import annotations

import doctest
import json
import socket
import threading
import time
from collections.abc import Iterator
from types import ModuleType

import pytest

from autorl.envs.base import EnvData, EnvSource, EpisodeSpec
from autorl.tasks import (
    EvalContext,
    TaskData,
    build_task_data,
    eval_options,
    get_task,
    load_evaluator,
    load_task_module,
)

SPEC = get_task("webshop")
SHOP: ModuleType = load_task_module(SPEC, "builtin_shop.py")
REWARD: ModuleType = load_task_module(SPEC, "reward.py")
SERVER: ModuleType = load_task_module(SPEC, "server_client.py")
BuiltinWebShop = SHOP.BuiltinWebShop
get_reward = REWARD.get_reward
BUILD = {"catalogue_size": 36, "train_size": 10, "eval_size": 8}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> TaskData:
    return build_task_data(SPEC, "fixture", tmp_path_factory.mktemp("ws"), seed=0, options=BUILD)


def _spec(episode_id: str, **env: object) -> EpisodeSpec:
    """An episode whose env options are the task's fixture eval options with ``env`` over them."""
    return EpisodeSpec(
        EnvSource("webshop", "fixture", 0, BUILD, eval_options(SPEC, "fixture", env)), episode_id
    )


@pytest.mark.parametrize(
    "filename",
    [
        "fixture.py",
        "reward.py",
        "builtin_shop.py",
        "server_client.py",
        "agent/protocol.py",
        "agent/shopper.py",
    ],
)
def test_doctests(filename: str) -> None:
    result = doctest.testmod(load_task_module(SPEC, filename))
    assert result.attempted > 0 and result.failed == 0


def test_fixture_build_is_pinned(data: TaskData) -> None:
    # Changing the generated catalogue or goals changes every score: bump the task version with it.
    assert data.digest == "c7811590c51bf0ffa9e97f5a71256e5160332966401f21760c27a8fba93c9b99"
    assert len((data.private_dir / "goals.jsonl").read_text().splitlines()) == BUILD["eval_size"]


def _play_expert(
    env: BuiltinWebShop, data: TaskData, episode_id: str
) -> list[tuple[str, str, float]]:
    result = env.reset(_spec(episode_id), EnvData(data.public_dir, data.private_dir))
    trace = []
    while not result.done:
        action = result.info["expert_action"]
        result = env.step(action)
        trace.append((action, result.observation, result.reward))
    return trace


def test_expert_buys_the_goal_product_for_full_reward(data: TaskData) -> None:
    trace = _play_expert(BuiltinWebShop(), data, "train/8")
    actions = [a for a, _, _ in trace]
    assert actions[0].startswith("search[") and actions[-1] == "click[buy now]"
    assert trace[-1][2] == pytest.approx(1.0)
    assert "Your score (min 0.0, max 1.0) [SEP] 1.0000" in trace[-1][1]


def test_observations_and_unavailable_actions(data: TaskData) -> None:
    env = BuiltinWebShop()
    first = env.reset(_spec("train/8"), EnvData(data.public_dir, data.private_dir))
    assert first.observation.startswith(
        "WebShop [SEP] Instruction: [SEP] i need a "
    ) and first.observation.endswith("[SEP] Search")
    assert (
        env.step("click[buy now]").observation == first.observation
    )  # nothing to click on the search page
    results = env.step("search[shirt]")
    assert (
        "Page 1 (Total results:" in results.observation
        and "click[back to search]" in results.admissible_actions
    )
    assert (
        env.step("search[again]").observation == results.observation
    )  # no search bar on a results page


def test_reward_parts_follow_webshop(data: TaskData) -> None:
    products = {
        p["asin"]: p
        for p in map(json.loads, (data.public_dir / "catalogue.jsonl").read_text().splitlines())
    }
    goal = json.loads((data.public_dir / "goals.jsonl").read_text().splitlines()[0])
    target = products[goal["asin"]]
    perfect = get_reward(target, goal, target, target["price"], dict(goal["goal_options"]))
    assert perfect["reward"] == pytest.approx(1.0)
    no_options = get_reward(target, goal, target, target["price"], {})
    n_att, n_opt = len(goal["attributes"]), len(goal["goal_options"])
    assert no_options["reward"] == pytest.approx((n_att + 1) / (n_att + n_opt + 1))
    too_dear = get_reward(target, goal, target, goal["price_upper"] + 1, dict(goal["goal_options"]))
    assert too_dear["r_price"] == 0.0 and too_dear["reward"] < 1.0
    other_kind = next(
        p
        for p in products.values()
        if p["query"] != target["query"]
        and not set(p["name"].split()[1:]) & set(target["name"].split()[1:])
    )
    assert get_reward(other_kind, goal, target, other_kind["price"], {})["reward"] == 0.0


@pytest.fixture(scope="module")
def site(data: TaskData) -> Iterator[str]:
    import uvicorn

    from tests.helpers.webshop_site import create_site

    # The stand-in serves the training goals as fixed_<i>, as the real site serves its goal i.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(
        uvicorn.Config(
            create_site(data.public_dir / "catalogue.jsonl", data.public_dir / "goals.jsonl"),
            log_level="warning",
            lifespan="off",
        )
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(10)


def test_http_client_speaks_the_site_protocol_like_the_builtin_env(
    data: TaskData, site: str
) -> None:
    builtin = BuiltinWebShop()
    expected = _play_expert(builtin, data, "train/9")
    remote = SERVER.WebShopServerEnv()
    first = remote.reset(
        _spec("train/9", backend="server", server_url=site),
        EnvData(data.public_dir, data.private_dir),
    )
    assert (
        first.observation
        == builtin.reset(_spec("train/9"), EnvData(data.public_dir, data.private_dir)).observation
    )
    for action, observation, reward in expected:
        result = remote.step(action)
        assert result.observation == observation, action
        assert result.reward == pytest.approx(reward, abs=1e-4)
    assert result.done and result.reward == pytest.approx(1.0, abs=1e-4)
    remote.close()


def test_env_refuses_incomplete_or_unknown_options(data: TaskData) -> None:
    from autorl.envs.base import EnvError
    from autorl.task_code.webshop.env import WebShopEnv

    partial = EpisodeSpec(
        EnvSource("webshop", "fixture", 0, BUILD, {"backend": "builtin"}), "train/9"
    )
    with pytest.raises(
        EnvError, match=r"webshop eval options lack concurrency, .*EvalContext.for_task"
    ):
        WebShopEnv().reset(partial, EnvData(data.public_dir, data.private_dir))
    with pytest.raises(
        EnvError, match="unknown webshop eval option 'backnd' \\(did you mean 'backend'\\?\\)"
    ):
        misspelt = EnvSource(
            "webshop", "fixture", 0, BUILD, eval_options(SPEC, "fixture") | {"backnd": "server"}
        )
        WebShopEnv().reset(
            EpisodeSpec(misspelt, "train/9"), EnvData(data.public_dir, data.private_dir)
        )


class _BuyTheTarget:
    """Searches the goal's product title, opens it and buys it without choosing options."""

    def __init__(self, data: TaskData) -> None:
        goals = [
            json.loads(line) for line in (data.private_dir / "goals.jsonl").read_text().splitlines()
        ]
        products = {
            p["asin"]: p
            for p in map(json.loads, (data.public_dir / "catalogue.jsonl").read_text().splitlines())
        }
        self.by_instruction = {g["instruction_text"]: products[g["asin"]] for g in goals}
        self.calls = 0
        self.longest = 0  # messages in the longest conversation

    def generate_chat(
        self,
        conversations: list[list[dict[str, str]]],
        *,
        max_new_tokens: int,
        stop: list[str] | None = None,
    ) -> list[str]:
        self.calls += 1
        replies = []
        for conversation in conversations:
            self.longest = max(self.longest, len(conversation))
            # The instruction is in the first user turn; the current page ends the last one.
            product = next(
                p
                for text, p in self.by_instruction.items()
                if f"Instruction: {text}\n" in conversation[1]["content"]
            )
            current = conversation[-1]["content"].rsplit("Observation ", 1)[1]
            if "[SEP] Search" in current:
                replies.append(f"Action: search[{product['Title']}]\nmore")
            elif "Total results" in current:
                replies.append(f"click[{product['asin'].lower()}]")
            else:
                replies.append("choose[Buy Now]")
        return replies


def test_evaluator_plays_all_sessions_together(data: TaskData) -> None:
    engine = _BuyTheTarget(data)
    result = load_evaluator(SPEC)(
        engine, EvalContext.for_task(SPEC, "fixture", data.private_dir, {"max_steps": 6})
    )
    assert (
        result.num_examples == 8 and engine.calls == 3
    )  # 8 sessions, 3 steps each, one engine call per step
    assert (
        engine.longest == 6
    )  # the fixture's multi-turn prompt: system, then user/assistant turns, a user turn last
    assert 0.0 < result.details["avg_reward"] < 1.0  # options never chosen
    assert result.details["samples"][0]["actions"][-1] == "click[Buy Now]"
    assert result.score == pytest.approx(100.0 * result.details["success_count"] / 8)
    garbage = load_evaluator(SPEC)(
        _Garbage(), EvalContext.for_task(SPEC, "fixture", data.private_dir, {"max_steps": 3})
    )
    assert garbage.score == 0.0 and garbage.details["avg_reward"] == 0.0


class _Garbage:
    def generate_chat(
        self,
        conversations: list[list[dict[str, str]]],
        *,
        max_new_tokens: int,
        stop: list[str] | None = None,
    ) -> list[str]:
        return ["no idea, sorry"] * len(conversations)
