"""The options of gsm8k's builders and evaluator, per data source, with their defaults.

``task.build.<source>.<name>=...`` and ``task.eval.<source>.<name>=...`` override them in a sweep.
"""

from __future__ import annotations

from dataclasses import dataclass

from autorl.task_options import TaskOptions, option


@dataclass
class FixtureBuild:
    """``build.py`` ``build_fixture``: generated offline problems (``fixture.py``)."""

    train_size: int = option(2000, "generated problems in public/train.jsonl")
    eval_size: int = option(200, "generated problems in private/eval.jsonl (disjoint from train)")


@dataclass
class HubBuild:
    """``build.py`` ``build_hub``: openai/gsm8k (config ``main``, train and test splits)."""

    hub_path: str = option("openai/gsm8k", "dataset repo, or a local folder with its layout")


@dataclass
class Eval:
    """``evaluate.py``'s options; these defaults are the fixture's."""

    num_shots: int = option(
        0,
        "OpenCompass worked examples before the question (0-4); the tiny model's context is too "
        "short for 4",
    )
    max_new_tokens: int = option(48, "generation cap per answer")
    limit: int | None = option(None, "score only the first N eval items; null: all")
    stop: list[str] = option(
        ["Question:"], "cut the generation where the model invents the next question"
    )


@dataclass
class HubEval(Eval):
    """As the reference: OpenCompass ``gsm8k_gen_1d7fe4`` (README.md, parity table)."""

    num_shots: int = option(4, "OpenCompass worked examples before the question (0-4)")
    max_new_tokens: int = option(
        512, "the dataset config's GenInferencer max_out_len (it overrides the model's 8192)"
    )


OPTIONS = TaskOptions(
    build={"fixture": FixtureBuild, "hub": HubBuild}, eval={"fixture": Eval, "hub": HubEval}
)
