"""Scripted recipe for deepsearchqa: SFT on search-then-answer trajectories, then online RL.

The expert trajectory of a training question searches the question itself (the env's real search
tool answers) and then answers the public gold answer of ``data/questions.jsonl``; the prompts are
the evaluator's ReAct prompts (:mod:`.protocol`). RL rewards come from the judge, through the env
endpoints. Agent side: the search tool and the judge are reached only through the grading API.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path

from agent_kit.rollout import Episode
from agent_kit.scripted.common import log, remaining_s, submit
from agent_kit.scripted.interactive import InteractiveRecipe, run_recipe

from .protocol import DeepSearchProtocol


def _gold() -> dict[str, str]:
    """The public gold answer of every training question (``$DATA_PATH/questions.jsonl``), by episode id."""
    path = Path(os.environ["DATA_PATH"]) / "questions.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["episode_id"]: str(r["answer"]) for r in rows}


def make_expert() -> Callable[[Episode], str | None]:
    """Search the question first, then answer the gold answer."""
    gold = _gold()

    def expert(episode: Episode) -> str | None:
        if episode.steps == 0:
            question = episode.first.observation.split("\n", 1)[0].removeprefix("Question: ")
            return f" I should search for this.\nAction: search[{question}]\nObservation:"
        return f" I found the answer.\nAction: answer[{gold[episode.episode_id]}]\nObservation:"

    return expert


def make_recipe() -> InteractiveRecipe:
    """The recipe's protocol, expert and limits (``bench/online_rl_curve.py`` measures its RL with them too)."""
    return InteractiveRecipe(DeepSearchProtocol(max_new_tokens=48), make_expert(), max_steps=4, max_length=1024,
                             expert_episodes=100)


def run(args: argparse.Namespace) -> int:
    """SFT → submit v1 → RL → submit v2."""
    return run_recipe(args, make_recipe(), log, submit, remaining_s)
