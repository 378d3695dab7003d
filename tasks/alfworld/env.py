"""ALFWorld text household games on ALFWorld's own TextWorld engine (``alfworld`` + ``textworld``).

Episodes are listed in ``episodes.jsonl`` of the task data (``public/`` for ``train/…`` ids,
``private/`` for ``eval/…`` ids) as ``{"episode_id", "game", "task"}`` rows, ``game`` being a
``game.tw-pddl`` path (relative to that folder, or absolute into the alfworld-download cache).
Observations follow the reference's ReAct port of ALFWorld: the reset text without its welcome
banner, ``"You arrive at loc …"`` prefixes dropped, ``think: …`` actions answered ``"OK."``; the
reward is 1 once the game is won. Training episodes also carry the planner's next action
(``info["expert_action"]``, fast-downward through TextWorld's ``policy_commands``).

Grader side: the manifest's ``env`` entry point (``env:AlfworldEnv``), hosted in the EnvPool; no
agent imports it (agents play through the grading API's env endpoints).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autorl.envs.base import EnvData, EnvError, EpisodeSpec, StepResult, split_of
from autorl.tasks import typed_options

from . import tw_speedups
from .options import Eval


def load_episodes(folder: Path) -> dict[str, dict[str, Any]]:
    """``episodes.jsonl`` of one data folder, by episode id."""
    path = Path(folder) / "episodes.jsonl"
    if not path.is_file():
        raise EnvError(f"no episode list at {path}; build the task data first")
    rows = [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    return {row["episode_id"]: row for row in rows}


def clean_reset_text(text: str) -> str:
    """The reset observation as the reference builds it: the welcome banner (first paragraph)
    dropped and the other paragraphs joined by one newline (``"\\n".join(ob.split("\\n\\n")[1:])``
    in its ``eval.py``).

    >>> clean_reset_text("-= Welcome to TextWorld, ALFRED! =-\\n\\nYou are in a room."
    ...                  "\\n\\nYour task is to: x.")
    'You are in a room.\\nYour task is to: x.'
    """
    return "\n".join(text.split("\n\n")[1:])


def clean_step_text(text: str) -> str:
    """A step observation as the reference shows it (an old-format ``You arrive at loc N.`` prefix
    dropped).

    >>> clean_step_text("You arrive at loc 5. On the desk 1, you see a pen 1.")
    'On the desk 1, you see a pen 1.'
    >>> clean_step_text("You arrive at desk 1. On the desk 1, you see nothing.")
    'You arrive at desk 1. On the desk 1, you see nothing.'
    """
    text = text.strip()
    if text.startswith("You arrive at loc "):
        text = text[text.find(". ") + 2 :]
    return text


class AlfworldEnv:
    """One ALFWorld game at a time (implements :class:`autorl.envs.base.Env`)."""

    def __init__(self) -> None:
        """No game loaded yet."""
        self._game: Any = None
        self._episodes: dict[Path, dict[str, dict[str, Any]]] = {}
        self._state: dict[str, Any] = {}

    def _row(self, episode: EpisodeSpec, data: EnvData) -> tuple[dict[str, Any], Path]:
        folder = data.public_dir if split_of(episode.episode_id) == "train" else data.private_dir
        if folder not in self._episodes:
            self._episodes[folder] = load_episodes(folder)
        row = self._episodes[folder].get(episode.episode_id)
        if row is None:
            raise EnvError(f"no ALFWorld episode {episode.episode_id!r} in this task's data")
        return row, folder

    def reset(self, episode: EpisodeSpec, data: EnvData) -> StepResult:
        """Load the episode's game and return its first observation.

        ``episode.source.env_options`` are the task's complete eval options (``max_steps`` ends the
        game).
        """
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

        options = typed_options(
            Eval, episode.source.env_options, what="alfworld eval", complete=True, error=EnvError
        )
        tw_speedups.install()
        row, folder = self._row(episode, data)
        game_file = Path(row["game"]) if Path(row["game"]).is_absolute() else folder / row["game"]
        if not game_file.is_file():
            raise EnvError(
                f"ALFWorld game file {game_file} is missing (episode {episode.episode_id})"
            )
        self.close()
        expert = split_of(episode.episode_id) == "train"
        infos = textworld.EnvInfos(
            won=True, admissible_commands=True, policy_commands=expert, extras=["gamefile"]
        )
        with tw_speedups.translate_once():  # the load and the reset translate the same PDDL problem
            self._game = textworld.start(
                str(game_file),
                request_infos=infos,
                wrappers=[AlfredDemangler(shuffle=False), AlfredInfos],
            )
            state = self._game.reset()
        self._state = {
            "steps": 0,
            "won": False,
            "expert": expert,
            "task": row["task"],
            "max_steps": options.max_steps,
        }
        return self._result(clean_reset_text(state["feedback"]), state, done=False)

    def step(self, action: str) -> StepResult:
        """Apply one command (``think: …`` is answered ``OK.`` without touching the game)."""
        if self._game is None:
            raise EnvError("step() before reset(): start an episode first")
        if self._state.get("done"):
            raise EnvError("the episode is over; reset to play another")
        action = action.strip()
        self._state["steps"] += 1
        if action.startswith("think:"):
            state = self._state["last"]
            observation = "OK."
        else:
            state, _score, _done = self._game.step(action)
            observation = clean_step_text(state["feedback"])
            self._state["won"] = bool(state["won"])
        done = self._state["won"] or self._state["steps"] >= self._state["max_steps"]
        return self._result(observation, state, done=done)

    def _result(self, observation: str, state: Any, *, done: bool) -> StepResult:
        self._state["last"] = state
        self._state["done"] = done
        info: dict[str, Any] = {
            "won": self._state["won"],
            "task_type": self._state["task"],
            "steps": self._state["steps"],
        }
        if self._state["expert"] and not done:
            plan = list(state.get("policy_commands") or [])
            info["expert_action"] = plan[0] if plan else None
        return StepResult(
            observation,
            1.0 if self._state["won"] else 0.0,
            done,
            list(state.get("admissible_commands") or []),
            info,
        )

    def close(self) -> None:
        """Close the running game, if any, and unload its copy of the planner's library
        (:func:`unload_planner`)."""
        if self._game is not None:
            planner = getattr(
                self._game, "downward_lib", None
            )  # TextWorld's wrappers pass attributes through
            self._game.close()
            self._game = None
            if planner is not None:
                unload_planner(planner)


def unload_planner(library: Any) -> None:
    """Unload a game's private copy of fast-downward's library (a ``ctypes.CDLL``).

    TextWorld's PDDL env loads its own copy of ``libdownward.so`` (34 MB) for every game, from a
    temporary folder that it deletes at once, and never unloads it: the deleted copy stays mapped,
    and its disk space taken, until the process exits. An EnvPool actor plays thousands of games,
    so without this a sweep of a few full ALFWorld cells fills the disk ("No space left on device").
    The library is private to its game, so nothing calls it after the game is closed.
    """
    import _ctypes

    _ctypes.dlclose(library._handle)
