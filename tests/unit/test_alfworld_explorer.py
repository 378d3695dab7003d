"""The ALFWorld recipe's searching expert wins the fixture's games from the episode text alone."""

from __future__ import annotations

from collections import Counter

import pytest

from agent_kit.rollout import Episode
from autorl.envs.host import local_episode_client
from autorl.task_code.alfworld.agent.explorer import next_action
from autorl.task_code.alfworld.env import load_episodes
from autorl.task_code.alfworld.games import SHORT_TYPES
from autorl.tasks import TaskData, build_task_data, eval_options, get_task

SPEC = get_task("alfworld")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> TaskData:
    return build_task_data(
        SPEC,
        "fixture",
        tmp_path_factory.mktemp("alfw-explorer"),
        seed=3,
        options={"train_size": 12, "eval_size": 24},
    )


def test_explorer_wins_every_eval_game_within_the_fixture_step_limit(data: TaskData) -> None:
    """The expert sees what a policy sees (no ``expert_action``: eval episodes carry none), so a
    policy
    that imitates it can win too; it must win all 24 games of all six types within ``max_steps``."""
    options = eval_options(SPEC, "fixture", {})
    client = local_episode_client("alfworld", "alfworld", data.private_dir, options)
    won: Counter[str] = Counter()
    for episode_id in load_episodes(data.private_dir):
        ((handle, first),) = client.reset([episode_id])
        assert "expert_action" not in first.info
        episode = Episode(episode_id, handle, first)
        while not episode.current.done:
            action = next_action(episode)
            assert action, f"expert gave up in {episode_id}: {episode.history}"
            (result,) = client.step([(handle, action)])
            episode.record(action, action, result)
        client.close([handle])
        assert episode.current.info["won"], f"{episode_id} lost: {episode.history}"
        won[str(first.info["task_type"])] += 1  # won before the env's max_steps ended the episode
    assert sorted(won) == sorted(SHORT_TYPES)
