"""The options of alfworld's builders, evaluator and environment, per data source, with defaults.

``task.build.<source>.<name>=...`` and ``task.eval.<source>.<name>=...`` override them in a sweep;
the environment gets the eval options too.
"""

from __future__ import annotations

from dataclasses import dataclass

from autorl.task_options import TaskOptions, option


@dataclass
class FixtureBuild:
    """``build.py`` ``build_fixture``: generated PDDL games for ALFWorld's bundled domain."""

    train_size: int = option(
        300,
        "generated training games in public/games (eval rooms are unseen: more to learn from)",
    )
    eval_size: int = option(
        36, "generated eval games in private/games (other rooms, objects and targets)"
    )
    extra_receptacle_kinds: int = option(
        1, "receptacle types added to a room beyond what its task needs"
    )
    max_copies: int = option(
        1,
        "most copies of a receptacle type; fridge, microwave, sink, garbage can, dining table, "
        "desk: one",
    )
    distractor_objects: int = option(1, "objects of other types placed in a room")


@dataclass
class HubBuild:
    """``build.py`` ``build_hub``: the alfworld-download data."""

    data_root: str | None = option(
        None, "alfworld-download cache folder; null: $ALFWORLD_DATA or ~/.cache/alfworld"
    )
    download: bool = option(True, "run alfworld-download when the data is missing")
    expect_eval_games: int | None = option(
        134, "playable valid_unseen games required; null: accept any count (a custom copy)"
    )


@dataclass
class Eval:
    """``evaluate.py``'s and ``env.py``'s options; these defaults are the fixture's."""

    max_steps: int = option(20, "actions per game before it counts as lost")
    max_new_tokens: int = option(16, "generation cap per action")
    max_prompt_chars: int | None = option(
        1800,
        "keep the prompt's end within this many characters; the tiny model's window is 1024 tokens",
    )
    concurrency: int = option(64, "games played at once")
    limit: int | None = option(None, "play only the first N eval games; null: all")


@dataclass
class HubEval(Eval):
    """The reference's step and generation limits."""

    max_steps: int = option(50, "actions per game before it counts as lost")
    max_new_tokens: int = option(100, "generation cap per action")
    max_prompt_chars: int | None = option(
        None,
        "null: no truncation here (the engine still keeps the prompt's end within the model's "
        "window)",
    )


OPTIONS = TaskOptions(
    build={"fixture": FixtureBuild, "hub": HubBuild}, eval={"fixture": Eval, "hub": HubEval}
)
