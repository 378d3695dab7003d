"""DeepSearchQA as an environment (grader side): a question, a search tool, and an answer.

Questions are listed in ``questions.jsonl`` (``{"episode_id", "problem", "answer", "answer_type"}``;
``public/`` for ``train/…``, ``private/`` for ``eval/…``). Actions are ``search[query]`` (the
observation is the search result, from the configured backend:
:mod:`autorl.task_code.deepsearchqa.search`) and ``answer[text]`` (ends the episode). Training
episodes are judged on the spot (reward 1 when the judge says correct); evaluation episodes are
judged by the grader, after all of them are played.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from autorl.envs.base import EnvData, EnvError, EpisodeSpec, StepResult, split_of
from autorl.tasks import plain, typed_options

from .options import Eval
from .search import SearchBackend, make_search

INVALID = "Invalid action. Use search[query] to search or answer[your answer] to answer."
_ACTION = re.compile(r"^\s*(search|answer)\[(.*)\]\s*$", re.DOTALL)


def load_questions(folder: Path) -> dict[str, dict[str, Any]]:
    """``questions.jsonl`` of one data folder, by episode id."""
    path = Path(folder) / "questions.jsonl"
    if not path.is_file():
        raise EnvError(f"no DeepSearchQA questions at {path}; build the task data first")
    rows = [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    return {row["episode_id"]: row for row in rows}


def question_text(row: dict[str, Any]) -> str:
    """The first observation of a question.

    >>> question_text({"problem": "Who?", "answer_type": "Single Answer"})
    'Question: Who?\\nAnswer type: Single Answer'
    """
    return f"Question: {row['problem']}\nAnswer type: {row.get('answer_type') or 'Single Answer'}"


class DeepSearchEnv:
    """One question at a time (implements :class:`autorl.envs.base.Env`)."""

    def __init__(self) -> None:
        """Nothing loaded yet."""
        self._questions: dict[Path, dict[str, dict[str, Any]]] = {}
        self._search: dict[str, SearchBackend] = {}
        self.row: dict[str, Any] | None = None
        self.train = False
        self.options: Eval | None = None
        self.done = False

    def reset(self, episode: EpisodeSpec, data: EnvData) -> StepResult:
        """Pose the episode's question.

        ``episode.source.env_options`` are the task's complete eval options (``search``; the judge
        options for training episodes' rewards).
        """
        self.train = split_of(episode.episode_id) == "train"
        folder = data.public_dir if self.train else data.private_dir
        if folder not in self._questions:
            self._questions[folder] = load_questions(folder)
        row = self._questions[folder].get(episode.episode_id)
        if row is None:
            raise EnvError(f"no DeepSearchQA question {episode.episode_id!r} in this task's data")
        self.options = typed_options(
            Eval,
            episode.source.env_options,
            what="deepsearchqa eval",
            complete=True,
            error=EnvError,
        )
        search_options = dict(self.options.search)
        key = json.dumps(search_options, sort_keys=True) + str(data.private_dir)
        if key not in self._search:
            self._search[key] = make_search(search_options, data.private_dir)
        self.search_backend = self._search[key]
        self.row, self.done = row, False
        return StepResult(
            question_text(row),
            0.0,
            False,
            ["search[<query>]", "answer[<your answer>]"],
            {"answer_type": row.get("answer_type") or "Single Answer"},
        )

    def step(self, action: str) -> StepResult:
        """``search[q]`` returns results; ``answer[x]`` ends the episode; anything else is
        invalid."""
        if self.row is None:
            raise EnvError("step() before reset(): start an episode first")
        if self.done:
            raise EnvError("the episode is over; reset to play another")
        match = _ACTION.match(action or "")
        actions = ["search[<query>]", "answer[<your answer>]"]
        if match is None:
            return StepResult(INVALID, 0.0, False, actions, {})
        verb, arg = match.group(1), match.group(2).strip()
        if verb == "search":
            return StepResult(
                self.search_backend.search(arg) if arg else INVALID, 0.0, False, actions, {}
            )
        self.done = True
        info: dict[str, Any] = {"answer": arg}
        reward = 0.0
        if self.train:
            reward = float(self._judge(arg))
            info["correct"] = bool(reward)
        return StepResult(f"Your answer: {arg}", reward, True, [], info)

    def _judge(self, prediction: str) -> bool:
        from .judge import judge_answers, open_judge

        assert self.row is not None and self.options is not None
        with open_judge(plain(self.options), None) as client:
            return judge_answers(
                client,
                [
                    (
                        self.row.get("answer_type") or "Single Answer",
                        str(self.row["answer"]),
                        prediction,
                    )
                ],
            )[0]

    def close(self) -> None:
        """Forget the question."""
        self.row = None
