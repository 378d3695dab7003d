"""alfworld: generated games of all six types are winnable, the hub layout loader, the ReAct
evaluator."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from autorl.envs.base import EnvData, EnvSource, EpisodeSpec
from autorl.task_code.alfworld.agent.protocol import (
    HEADER,
    TASK_INTRO,
    examples,
    render_prompt,
)
from autorl.task_code.alfworld.env import AlfworldEnv, load_episodes
from autorl.task_code.alfworld.fixture import RoomSize, write_fixture_split
from autorl.task_code.alfworld.games import SHORT_TYPES
from autorl.tasks import (
    EvalContext,
    TaskData,
    build_task_data,
    eval_options,
    get_task,
    load_evaluator,
)

SPEC = get_task("alfworld")
BUILD = {"train_size": 6, "eval_size": 6}
# An environment's options are the task's eval options; the reference's step limit leaves room for
# the planner's longest walkthrough.
SOURCE = EnvSource(
    "alfworld", "fixture", 0, BUILD, eval_options(SPEC, "fixture", {"max_steps": 50})
)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> TaskData:
    return build_task_data(SPEC, "fixture", tmp_path_factory.mktemp("alfw"), seed=0, options=BUILD)


def _walkthroughs(folder: Path, tmp: Path) -> dict[str, list[str]]:
    """The planner's winning commands for every game listed in ``folder`` (played as training
    games)."""
    rows = list(load_episodes(folder).values())
    shadow = tmp / "as-train"
    shadow.mkdir(exist_ok=True)
    (shadow / "episodes.jsonl").write_text(
        "\n".join(
            json.dumps(
                {
                    **r,
                    "episode_id": "train/" + r["episode_id"].split("/", 1)[1],
                    "game": str(folder / r["game"]),
                }
            )
            for r in rows
        )
    )
    env, plans = AlfworldEnv(), {}
    for row in rows:
        result = env.reset(
            EpisodeSpec(SOURCE, "train/" + row["episode_id"].split("/", 1)[1]),
            EnvData(shadow, shadow),
        )
        plan = []
        while not result.done:
            plan.append(result.info["expert_action"])
            result = env.step(plan[-1])
        assert result.info["won"] and result.reward == 1.0, row["episode_id"]
        plans[row["episode_id"]] = plan
    env.close()
    return plans


def test_every_task_type_is_generated_and_won_by_the_planner(
    data: TaskData, tmp_path: Path
) -> None:
    train = list(load_episodes(data.public_dir).values())
    assert sorted(r["task"] for r in train) == sorted(SHORT_TYPES)
    plans = _walkthroughs(data.public_dir, tmp_path)
    assert all(len(p) >= 3 for p in plans.values())
    evals = list(load_episodes(data.private_dir))
    assert not {e.split("/", 1)[1] for e in evals} & {
        r["episode_id"].split("/", 1)[1] for r in train
    }


def _room(game_file: Path) -> tuple[int, int]:
    """(receptacles, objects) of a generated game's PDDL problem."""
    init = json.loads(game_file.read_text())["pddl_problem"].split("(:init")[1].split("(:goal")[0]
    return init.count("(receptacleType "), init.count("(objectType ")


def test_room_size_options_bound_what_a_room_holds(tmp_path: Path) -> None:
    small = write_fixture_split(tmp_path / "small", "g", 24, random.Random(0), 1, RoomSize(1, 1, 1))
    large = write_fixture_split(tmp_path / "large", "g", 24, random.Random(0), 1, RoomSize(3, 2, 3))
    small_rooms, large_rooms = [_room(f) for _, f in small], [_room(f) for _, f in large]
    # A task needs at most 4 receptacle types (countertop, target, appliance or lamp's, start) and 3
    # objects
    # (two of ``puttwo``, or the object and the lamp); one more type and one distractor at most.
    assert max(r for r, _ in small_rooms) <= 5 and max(o for _, o in small_rooms) <= 3
    assert sum(r for r, _ in large_rooms) > 1.5 * sum(r for r, _ in small_rooms)
    assert sum(o for _, o in large_rooms) > sum(o for _, o in small_rooms)


class _Oracle:
    """Plays each game's planner walkthrough; finds the game by the task statement in the prompt."""

    def __init__(self, plans: dict[str, list[str]], firsts: dict[str, str]) -> None:
        self.by_first = {firsts[e]: plan for e, plan in plans.items()}
        self.calls = 0

    def generate_text(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str] | None = None
    ) -> list[str]:
        self.calls += 1
        assert stop == ["\n"]
        out = []
        for prompt in prompts:
            task = prompt.split(TASK_INTRO, 1)[1]
            first = task.split("\n>", 1)[0]
            done_steps = task.count("\n>") - 1
            out.append(f" {self.by_first[first][done_steps]}\nYou arrive")
        return out


def test_evaluator_scores_won_games_with_per_type_rates(data: TaskData, tmp_path: Path) -> None:
    plans = _walkthroughs(data.private_dir, tmp_path)
    env, firsts = AlfworldEnv(), {}
    for episode_id in plans:
        firsts[episode_id] = env.reset(
            EpisodeSpec(SOURCE, episode_id), EnvData(data.public_dir, data.private_dir)
        ).observation
    engine = _Oracle(plans, firsts)
    result = load_evaluator(SPEC)(
        engine, EvalContext.for_task(SPEC, "fixture", data.private_dir)
    )  # the sweep's options
    assert result.score == 100.0 and result.num_examples == 6
    assert engine.calls == max(len(p) for p in plans.values())  # all games advance together
    assert {t: v["rate"] for t, v in result.details["per_task"].items()} == {
        t: 100.0 for t in SHORT_TYPES
    }


def test_prompt_is_the_reference_react_format_and_truncates_examples_first() -> None:
    first = "You are in the middle of a room.\n\nYour task is to: put a pen in desk."
    full = render_prompt("put", first, [("go to desk 1", "You arrive at desk 1.")], None)
    assert (
        full
        == HEADER
        + examples("put")
        + TASK_INTRO
        + first
        + "\n> go to desk 1\nYou arrive at desk 1.\n>"
    )
    assert (
        examples("put").index("Your task is to") < len(examples("put")) // 2
    )  # react_put_1 comes first
    history = [(f"go to shelf {i}", f"You arrive at shelf {i}.") for i in range(40)]
    short = render_prompt("put", first, history, 400)
    assert (
        len(short) <= 400
        and short.startswith(TASK_INTRO + first)
        and short.endswith("You arrive at shelf 39.\n>")
    )
    assert "Here are two examples" not in short


def test_hub_build_reads_the_alfworld_download_layout(tmp_path: Path) -> None:
    from alfworld.info import ALFRED_PDDL_PATH

    root = tmp_path / "alfworld-data"
    (root / "logic").mkdir(parents=True)
    shutil.copyfile(ALFRED_PDDL_PATH, root / "logic" / "alfred.pddl")
    rng = random.Random(3)
    write_fixture_split(root / "json_2.1.1", "train", 6, rng, 1, RoomSize(1, 1, 1))
    valid = write_fixture_split(root / "json_2.1.1", "valid_unseen", 7, rng, 500, RoomSize(1, 1, 1))
    # ALFWorld's own selection skips unsolvable games and movable-receptacle variants.
    unsolvable = json.loads(valid[0][1].read_text())
    valid[0][1].write_text(json.dumps(unsolvable | {"solvable": False}))
    moved = valid[1][1].parent.parent.with_name(
        valid[1][1].parent.parent.name.replace("pick_", "pick_and_place_with_movable_recep-", 1)
    )
    valid[1][1].parent.parent.rename(moved)
    built = build_task_data(
        SPEC,
        "hub",
        tmp_path / "cache",
        options={"data_root": str(root), "download": False, "expect_eval_games": 5},
    )
    train, evals = load_episodes(built.public_dir), load_episodes(built.private_dir)
    assert len(train) == 6 and len(evals) == 5
    assert all(
        (built.public_dir / r["game"]).is_file() for r in train.values()
    )  # copied out of the cache
    assert all(
        Path(r["game"]).is_absolute() and "valid_unseen" in r["game"] for r in evals.values()
    )
    from autorl.errors import TaskError

    with pytest.raises(TaskError, match="expected 134"):
        build_task_data(
            SPEC, "hub", tmp_path / "cache2", options={"data_root": str(root), "download": False}
        )
    with pytest.raises(TaskError, match="alfworld-download"):
        build_task_data(
            SPEC,
            "hub",
            tmp_path / "cache3",
            options={"data_root": str(tmp_path / "empty"), "download": False},
        )


def _mapped_planner_copies() -> int:
    """Deleted copies of fast-downward's library still mapped into this process (the disk space they
    hold)."""
    with open("/proc/self/maps") as maps:
        return sum("libdownward.so (deleted)" in line and "r-xp" in line for line in maps)


def test_a_closed_game_gives_back_its_planner_library(data: TaskData) -> None:
    """Every game loads a private 34 MB copy of the planner's library from a deleted file; closing
    the game
    unloads it, so an env that plays many games holds the disk space of one at most."""
    env = AlfworldEnv()
    ids = list(load_episodes(data.private_dir))
    before = _mapped_planner_copies()
    for episode_id in ids:
        result = env.reset(
            EpisodeSpec(SOURCE, episode_id), EnvData(data.public_dir, data.private_dir)
        )
        env.step(result.admissible_actions[0])
    assert _mapped_planner_copies() <= before + 1
    env.close()
    assert _mapped_planner_copies() == before
    result = env.reset(
        EpisodeSpec(SOURCE, ids[0]), EnvData(data.public_dir, data.private_dir)
    )  # a new copy loads
    assert env.step(result.admissible_actions[0]).observation
    env.close()
