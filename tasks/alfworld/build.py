"""Data builder for alfworld: training games for the agent, the eval games for the grader.

Both sources write ``episodes.jsonl`` rows ``{"episode_id", "game", "task"}`` (``task`` is the
short task type: put, clean, heat, cool, examine, puttwo) into ``public/`` (``train/<game>`` ids,
with the game files copied next to it) and ``private/`` (``eval/<game>`` ids).

Sources:
    hub: the official ALFWorld data in the ``alfworld-download`` cache layout
        (``<data_root>/json_2.1.1/{train,valid_unseen}``, ``<data_root>/logic/alfred.pddl``);
        ``alfworld-download`` is run when it is missing and ``download`` is true. Train = the
        playable ``train`` games; eval = the 134 playable ``valid_unseen`` games.
    fixture: games generated as PDDL problems for ALFWorld's bundled domain and grammar
        (:mod:`autorl.task_code.alfworld.fixture`), the six task types in turn; train and eval games
        are different games (different rooms, objects and targets).

Each source's builder is named in ``task.yaml`` (``sources``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

from .fixture import RoomSize, write_fixture_split
from .games import collect_games, task_short_name
from .options import FixtureBuild, HubBuild


def _write_rows(folder: Path, rows: list[dict[str, str]]) -> None:
    with (folder / "episodes.jsonl").open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True) + "\n")


def _rows(
    prefix: str, games: list[tuple[str, Path]], relative_to: Path | None
) -> list[dict[str, str]]:
    rows = []
    for name, path in games:
        game = path.relative_to(relative_to).as_posix() if relative_to else str(path)
        rows.append(
            {"episode_id": f"{prefix}/{name}", "game": game, "task": str(task_short_name(name))}
        )
    return rows


def build_fixture(public: Path, private: Path, *, seed: int, options: FixtureBuild) -> None:
    """Write generated games: ``options`` ``train_size`` / ``eval_size`` and the room size
    (``extra_receptacle_kinds``, ``max_copies``, ``distractor_objects``).

    Train games go to ``public/games/`` (scenes 1…), eval games to ``private/games/`` (scenes
    10001…), each listed in that folder's ``episodes.jsonl``.
    """
    rng = random.Random(seed)
    size = RoomSize(
        extra_receptacle_kinds=options.extra_receptacle_kinds,
        max_copies=options.max_copies,
        distractor_objects=options.distractor_objects,
    )
    train = write_fixture_split(public, "games", options.train_size, rng, first_scene=1, size=size)
    evals = write_fixture_split(
        private, "games", options.eval_size, rng, first_scene=10_001, size=size
    )
    _write_rows(public, _rows("train", train, public))
    _write_rows(private, _rows("eval", evals, private))


def _data_root(options: HubBuild) -> Path:
    raw = options.data_root or os.environ.get("ALFWORLD_DATA") or "~/.cache/alfworld"
    return Path(raw).expanduser().resolve()


def _complete(root: Path) -> bool:
    return (root / "logic" / "alfred.pddl").is_file() and any(
        (root / "json_2.1.1").glob("*/*/*/game.tw-pddl")
    )


def _download(root: Path) -> None:
    script = Path(sys.executable).parent / "alfworld-download"
    command = [str(script)] if script.exists() else ["alfworld-download"]
    env = dict(os.environ, ALFWORLD_DATA=str(root))
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600)
    if result.returncode != 0:
        raise RuntimeError(
            f"alfworld-download failed (exit {result.returncode}): {result.stderr[-800:]}"
        )


def build_hub(public: Path, private: Path, *, seed: int, options: HubBuild) -> None:
    """Write the official games (the seed is unused: the splits are fixed).

    Train games are copied into ``public/games/``; eval rows point into the data cache.

    Args:
        public: Empty folder for what the agent may see.
        private: Empty folder for what only the grader reads.
        seed: Unused.
        options: ``data_root`` (``None``: ``$ALFWORLD_DATA`` or ``~/.cache/alfworld``), ``download``
            (run alfworld-download when the data is missing), ``expect_eval_games`` (the playable
            valid_unseen games of json_2.1.1, 134; ``None`` to accept any count).

    Raises:
        RuntimeError: The data is missing (and not downloaded), or has the wrong number of games.
    """
    root = _data_root(options)
    if not _complete(root):
        if not options.download:
            raise RuntimeError(
                f"no ALFWorld data at {root} (expected json_2.1.1/ and logic/alfred.pddl); "
                "run alfworld-download or set build.hub.data_root"
            )
        _download(root)
        if not _complete(root):
            raise RuntimeError(
                f"alfworld-download finished but {root} still lacks json_2.1.1 games"
            )
    train = collect_games(root / "json_2.1.1" / "train")
    evals = collect_games(root / "json_2.1.1" / "valid_unseen")
    expected = options.expect_eval_games
    if expected is not None and len(evals) != expected:
        raise RuntimeError(
            f"{root}/json_2.1.1/valid_unseen has {len(evals)} playable games, expected {expected}; "
            "re-run alfworld-download (or set build.hub.expect_eval_games for a custom copy)"
        )
    if not train:
        raise RuntimeError(f"no playable training games under {root}/json_2.1.1/train")
    # Train games are copied (game file + task type only), so the workspace never points into the
    # cache where the eval games live next to them.
    copied = []
    for name, path in train:
        target = public / "games" / name / "game.tw-pddl"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        copied.append((name, target))
    _write_rows(public, _rows("train", copied, public))
    _write_rows(private, _rows("eval", evals, None))
