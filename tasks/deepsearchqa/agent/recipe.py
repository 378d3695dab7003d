"""Scripted recipe for deepsearchqa: SFT on search-then-answer trajectories, then online RL.

The expert trajectory of a training question searches the question itself (the env's real search
tool answers) and then answers the public gold answer of ``data/questions.jsonl`` inside the phrase
of the search result that states it (:func:`quoted_answer`); the prompts are the evaluator's ReAct
prompts (:mod:`.protocol`). RL rewards come from the judge, through the env endpoints. Agent side:
the search tool and the judge are reached only through the grading API.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from agent_kit.rollout import Episode
from agent_kit.scripted.common import log, remaining_s, submit
from agent_kit.scripted.interactive import InteractiveRecipe, run_recipe
from agent_kit.scripted.settings import ScriptedSettings

from .protocol import DeepSearchProtocol


def _gold() -> dict[str, str]:
    """The public gold answer of every training question (``$DATA_PATH/questions.jsonl``), by
    episode id."""
    path = Path(os.environ["DATA_PATH"]) / "questions.jsonl"
    rows = [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    return {r["episode_id"]: str(r["answer"]) for r in rows}


#: The phrase of the fixture's town documents that states each kind of answer, by how its question
#: opens. The expert answers with it ("rich from the cheese trade"): the words before the answer are
#: the ones before it in the search result, so writing the answer is copying what follows them
#: there.
_PHRASES = {
    "In what year": "founded in {}",
    "Who founded": "by {}",
    "Which trade": "rich from the {} trade",
    "Which rivers": "The rivers {}",
}


def quoted_answer(question: str, gold: str) -> str:
    """The answer the expert writes: the gold inside the phrase that states it (rivers as the
    documents list them).

    >>> quoted_answer("Which trade made the town of Sel-tor rich?", "cheese")
    'rich from the cheese trade'
    >>> quoted_answer("Which rivers run through the town of Sel-tor?", "Pen-ull, Sel-kav, Ull-rim")
    'The rivers Pen-ull, Sel-kav and Ull-rim'
    >>> quoted_answer("What is the capital of France?", "Paris")
    'Paris'
    """
    opening = next((o for o in _PHRASES if question.startswith(o)), None)
    if opening == "Which rivers":
        *rest, last = gold.split(", ")
        gold = f"{', '.join(rest)} and {last}" if rest else last
    return _PHRASES.get(opening or "", "{}").format(gold)


def make_expert() -> Callable[[Episode], str | None]:
    """Search the question first, then answer the gold answer in the phrase that states it."""
    gold = _gold()

    def expert(episode: Episode) -> str | None:
        question = episode.first.observation.split("\n", 1)[0].removeprefix("Question: ")
        if episode.steps == 0:
            return f" I should search for this.\nAction: search[{question}]\nObservation:"
        answer = quoted_answer(question, gold[episode.episode_id])
        return f" I found the answer.\nAction: answer[{answer}]\nObservation:"

    return expert


def make_recipe() -> InteractiveRecipe:
    """The recipe's protocol, expert and limits (``bench/online_rl_curve.py`` measures its RL with
    them too)."""
    return InteractiveRecipe(
        DeepSearchProtocol(max_new_tokens=48),
        make_expert(),
        max_steps=4,
        max_length=1024,
        expert_episodes=400,
    )


def run(settings: ScriptedSettings) -> int:
    """SFT → submit v1 → RL → submit v2.

    SFT steps of half the actions (8 packed questions by default, about 0.9 s a step on one
    thread), four times as many (budget-bound): copying a name or an answer from the prompt is
    learned by step count.
    """
    knobs = settings.with_sft(
        per_device_train_batch_size=max(2, settings.sft.per_device_train_batch_size // 2),
        max_steps=4 * settings.sft.max_steps,
    )
    return run_recipe(knobs, make_recipe(), log, submit, remaining_s)
