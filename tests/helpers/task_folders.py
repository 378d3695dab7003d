"""The task folders under tasks/, and what the task tests make of them: a build's rows and files,
a minimal task folder of one's own, an engine that answers nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autorl.tasks import discover_tasks

TASKS = discover_tasks()
SMALL = {"train_size": 300, "eval_size": 40}


def rows(folder: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in sorted(folder.rglob("*.jsonl")):
        rows += [
            json.loads(line)
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
    return rows


def files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def write_task(folder: Path, options: str = "", *, manifest: str = "", build: str = "") -> Path:
    """A minimal static task folder: ``task.yaml`` (with ``manifest`` appended), ``options.py``
    (dataclasses ``Build``, with ``options`` as its field, and ``Eval``) and ``build.py``."""
    folder.mkdir(parents=True)
    (folder / "task.yaml").write_text(
        f"id: {folder.name}\nname: T\nversion: 1\nlevel: L1\nkind: static\ndescription: A toy.\n"
        "sources: {fixture: 'build:build'}\nrun: {source: fixture, budget_s: 60}\n"
        "entry_points: {evaluate: 'evaluate:evaluate', options: 'options:OPTIONS'}\n" + manifest
    )
    (folder / "options.py").write_text(
        "from dataclasses import dataclass\nfrom autorl.task_options import TaskOptions, option\n\n"
        f"@dataclass\nclass Build:\n    {options or 'pass'}\n\n@dataclass\nclass Eval:\n    "
        "pass\n\n"
        "OPTIONS = TaskOptions(build={'fixture': Build}, eval={'fixture': Eval})\n"
    )
    (folder / "build.py").write_text(
        build or "def build(public, private, *, seed, options):\n    pass\n"
    )
    return folder


class GarbageEngine:
    """Returns text with no answer in it."""

    def generate_chat(
        self,
        conversations: list[list[dict[str, str]]],
        *,
        max_new_tokens: int,
        stop: list[str] | None = None,
    ) -> list[str]:
        return ["no idea, sorry" for _ in conversations]

    def generate_text(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str] | None = None
    ) -> list[str]:
        return ["no idea, sorry" for _ in prompts]
