"""The alfworld fixture generator: ALFWorld games written as PDDL problems, in the
alfworld-download layout.

The games are PDDL problems for the domain and grammar bundled in the ``alfworld`` wheel, from the
goal definitions of ``alfworld.gen.goal_library``; each is winnable by construction. The layout and
task types are those of :mod:`autorl.task_code.alfworld.games`.

Grader side: deterministic in its random generator, so it can rebuild the private split; no agent
imports it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .games import SHORT_TYPES, TASK_TYPES


@dataclass(frozen=True)
class _Recep:
    kind: str
    openable: bool


_RECEPS = {
    r.kind: r
    for r in (
        _Recep("CounterTop", False),
        _Recep("Cabinet", True),
        _Recep("Drawer", True),
        _Recep("Fridge", True),
        _Recep("Microwave", True),
        _Recep("SinkBasin", False),
        _Recep("StoveBurner", False),
        _Recep("DiningTable", False),
        _Recep("Shelf", False),
        _Recep("Desk", False),
        _Recep("SideTable", False),
        _Recep("GarbageCan", False),
        _Recep("Dresser", False),
    )
}
_FOOD = ("CounterTop", "DiningTable", "Fridge", "Cabinet")
_DISH = ("CounterTop", "Cabinet", "Shelf", "DiningTable", "SinkBasin")
_SMALL = ("Desk", "SideTable", "Shelf", "Drawer", "Dresser")
# object type -> (properties, receptacle types it may start in or be put in)
_OBJECTS: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {
    "Apple": (frozenset({"heatable", "coolable", "cleanable"}), _FOOD + ("GarbageCan",)),
    "Tomato": (frozenset({"heatable", "coolable", "cleanable"}), _FOOD),
    "Potato": (frozenset({"heatable", "coolable", "cleanable"}), _FOOD + ("GarbageCan",)),
    "Egg": (frozenset({"heatable", "coolable"}), _FOOD),
    "Lettuce": (frozenset({"coolable", "cleanable"}), _FOOD),
    "Bread": (frozenset({"heatable", "coolable"}), _FOOD),
    "Mug": (frozenset({"heatable", "coolable", "cleanable"}), _DISH + ("Desk",)),
    "Cup": (frozenset({"heatable", "coolable", "cleanable"}), _DISH),
    "Plate": (frozenset({"heatable", "coolable", "cleanable"}), _DISH),
    "Bowl": (frozenset({"heatable", "coolable", "cleanable"}), _DISH + ("Fridge",)),
    "Pan": (frozenset({"cleanable"}), ("StoveBurner", "CounterTop", "Cabinet", "DiningTable")),
    "Knife": (frozenset({"cleanable"}), ("Drawer", "CounterTop", "DiningTable")),
    "Spoon": (frozenset({"cleanable"}), ("Drawer", "CounterTop", "DiningTable")),
    "Fork": (frozenset({"cleanable"}), ("Drawer", "CounterTop", "DiningTable")),
    "Pen": (frozenset(), _SMALL),
    "Pencil": (frozenset(), _SMALL),
    "Book": (frozenset(), _SMALL + ("Dresser",)),
    "CellPhone": (frozenset(), _SMALL),
    "KeyChain": (frozenset(), _SMALL),
    "CreditCard": (frozenset(), _SMALL),
    "AlarmClock": (frozenset(), _SMALL),
    "CD": (frozenset(), _SMALL),
    "Watch": (frozenset(), _SMALL),
    "Vase": (frozenset(), ("Shelf", "SideTable", "Desk", "Dresser")),
}
_LAMP_RECEPS = ("Desk", "SideTable", "Dresser")
_TYPE_NEEDS = {"clean": "SinkBasin", "heat": "Microwave", "cool": "Fridge"}
_TYPE_PROP = {"clean": "cleanable", "heat": "heatable", "cool": "coolable"}
_LONG_TYPE = {short: long for long, short in TASK_TYPES.items()}
_SINGLE = (
    "Fridge",
    "Microwave",
    "SinkBasin",
    "GarbageCan",
    "DiningTable",
    "Desk",
)  # one of each in a room


@dataclass(frozen=True)
class RoomSize:
    """How much a generated room holds beyond what its task needs (build options, ``options.py``).

    Attributes:
        extra_receptacle_kinds: Receptacle types added at random (each 1 to ``max_copies`` copies).
        max_copies: Most copies of a receptacle type other than the single ones (fridge, microwave,
            ...).
        distractor_objects: Objects of other types placed at random.
    """

    extra_receptacle_kinds: int
    max_copies: int
    distractor_objects: int


def _mangle(kind: str, index: int) -> str:
    """An ALFRED-style object id; the Demangler turns it into ``<kind lowercase> <n>``."""
    coords = f"_bar__plus_0{index % 10}_dot_{(index * 37) % 100:02d}_bar__plus_00_dot_90_bar__minus_0{index // 10}_dot_50"  # noqa: E501
    if kind == "SinkBasin":
        return f"Sink{coords}_bar_SinkBasin"
    return f"{kind}{coords}"


def _pick_target(rng: random.Random, short: str) -> tuple[str, str, str]:
    """(object type, target receptacle type, toggle type) for one task."""
    if short == "examine":
        obj = rng.choice([k for k, (props, _) in _OBJECTS.items() if not props and k != "Vase"])
        return obj, "None", "DeskLamp"
    candidates = [
        k
        for k, (props, _) in _OBJECTS.items()
        if short not in _TYPE_PROP or _TYPE_PROP[short] in props
    ]
    obj = rng.choice(candidates)
    targets = [
        r
        for r in _OBJECTS[obj][1]
        if r not in ("SinkBasin", "Microwave") and (short != "cool" or r != "Fridge")
    ]
    return obj, rng.choice(targets), "None"


def generate_game(
    rng: random.Random,
    short: str,
    goal_templates: dict[str, Any],
    domain: str,
    grammar: str,
    size: RoomSize,
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """One solvable-by-construction ALFWorld game of task type ``short`` in a room of ``size``.

    Returns:
        (folder name without scene suffix, ``game.tw-pddl`` content, ``traj_data.json`` content).
    """
    obj, target, toggle = _pick_target(rng, short)
    kinds = {"CounterTop"} | ({target} if target != "None" else set())
    if short in _TYPE_NEEDS:
        kinds.add(_TYPE_NEEDS[short])
    if short == "examine":
        kinds.add(rng.choice(_LAMP_RECEPS))
    start_options = [r for r in _OBJECTS[obj][1] if r != target and r not in ("SinkBasin",)]
    kinds.add(rng.choice(start_options))
    kinds |= set(rng.sample(sorted(_RECEPS), size.extra_receptacle_kinds))
    receps: list[tuple[str, str]] = []  # (id, kind)
    counter = 0
    for kind in sorted(kinds):
        # One-copy rooms draw nothing here, so their games do not depend on this draw.
        copies = 1 if kind in _SINGLE or size.max_copies == 1 else rng.randint(1, size.max_copies)
        for _ in range(copies):
            counter += 1
            receps.append((_mangle(kind, counter), kind))
    placed: list[tuple[str, str, str]] = []  # (object id, kind, receptacle id)

    def place(kind: str, allowed: tuple[str, ...]) -> None:
        nonlocal counter
        options = [rid for rid, rk in receps if rk in allowed]
        if options:
            counter += 1
            placed.append((_mangle(kind, counter), kind, rng.choice(options)))

    needed = 2 if short == "puttwo" else 1
    for _ in range(needed):
        place(obj, tuple(start_options))
    if short == "examine":
        place("DeskLamp", _LAMP_RECEPS)
    for kind in rng.sample(sorted(_OBJECTS), size.distractor_objects):
        if kind != obj:
            place(kind, tuple(r for r in _OBJECTS[kind][1] if r != target))
    if sum(1 for _, k, _ in placed if k == obj) < needed:
        raise ValueError(
            "could not place the task's objects"
        )  # unreachable: start_options is never empty

    otypes = sorted({k for _, k, _ in placed})
    rtypes = sorted({k for _, k in receps})
    locs = {rid: f"loc_{i}" for i, (rid, _) in enumerate(receps, start=1)}
    init = ["(atLocation agent1 loc_start)"]
    for rid, kind in receps:
        init += [f"(receptacleAtLocation {rid} {locs[rid]})", f"(receptacleType {rid} {kind}Type)"]
        if _RECEPS[kind].openable:
            init.append(f"(openable {rid})")
    for oid, kind, rid in placed:
        init += [
            f"(objectAtLocation {oid} {locs[rid]})",
            f"(inReceptacle {oid} {rid})",
            f"(objectType {oid} {kind}Type)",
        ]
        if kind == "DeskLamp":
            init.append(f"(toggleable {oid})")
            continue
        init.append(f"(pickupable {oid})")
        init += [f"({prop} {oid})" for prop in sorted(_OBJECTS[kind][0])]
    for kind in otypes:
        allowed = set(_OBJECTS.get(kind, ((), ()))[1]) | (
            {target} if kind == obj and target != "None" else set()
        )
        init += [f"(canContain {rt}Type {kind}Type)" for rt in rtypes if rt in allowed]
    objects = [
        "agent1 - agent",
        " ".join(["loc_start", *locs.values()]) + " - location",
        " ".join(oid for oid, _, _ in placed) + " - object",
        " ".join(rid for rid, _ in receps) + " - receptacle",
        " ".join(f"{k}Type" for k in otypes) + " - otype",
        " ".join(f"{k}Type" for k in rtypes) + " - rtype",
    ]
    long_type = _LONG_TYPE[short]
    goal = (
        goal_templates[long_type]["pddl"]
        .replace("#", "-")
        .format(obj=obj, recep=target, toggle=toggle, mrecep="None")
    )
    problem = (
        "(define (problem plan_trial)\n (:domain alfred)\n (:objects\n   "
        + "\n   ".join(objects)
        + "\n )\n"
        " (:init\n   " + "\n   ".join(init + ["(= (total-cost) 0)"]) + "\n )\n" + goal
    )
    params = {
        "object_target": obj,
        "parent_target": "" if target == "None" else target,
        "toggle_target": "" if toggle == "None" else toggle,
        "mrecep_target": "",
        "object_sliced": False,
    }
    template = rng.choice(goal_templates[long_type]["templates"])
    desc = template.format(obj=obj.lower(), recep=target.lower(), toggle=toggle.lower(), mrecep="")
    game = {
        "pddl_domain": domain,
        "grammar": grammar.replace("UNKNOWN GOAL", desc),
        "pddl_problem": problem,
        "solvable": True,
    }
    traj = {"task_type": long_type, "pddl_params": params, "generated_by": "autorl fixture"}
    return f"{long_type}-{obj}-None-{target}", game, traj


def write_fixture_split(
    root: Path, split: str, count: int, rng: random.Random, first_scene: int, size: RoomSize
) -> list[tuple[str, Path]]:
    """Write ``count`` generated games (task types in turn, rooms of ``size``) under
    ``root/<split>/``;
    returns (name, file)."""
    from alfworld.gen import goal_library
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

    domain = Path(ALFRED_PDDL_PATH).read_text(encoding="utf-8")
    grammar = Path(ALFRED_TWL2_PATH).read_text(encoding="utf-8")
    games = []
    for index in range(count):
        short = SHORT_TYPES[index % len(SHORT_TYPES)]
        stem, game, traj = generate_game(rng, short, goal_library.gdict, domain, grammar, size)
        folder = root / split / f"{stem}-{first_scene + index}" / "trial_00001"
        folder.mkdir(parents=True)
        (folder / "game.tw-pddl").write_text(json.dumps(game), encoding="utf-8")
        (folder / "traj_data.json").write_text(
            json.dumps(traj, indent=1, sort_keys=True), encoding="utf-8"
        )
        games.append((f"{folder.parent.name}/{folder.name}", folder / "game.tw-pddl"))
    return games
