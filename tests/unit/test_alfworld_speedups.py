"""alfworld: TextWorld with autorl's speed-ups (tasks/alfworld/tw_speedups.py) plays exactly as
TextWorld does.

The same games are played with the same commands by plain TextWorld in a child process (no patch
loaded there) and with every speed-up here; every observation, admissible command list, planner
suggestion and win flag must be equal.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autorl.task_code.alfworld import tw_speedups
from autorl.tasks import TaskData, build_task_data, get_task

BUILD = {"train_size": 3, "eval_size": 4}

# Plays every game given in argv[1] (a JSON list) for up to 12 commands; speed-ups only with
# argv[2] == "fast".
PLAY = r"""
import contextlib, json, sys
import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
games, fast = json.loads(sys.argv[1]), sys.argv[2] == "fast"
if fast:
    from autorl.task_code.alfworld import tw_speedups
    tw_speedups.install()
played = []
for i, game in enumerate(games):
    infos = textworld.EnvInfos(
        won=True, admissible_commands=True, policy_commands=True, extras=["gamefile"]
    )
    with (tw_speedups.translate_once() if fast else contextlib.nullcontext()):
        wrappers = [AlfredDemangler(shuffle=False), AlfredInfos]
        env = textworld.start(game, request_infos=infos, wrappers=wrappers)
        state = env.reset()
    record = [[state["feedback"], state["admissible_commands"], state["policy_commands"]]]
    for k in range(12):
        commands = state["admissible_commands"]
        # planner's move on even steps (walks towards the goal), another admissible command on
        # odd ones
        command = (state["policy_commands"][0] if k % 2 == 0 and state["policy_commands"]
                   else commands[(7 * k + i) % len(commands)])
        state, _, _ = env.step(command)
        record.append([
            command, state["feedback"], state["admissible_commands"], state["policy_commands"],
            state["won"],
        ])
        if state["won"]:
            break
    env.close()
    played.append(record)
print(json.dumps(played))
"""


@pytest.fixture(scope="module")
def games(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    data: TaskData = build_task_data(
        get_task("alfworld"), "fixture", tmp_path_factory.mktemp("alfw"), seed=0, options=BUILD
    )
    found = sorted(data.private_dir.rglob("game.tw-pddl")) + sorted(
        data.public_dir.rglob("game.tw-pddl")
    )
    assert len(found) == 7
    return [str(path) for path in found]


def _play(games: list[str], mode: str) -> list[list[list[object]]]:
    done = subprocess.run(
        [sys.executable, "-c", PLAY, json.dumps(games), mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_speedups_give_textworlds_own_observations_commands_and_plans(games: list[str]) -> None:
    plain, fast = _play(games, "plain"), _play(games, "fast")
    assert fast == plain
    assert sum(len(record) for record in plain) > 40  # games were really played
    assert any(record[-1][-1] for record in plain)  # and some were won on the way


def test_translate_once_shares_a_translation_only_inside_its_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import fast_downward

    tw_speedups.install()
    calls: list[tuple[str, bool]] = []

    def counting(
        domain: str, problem: str, verbose: bool = False, optimize: bool = False
    ) -> object:
        calls.append((problem, optimize))
        return object()

    monkeypatch.setattr(
        fast_downward.pddl2sas, "__wrapped__", counting
    )  # the translation the memo wraps
    with tw_speedups.translate_once():
        first = fast_downward.pddl2sas("d", "p")
        assert fast_downward.pddl2sas("d", "p") is first
        assert fast_downward.pddl2sas("d", "p", optimize=True) is not first
    assert fast_downward.pddl2sas("d", "p") is not first  # outside the block: translated afresh
    assert calls == [("p", False), ("p", True), ("p", False)]
