"""The ``task=`` config group, built from the task folders: the keys users type, and the refusals
of a task option of the wrong type or name (with the key, the type and the fix)."""

from __future__ import annotations

import pytest

from autorl.config import compose
from autorl.errors import ConfigError
from autorl.registry import CONF_DIR, list_options
from autorl.tasks import build_options, discover_tasks, eval_options, get_task


def test_every_task_folder_is_an_option_of_the_group_and_none_is_a_conf_file() -> None:
    options = {option.name: option for option in list_options("task")}
    assert set(options) == set(discover_tasks())
    for name, option in options.items():
        assert option.path == get_task(name).folder / "task.yaml" and option.description.startswith(
            "[L"
        )
    assert not (CONF_DIR / "task").exists()


@pytest.mark.parametrize("task_id", sorted(discover_tasks()))
def test_a_task_composes_to_its_folder_defaults(task_id: str) -> None:
    spec = get_task(task_id)
    task = compose([f"task={task_id}"]).task
    assert (task.name, task.source, task.budget_s) == (task_id, spec.run.source, spec.run.budget_s)
    assert (task.env_pool is None) == (spec.run.env_pool is None)
    for source in spec.sources:  # plain dicts, equal to the option classes' defaults
        assert task.build[source] == build_options(spec, source)
        assert task.eval[source] == eval_options(spec, source)


def test_the_keys_users_type_still_override_the_task() -> None:
    task = compose(
        [
            "task=gsm8k",
            "task.source=hub",
            "task.budget_s=60",
            "task.build.fixture.eval_size=20",
            "task.eval.hub.limit=5",
            "task.eval.fixture.stop=[END]",
        ]
    ).task
    assert (task.source, task.budget_s) == ("hub", 60.0)
    assert task.build["fixture"] == {"train_size": 2000, "eval_size": 20}
    assert task.eval["hub"]["limit"] == 5 and task.eval["fixture"]["stop"] == ["END"]
    assert compose(["task=webshop", "task.env_pool.actors=1"]).task.env_pool.actors == 1


def test_a_value_of_the_wrong_type_names_the_key_its_type_and_help() -> None:
    with pytest.raises(
        ConfigError,
        match=r"invalid override 'task\.build\.fixture\.train_size=abc': "
        r"task\.build\.fixture\.train_size must be an integer \(int\), got 'abc' "
        r"\(task\.build\.fixture\.train_size: generated problems in public",
    ):
        compose(["task.build.fixture.train_size=abc"])
    with pytest.raises(
        ConfigError, match=r"task\.eval\.fixture\.multi_turn must be true or false \(bool\)"
    ):
        compose(["task=webshop", "task.eval.fixture.multi_turn=maybe"])


def test_an_unknown_key_gets_did_you_mean_and_the_valid_keys() -> None:
    with pytest.raises(
        ConfigError,
        match=r"unknown key task\.build\.fixture\.trian_size\. Did you mean "
        r"task\.build\.fixture\.train_size\? The keys of task\.build\.fixture are: "
        r"train_size, eval_size",
    ):
        compose(["task.build.fixture.trian_size=3"])
    # ``+`` adds keys in Hydra; a task's typed options refuse them all the same.
    with pytest.raises(
        ConfigError,
        match=r"unknown task\.eval\.fixture option 'num_shot' \(did you mean "
        r"'num_shots'\?\); valid: limit, max_new_tokens, num_shots, stop",
    ):
        compose(["+task.eval.fixture.num_shot=2"])
    with pytest.raises(ConfigError, match=r"unknown key task\.build\.nope"):
        compose(["task.build.nope.train_size=3"])


def test_a_given_mapping_replaces_the_default_mapping_whole() -> None:
    """``search`` and ``judge_params`` are complete values: another backend's keys never linger."""
    spec = get_task("deepsearchqa")
    given = {"search": {"backend": "bm25", "num_results": 1}, "judge_params": {"max_tokens": 5}}
    options = eval_options(spec, "hub", given)
    assert options["search"] == given["search"] and options["judge_params"] == {"max_tokens": 5}
