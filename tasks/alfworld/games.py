"""ALFWorld games on disk: the alfworld-download layout and the six task types.

Both sources share one layout: ``<split>/<task_type>-<Obj>-<MRecep>-<Recep>-<scene>/<trial>/``
holding ``game.tw-pddl`` (PDDL domain + problem + text grammar, the format ALFWorld's TextWorld
engine loads) and ``traj_data.json`` (``task_type`` and ``pddl_params``). The official data comes
from ``alfworld-download`` (``$ALFWORLD_DATA/json_2.1.1/{train,valid_seen,valid_unseen}``); the
fixture is generated in the same layout by :mod:`autorl.task_code.alfworld.fixture`.

Grader side: the builders and the evaluator read it; no agent imports it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

# ALFWorld's six task types (alfworld.agents.environment.alfred_tw_env.TASK_TYPES) and the short
# names the reference's ReAct prompts use for them.
TASK_TYPES = {
    "pick_and_place_simple": "put",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "look_at_obj_in_light": "examine",
    "pick_two_obj_and_place": "puttwo",
}
SHORT_TYPES = tuple(TASK_TYPES.values())


def task_short_name(game_name: str) -> str | None:
    """The short task type of a game folder name (``pick_heat_then_…-Apple-…`` → ``heat``).

    >>> task_short_name("pick_two_obj_and_place-Pen-None-Desk-301/trial_T1")
    'puttwo'
    >>> task_short_name("pick_and_place_with_movable_recep-Pen-Mug-Desk-1/trial_1") is None
    True
    """
    head = game_name.split("-", 1)[0]
    return TASK_TYPES.get(head)


def collect_games(split_dir: Path) -> list[tuple[str, Path]]:
    """Playable games under one split folder, sorted by name, as ALFWorld's ``AlfredTWEnv`` selects
    them.

    A game needs ``traj_data.json`` of one of the six task types, a ``game.tw-pddl`` marked
    ``solvable``, and no movable-receptacle or sliced variant.

    Returns:
        ``(name, game file)`` with name = the last two path parts (``<task folder>/<trial>``).
    """
    games = []
    for root, _dirs, files in os.walk(split_dir):
        if "traj_data.json" not in files or "movable" in root or "Sliced" in root:
            continue
        folder = Path(root)
        traj = json.loads((folder / "traj_data.json").read_text(encoding="utf-8"))
        game_file = folder / "game.tw-pddl"
        if traj.get("task_type") not in TASK_TYPES or not game_file.is_file():
            continue
        if not json.loads(game_file.read_text(encoding="utf-8")).get("solvable"):
            continue
        games.append((f"{folder.parent.name}/{folder.name}", game_file))
    return sorted(games)
