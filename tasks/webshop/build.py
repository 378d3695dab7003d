"""Data builders for webshop: the sessions (goals) the agent may play and the eval sessions 0-99.

Each source's builder is named in ``task.yaml`` (``sources``).

Sources:
    fixture: a generated catalogue (``public/catalogue.jsonl``, WebShop's product fields) and one
        synthetic goal per session in WebShop's instruction style (:mod:`.fixture`); sessions
        ``0..eval_size-1`` are the eval split (``private/goals.jsonl``, ids
        ``eval/<i>``), the next ``train_size`` the training split (``public/goals.jsonl``, ids
        ``train/<i>``). Every goal text is unique, so no eval instruction appears in the public
        data.
    hub: WebShop itself holds the real data; only the session lists are written: eval =
        ``eval/0..99``, train = ``train/<first_train_session>..``. Which goals a session index names
        depends on the eval ``backend``: ``textenv`` (WebShop's text env with ``num_products=1000``
        and ``human_goals`` unset: synthetic goals shuffled with seed 233) gives the reference's
        sessions 0-99; ``server`` (WebShop's Flask app, ``fixed_<i>``) gives its *human* goals over
        the full catalogue, which are not the reference's sessions. Training sessions start at
        ``first_train_session`` so they never index an eval goal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .fixture import fixture_data
from .options import FixtureBuild, HubBuild


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True) + "\n")


def build_fixture(public: Path, private: Path, *, seed: int, options: FixtureBuild) -> None:
    """Write the generated catalogue and goals: ``options`` ``catalogue_size``, ``train_size``,
    ``eval_size``.

    Raises:
        ValueError: Not enough distinct goals for the sizes asked.
    """
    eval_size = options.eval_size
    products, goals = fixture_data(
        seed,
        catalogue_size=options.catalogue_size,
        eval_size=eval_size,
        train_size=options.train_size,
    )
    _write(Path(public) / "catalogue.jsonl", products)
    _write(
        Path(private) / "goals.jsonl",
        [{"episode_id": f"eval/{i}", **g} for i, g in enumerate(goals[:eval_size])],
    )
    _write(
        Path(public) / "goals.jsonl",
        [{"episode_id": f"train/{eval_size + i}", **g} for i, g in enumerate(goals[eval_size:])],
    )


def build_hub(public: Path, private: Path, *, seed: int, options: HubBuild) -> None:
    """Write the session lists of WebShop's env (the seed is unused: WebShop fixes its goal order);
    ``options`` ``train_size``, ``eval_size``, ``first_train_session``."""
    first = options.first_train_session
    _write(
        Path(private) / "goals.jsonl",
        [{"episode_id": f"eval/{i}"} for i in range(options.eval_size)],
    )
    _write(
        Path(public) / "goals.jsonl",
        [{"episode_id": f"train/{first + i}"} for i in range(options.train_size)],
    )
