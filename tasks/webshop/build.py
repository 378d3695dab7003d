"""Data builder for webshop: the sessions (goals) the agent may play and the eval sessions 0-99.

Sources:
    fixture: a generated catalogue (``public/catalogue.jsonl``, WebShop's product fields) and one
        synthetic goal per session in WebShop's instruction style; sessions ``0..eval_size-1``
        (default 100) are the eval split (``private/goals.jsonl``, ids ``eval/<i>``), the next
        ``train_size`` the training split (``public/goals.jsonl``, ids ``train/<i>``). Every goal
        text is unique, so no eval instruction appears in the public data.
    hub: a running WebShop server holds the real data (its goals and 1,000-product catalogue);
        only the session lists are written: eval = ``eval/0..99`` (the reference's sessions
        0-99), train = ``train/<first_train_session>..`` (WebShop's own training goals start at 1500).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True) + "\n")


DEFAULTS = {"fixture": {"catalogue_size": 240, "train_size": 300, "eval_size": 100},
            "hub": {"train_size": 1000, "eval_size": 100, "first_train_session": 1500}}


def _build_fixture(public: Path, private: Path, seed: int, options: dict[str, Any]) -> None:
    from autorl.envs.webshop_catalog import generate_catalogue, generate_goal

    rng = random.Random(seed)
    eval_size, train_size = int(options["eval_size"]), int(options["train_size"])
    products = generate_catalogue(rng, int(options["catalogue_size"]))
    goals: list[dict[str, Any]] = []
    seen: set[str] = set()
    for _ in range((eval_size + train_size) * 50):
        if len(goals) == eval_size + train_size:
            break
        goal = generate_goal(rng, rng.choice(products))
        if goal["instruction_text"] not in seen:
            seen.add(goal["instruction_text"])
            goals.append(goal)
    else:
        raise ValueError("could not generate enough distinct goals; ask for fewer or a bigger catalogue")
    _write(public / "catalogue.jsonl", products)
    _write(private / "goals.jsonl", [{"episode_id": f"eval/{i}", **g} for i, g in enumerate(goals[:eval_size])])
    _write(public / "goals.jsonl", [{"episode_id": f"train/{eval_size + i}", **g} for i, g in enumerate(goals[eval_size:])])


def _build_hub(public: Path, private: Path, options: dict[str, Any]) -> None:
    first = int(options["first_train_session"])
    _write(private / "goals.jsonl", [{"episode_id": f"eval/{i}"} for i in range(int(options["eval_size"]))])
    _write(public / "goals.jsonl", [{"episode_id": f"train/{first + i}"} for i in range(int(options["train_size"]))])


def build(source: str, public: Path, private: Path, *, seed: int, options: dict[str, Any]) -> None:
    """Write the session lists (and, for the fixture, the catalogue and goals).

    Args:
        source: ``"fixture"`` or ``"hub"``.
        public: Empty folder for what the agent may see.
        private: Empty folder for what only the grader reads.
        seed: Seed of the fixture generator.
        options: fixture: ``catalogue_size``, ``train_size``, ``eval_size``; hub: ``train_size``,
            ``eval_size`` (100), ``first_train_session`` (1500).

    Raises:
        ValueError: Unknown source.
    """
    if source not in DEFAULTS:
        raise ValueError(f"unknown source '{source}'; valid: fixture, hub")
    opts = DEFAULTS[source] | dict(options)
    if source == "fixture":
        _build_fixture(Path(public), Path(private), seed, opts)
    else:
        _build_hub(Path(public), Path(private), opts)
