"""The options of alpacaeval's builders and evaluator, per data source, with their defaults.

``task.build.<source>.<name>=...`` and ``task.eval.<source>.<name>=...`` override them in a sweep.
The evaluator takes exactly one of ``judge_driver`` and ``judge_server``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autorl.task_options import TaskOptions, option


@dataclass
class FixtureBuild:
    """``build.py`` ``build_fixture``: generated instructions (``fixture.py``)."""

    train_size: int = option(600, "generated instructions with ideal answers in public/train.jsonl")
    eval_size: int = option(
        200, "generated instructions with partial references in private/eval.jsonl"
    )


@dataclass
class HubBuild:
    """``build.py`` ``build_hub``: tatsu-lab's instructions and AlpacaEval's references."""

    train_size: int = option(2000, "first rows of train_path's train split")
    train_path: str = option("tatsu-lab/alpaca", "dataset repo, or a local folder with its layout")
    eval_path: str = option(
        "tatsu-lab/alpaca_eval", "dataset repo, or a local folder holding its json and csv files"
    )
    lc_prior: bool = option(
        True, "fetch df_gamed.csv (instruction difficulties) for the length_controlled_v1 GLM"
    )


@dataclass
class Eval:
    """``evaluate.py``'s options; these defaults are the fixture's (a local rule-based judge)."""

    judge_driver: str | None = option(None, "a conf/driver name whose LLM judges (e.g. gpt-5.2)")
    judge_server: str | None = option(
        "rules",
        "a local judging model served by the evaluator: the fixture's rule judge (not an LLM)",
    )
    judge_params: dict[str, Any] = option(
        {"max_tokens": 1, "temperature": 0}, "request fields sent to the judge verbatim"
    )
    judge_concurrency: int = option(4, "judge requests in flight")
    lc_glm: str = option(
        "length_controlled_minimal", "fixture instructions have no AlpacaEval difficulty estimates"
    )
    max_new_tokens: int = option(48, "generation cap per answer")
    limit: int | None = option(None, "score only the first N instructions; null: all")


@dataclass
class HubEval(Eval):
    """Judged like the reference: GPT-5.2 (``conf/driver/gpt-5.2.yaml``, needs OPENAI_API_KEY)."""

    judge_driver: str | None = option("gpt-5.2", "a conf/driver name whose LLM judges")
    judge_server: str | None = option(None, "a local judging model served by the evaluator")
    judge_params: dict[str, Any] = option(
        {"max_completion_tokens": 100}, "request fields sent to the judge verbatim"
    )
    judge_concurrency: int = option(8, "judge requests in flight")
    lc_glm: str = option(
        "length_controlled_v1", "AlpacaEval 2.0's GLM; needs the lc_prior build option"
    )
    max_new_tokens: int = option(512, "generation cap per answer")


OPTIONS = TaskOptions(
    build={"fixture": FixtureBuild, "hub": HubBuild}, eval={"fixture": Eval, "hub": HubEval}
)
