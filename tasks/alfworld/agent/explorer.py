"""A searching expert for ALFWorld that sees only what the agent sees.

The PDDL planner behind ``info["expert_action"]`` knows where every object is and walks straight to
it, so a policy that imitates it learns to guess, and after a wrong guess it meets states its
teacher never showed (loops until the step limit). This expert decides every move from the episode's
text alone (the goal, the receptacles listed in the first observation, the steps so far and the
admissible commands): it searches the receptacles in the order the room lists them, opens closed
ones, takes the goal's object when it sees it, cleans, heats or cools it where the goal says so, and
puts it in the first receptacle of the goal's type (or turns on the desk lamp). A policy can learn
each of those moves from its prompt.

Agent side: used by the scripted recipe (``recipe.py``); no grader-side import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agent_kit.rollout import Episode

# The goal sentences of ALFWorld's six task types (alfworld.gen.goal_library), most specific first.
_GOALS = (
    (r"put a clean (?P<obj>.+) in (?P<recep>.+)", "clean"),
    (r"clean some (?P<obj>.+) and put it in (?P<recep>.+)", "clean"),
    (r"put a hot (?P<obj>.+) in (?P<recep>.+)", "heat"),
    (r"heat some (?P<obj>.+) and put it in (?P<recep>.+)", "heat"),
    (r"put a cool (?P<obj>.+) in (?P<recep>.+)", "cool"),
    (r"cool some (?P<obj>.+) and put it in (?P<recep>.+)", "cool"),
    (r"look at (?P<obj>.+) under the (?P<recep>.+)", "examine"),
    (r"examine the (?P<obj>.+) with the (?P<recep>.+)", "examine"),
    (r"put two (?P<obj>.+) in (?P<recep>.+)", "puttwo"),
    (r"find two (?P<obj>.+) and put them in (?P<recep>.+)", "puttwo"),
    (r"put a (?P<obj>.+) in (?P<recep>.+)", "put"),
    (r"put some (?P<obj>.+) on (?P<recep>.+)", "put"),
)
# Where each transformation happens (the command's verb is the goal's kind: "clean apple 1 with
# sinkbasin 1").
_APPLIANCES = {"clean": "sinkbasin", "heat": "microwave", "cool": "fridge"}


@dataclass(frozen=True)
class Goal:
    """What an episode asks: the object type, the target receptacle type (the lamp for
    ``examine``), the kind."""

    obj: str
    recep: str
    kind: str


def parse_goal(first_observation: str) -> Goal | None:
    """The goal of a reset observation (``None``: not one of the six task types).

    >>> parse_goal("You see a desk 1.\\nYour task is to: put a clean apple in countertop.")
    Goal(obj='apple', recep='countertop', kind='clean')
    >>> parse_goal("Your task is to: examine the pen with the desklamp.")
    Goal(obj='pen', recep='desklamp', kind='examine')
    """
    match = re.search(r"Your task is to: (.+?)\.?\s*$", first_observation.strip(), re.MULTILINE)
    if not match:
        return None
    for pattern, kind in _GOALS:
        goal = re.fullmatch(pattern, match.group(1).strip())
        if goal:
            return Goal(goal["obj"], goal["recep"], kind)
    return None


def receptacles(first_observation: str) -> list[str]:
    """The receptacles a reset observation lists, in its order.

    >>> receptacles("Looking quickly around you, you see a cabinet 2, a desk 1, and a sinkbasin 1."
    ...             "\\nYour task is to: x.")
    ['cabinet 2', 'desk 1', 'sinkbasin 1']
    """
    match = re.search(r"you see (.+?)\.\n", first_observation + "\n")
    if not match:
        return []
    return [
        re.sub(r"^(and )?an? ", "", part.strip())
        for part in match.group(1).split(",")
        if part.strip()
    ]


@dataclass
class _Progress:
    """What the steps so far did (recomputed from the history at every move)."""

    at: str | None = None
    visited: list[str] = field(default_factory=list)
    holding: str | None = None
    transformed: bool = False
    placed: list[str] = field(default_factory=list)
    lamp_at: str | None = None
    seen: dict[str, str] = field(
        default_factory=dict
    )  # an instance of the goal's object -> where it was seen


def _progress(goal: Goal, history: list[tuple[str, str]]) -> _Progress:
    state = _Progress()
    for action, observation in history:
        if action.startswith("go to ") and observation.startswith("You arrive at"):
            state.at = action.removeprefix("go to ")
            state.visited.append(state.at)
        elif action.startswith("take ") and observation.startswith("You pick up"):
            state.holding, state.transformed = (
                action.removeprefix("take ").split(" from ")[0],
                False,
            )
        elif action.startswith(("clean ", "heat ", "cool ")) and observation.startswith("You "):
            state.transformed = True
        elif action.startswith("move ") and observation.startswith("You move") and state.holding:
            state.placed.append(state.holding)
            state.holding = None
        if state.at and action.startswith(("go to ", "open ")):
            for instance in re.findall(rf"\b{re.escape(goal.obj)} \d+", observation):
                state.seen.setdefault(instance, state.at)
            if goal.kind == "examine" and re.search(rf"\b{re.escape(goal.recep)} \d+", observation):
                state.lamp_at = state.lamp_at or state.at
    return state


def _kind(name: str) -> str:
    """The type of a numbered receptacle or object (``"drawer 2"`` → ``"drawer"``)."""
    return name.rsplit(" ", 1)[0]


def _first_of_type(kind: str, rooms: list[str]) -> str | None:
    return next((r for r in rooms if _kind(r) == kind), None)


def next_action(episode: Episode) -> str | None:
    """The expert's next command (``None``: it has nothing left to try)."""
    goal = parse_goal(episode.first.observation)
    rooms = receptacles(episode.first.observation)
    if goal is None or not rooms:
        return None
    state = _progress(goal, episode.history)
    admissible = set(episode.current.admissible_actions)

    def go_or(command: str, where: str | None) -> str | None:
        if command in admissible:
            return command
        if where is None:
            return None
        if state.at == where and f"open {where}" in admissible:
            return f"open {where}"
        return f"go to {where}" if state.at != where else None

    if state.holding:
        if goal.kind in _APPLIANCES and not state.transformed:
            appliance = _first_of_type(_APPLIANCES[goal.kind], rooms)
            return go_or(f"{goal.kind} {state.holding} with {appliance}", appliance)
        if goal.kind == "examine":
            lamps = sorted(a for a in admissible if a.startswith(f"use {goal.recep} "))
            if lamps:
                return lamps[0]
            if state.lamp_at:
                return f"go to {state.lamp_at}" if state.at != state.lamp_at else None
            return _search(rooms, state, goal, admissible)
        target = _first_of_type(goal.recep, rooms)
        return go_or(f"move {state.holding} to {target}", target)
    takes = sorted(
        a
        for a in admissible
        if re.fullmatch(rf"take {re.escape(goal.obj)} \d+ from .+", a)
        and a.removeprefix("take ").split(" from ")[0] not in state.placed
        and _kind(a.split(" from ")[1]) != goal.recep
    )
    if takes:
        return takes[0]
    # An instance seen earlier (the second of ``puttwo`` may lie where the first did).
    for instance, room in state.seen.items():
        if instance not in state.placed and room != state.at and _kind(room) != goal.recep:
            return f"go to {room}"
    return _search(rooms, state, goal, admissible)


def _search(rooms: list[str], state: _Progress, goal: Goal, admissible: set[str]) -> str | None:
    """Open the receptacle here if it is closed, else go to the next one not yet visited."""
    if state.at and f"open {state.at}" in admissible:
        return f"open {state.at}"
    for room in rooms:
        if room not in state.visited and _kind(room) != goal.recep:
            return f"go to {room}"
    return None
