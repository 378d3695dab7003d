"""The text `small`'s tokenizer trains on: what the six built-in tasks show a model, rendered.

A tokenizer trained on source code changes whenever the code is reformatted: a one-line edit of a
prompt module moves token ids and with them every task's results. So the corpus holds only what a
model is given: each fixture's public data (seed 0, default options), each task's
``description.md``, and the prompts the task's evaluator renders for its public items with the
default options (for the interactive tasks, the first prompt of training episodes, whose first
observation comes from the task's own environment). The in-context examples a prompt carries
enter once per distinct prompt head, not once per item. The private splits never enter it, nor
the recipes.

Its digest is pinned in ``tests/unit/test_small_model.py``: a change to what a prompt says fails
that test, and is made deliberately by bumping :data:`autorl.models.small.SMALL_BUILD_VERSION` and
pinning the new digest.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agent_kit.protocol import ChatMessage, StepResult
from autorl.envs.base import EnvData
from autorl.integrity.eval_index import json_strings

CORPUS_TASKS = ("alfworld", "alpacaeval", "deepsearchqa", "gsm8k", "humaneval", "webshop")
# Interactive tasks: how many training episodes' first prompts are rendered through their
# environment. Their observations share most words, so a few dozen carry the vocabulary.
EPISODES_RENDERED = 40


def jsonl_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSON-lines file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def data_texts(public_dir: Path) -> list[str]:
    """Every string of the public split's JSON-lines files, files in sorted order.

    Game files (ALFWorld's PDDL and trajectories) are not text a model is shown; their observations
    enter through the rendered prompts instead.
    """
    return [
        s
        for path in sorted(public_dir.rglob("*.jsonl"))
        for row in jsonl_rows(path)
        for s in json_strings(row)
    ]


def message_texts(messages: Iterable[ChatMessage]) -> list[str]:
    """The contents of a conversation's turns (the chat template's markers are special tokens).

    >>> message_texts([{"role": "user", "content": "hi"}])
    ['hi']
    """
    return [message["content"] for message in messages]


def _task_module(task_id: str, module: str) -> Any:
    return importlib.import_module(f"autorl.task_code.{task_id}.{module}")


def _unique(texts: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(texts))


def _first_steps(task_id: str, data: EnvData, episode_ids: list[str]) -> list[StepResult]:
    """The reset of each of the first training episodes, from the task's own environment.

    The environment gets the private folder as it does in a cell (DeepSearchQA's search corpus lives
    there), but a training episode's first observation shows only public data.
    """
    from autorl.envs.base import EnvSource, EpisodeSpec, make_env
    from autorl.task_options import eval_options
    from autorl.task_spec import get_task

    env = make_env(task_id)
    defaults = eval_options(get_task(task_id), "fixture")
    source = EnvSource(task_id=task_id, source="fixture", env_options=defaults)
    try:
        return [
            env.reset(EpisodeSpec(source=source, episode_id=episode_id), data)
            for episode_id in episode_ids[:EPISODES_RENDERED]
        ]
    finally:
        env.close()


def _gsm8k(data: EnvData) -> list[str]:
    evaluate = _task_module("gsm8k", "evaluate")
    rows = jsonl_rows(data.public_dir / "train.jsonl")
    shots = message_texts(evaluate.build_conversation(rows[0]["question"], len(evaluate.SHOTS)))
    return shots + [
        t for row in rows for t in message_texts(evaluate.build_conversation(row["question"], 0))
    ]


def _humaneval(data: EnvData) -> list[str]:
    protocol = _task_module("humaneval", "agent.protocol")
    return [
        protocol.format_prompt(row["question"])
        for row in jsonl_rows(data.public_dir / "train.jsonl")
    ]


def _alpacaeval(data: EnvData) -> list[str]:
    protocol = _task_module("alpacaeval", "agent.protocol")
    rows = jsonl_rows(data.public_dir / "train.jsonl")
    return [t for row in rows for t in message_texts(protocol.chat_prompt(row["question"]))]


def _deepsearchqa(data: EnvData) -> list[str]:
    protocol = _task_module("deepsearchqa", "agent.protocol")
    rows = jsonl_rows(data.public_dir / "questions.jsonl")
    firsts = _first_steps("deepsearchqa", data, [r["episode_id"] for r in rows])
    return [protocol.first_prompt(first.observation) for first in firsts]


def _webshop(data: EnvData) -> list[str]:
    protocol = _task_module("webshop", "agent.protocol")
    rows = jsonl_rows(data.public_dir / "goals.jsonl")
    firsts = _first_steps("webshop", data, [r["episode_id"] for r in rows])
    return _unique(
        t
        for first in firsts
        for t in message_texts(
            protocol.render_messages(
                first.observation, [], first.observation, list(first.admissible_actions), window=5
            )
        )
    )


def _alfworld(data: EnvData) -> list[str]:
    protocol = _task_module("alfworld", "agent.protocol")
    rows = jsonl_rows(data.public_dir / "episodes.jsonl")
    firsts = _first_steps("alfworld", data, [r["episode_id"] for r in rows])
    # The header and examples are the same for every episode of a task type: once per type.
    heads = _unique(protocol.HEADER + protocol.examples(row["task"]) for row in rows)
    tasks = [
        protocol.render_prompt(row["task"], first.observation, [], max_chars=None).removeprefix(
            protocol.HEADER + protocol.examples(row["task"])
        )
        for row, first in zip(rows, firsts, strict=False)
    ]
    return heads + tasks


RENDERERS: dict[str, Callable[[EnvData], list[str]]] = {
    "alfworld": _alfworld,
    "alpacaeval": _alpacaeval,
    "deepsearchqa": _deepsearchqa,
    "gsm8k": _gsm8k,
    "humaneval": _humaneval,
    "webshop": _webshop,
}


def render_corpus(cache_root: Path) -> list[str]:
    """The tokenizer's training text: per task, its public data, description and rendered prompts.

    Builds (or reuses) each fixture's data under ``cache_root/tasks``. Runs the interactive tasks'
    environments in this process: call :func:`public_corpus` from a process that has loaded torch.
    """
    from autorl.task_spec import get_task
    from autorl.tasks import build_task_data

    texts: list[str] = []
    for task_id in CORPUS_TASKS:
        spec = get_task(task_id)
        data = build_task_data(spec, "fixture", cache_root / "tasks", seed=0)
        texts += data_texts(data.public_dir)
        texts.append(spec.description_md.read_text(encoding="utf-8"))
        texts += RENDERERS[task_id](
            EnvData(public_dir=data.public_dir, private_dir=data.private_dir)
        )
    return texts


def public_corpus(cache_root: Path) -> list[str]:
    """:func:`render_corpus`, in a child process.

    ALFWorld's planner library (fast_downward, loaded by TextWorld) crashes a process that has
    torch loaded, as a sweep's driver has by the time it builds `small`, and crashes any process
    at exit.

    Raises:
        PrerequisiteError: The child failed (its stderr's tail is in the message).
    """
    from autorl.errors import PrerequisiteError

    done = subprocess.run(
        [sys.executable, "-m", __name__, str(cache_root)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise PrerequisiteError(
            f"rendering the small model's tokenizer corpus failed (exit "
            f"{done.returncode}): {done.stderr[-2000:]}"
        )
    texts: list[str] = json.loads(done.stdout)
    return texts


if __name__ == "__main__":
    json.dump(render_corpus(Path(sys.argv[1])), sys.stdout)
    sys.stdout.flush()
    # TextWorld's planner library crashes the interpreter's teardown; the output is complete here.
    os._exit(0)
