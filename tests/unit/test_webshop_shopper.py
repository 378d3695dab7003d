"""The WebShop recipe's shopping expert buys the instruction's kind of product from the page text
alone."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from agent_kit.rollout import Episode
from agent_kit.scripted.interactive import expert_samples
from agent_kit.scripted.policy import LocalPolicy
from autorl.envs.host import local_episode_client
from autorl.task_code.webshop.agent import shopper
from autorl.task_code.webshop.agent.protocol import WebShopProtocol, instruction_of
from autorl.task_code.webshop.agent.recipe import RECIPE
from autorl.task_code.webshop.builtin_shop import load_goals
from autorl.tasks import TaskData, build_task_data, eval_options, get_task

SPEC = get_task("webshop")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> TaskData:
    return build_task_data(
        SPEC,
        "fixture",
        tmp_path_factory.mktemp("ws-shopper"),
        seed=2,
        options={"catalogue_size": 120, "train_size": 4, "eval_size": 40},
    )


def test_shopper_succeeds_on_eval_sessions_without_the_oracle(data: TaskData) -> None:
    """Eval sessions carry no ``expert_action``: the shopper reads the page. It searches the product
    kind,
    opens the first result, clicks the named options and buys, within 5 actions. The first result
    need
    not have the instruction's attributes, so not every session passes the success threshold: 35 of
    40
    on this build (mean reward 0.63, where the oracle that knows the product gets 1.0)."""
    options = eval_options(SPEC, "fixture", {})
    client = local_episode_client("webshop", "webshop", data.private_dir, options)
    rewards = []
    for episode_id in sorted(load_goals(data.private_dir)):
        ((handle, first),) = client.reset([episode_id])
        assert "expert_action" not in first.info
        episode = Episode(episode_id, handle, first)
        while not episode.current.done:
            action = shopper.next_action(episode)
            assert action and episode.steps < 5, f"{episode_id}: {episode.history}"
            (result,) = client.step([(handle, action)])
            episode.record(action, action, result)
        client.close([handle])
        wish = shopper.parse_wish(instruction_of(first.observation))
        assert (
            episode.history[0][0] == f"search[{wish.kind}]"
            and episode.history[-1][0] == "click[buy now]"
        )
        rewards.append(episode.current.reward)
    assert len(rewards) == 40 and sum(r >= options["success_threshold"] for r in rewards) >= 30, (
        rewards
    )
    assert sum(rewards) / len(rewards) >= 0.6, rewards


def test_the_recipe_trains_on_the_eval_prompt_one_sequence_per_session(
    data: TaskData, tiny_model_dir: Path
) -> None:
    """The recipe renders the fixture evaluator's prompt, whose multi-turn conversation extends
    itself each step: every expert session trains as one sequence. The reference's single prompt
    gives one per
    action."""
    options = eval_options(SPEC, "fixture", {})
    assert RECIPE.protocol == WebShopProtocol(
        max_new_tokens=options["max_new_tokens"],
        history_window=options["history_window"],
        multi_turn=options["multi_turn"],
    )
    client = local_episode_client("webshop", "webshop", data.private_dir, options)
    ids = sorted(load_goals(data.private_dir))[:6]
    policy = LocalPolicy(tiny_model_dir, RECIPE.max_length)
    packed, _ = expert_samples(RECIPE, client, ids, policy, deadline=time.monotonic() + 600)
    actions = sum(len(sample.turns()) for sample in packed)
    assert len(packed) == len(ids) and actions >= 3 * len(ids)  # search, product, buy at least
    reference = replace(RECIPE, protocol=replace(RECIPE.protocol, multi_turn=False))
    apart, _ = expert_samples(reference, client, ids, policy, deadline=time.monotonic() + 600)
    assert len(apart) == actions
