"""The options of deepsearchqa's builders, evaluator and environment, per data source, with
defaults.

``task.build.<source>.<name>=...`` and ``task.eval.<source>.<name>=...`` override them in a sweep;
the environment gets the eval options too. The evaluator takes exactly one of ``judge_driver`` and
``judge_server``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autorl.task_options import TaskOptions, option


@dataclass
class FixtureBuild:
    """``build.py`` ``build_fixture``: generated questions and a local corpus (``fixture.py``)."""

    train_size: int = option(
        400,
        "generated questions in public/questions.jsonl (at 100, `small` learns their answers by "
        "heart)",
    )
    eval_size: int = option(
        60, "generated questions in private/questions.jsonl (about other towns)"
    )
    distractor_towns: int = option(40, "corpus documents about towns no question asks about")


@dataclass
class HubBuild:
    """``build.py`` ``build_hub``: google/deepsearchqa, shuffled with the reference's seed 42."""

    train_size: int = option(
        100, "shuffled rows [0:train_size] (shuffle seed 42, as the reference)"
    )
    eval_size: int = option(200, "the next eval_size rows")
    hub_path: str = option("google/deepsearchqa", "dataset repo, or a local copy with its layout")


@dataclass
class Eval:
    """``evaluate.py``'s and ``env.py``'s options; these defaults are the fixture's."""

    max_steps: int = option(6, "ReAct steps per question before it ends unanswered")
    max_new_tokens: int = option(48, "generation cap per step")
    concurrency: int = option(200, "questions played at once")
    limit: int | None = option(None, "answer only the first N eval questions; null: all")
    search: dict[str, Any] = option(
        {"backend": "bm25", "num_results": 1},
        "the search backend and its settings (search.py); bm25: private/corpus.jsonl, one hit per "
        "search (the answer's phrase occurs once)",
    )
    judge_driver: str | None = option(
        None, "a conf/driver name whose LLM judges (e.g. gemini-2.5-flash)"
    )
    judge_server: str | None = option(
        "rules", "a local OpenAI-compatible server running a rule-based judging model (not an LLM)"
    )
    judge_params: dict[str, Any] = option(
        {"max_tokens": 2, "temperature": 0}, "request fields sent to the judge verbatim"
    )
    judge_concurrency: int = option(4, "judge requests in flight")


@dataclass
class HubEval(Eval):
    """Web search and an LLM judge, as the reference."""

    max_new_tokens: int = option(256, "generation cap per step")
    search: dict[str, Any] = option(
        {
            "backend": "web",
            "endpoint": "https://serpapi.com/search",
            "api_key_env": "SERPAPI_KEY",
            "num_results": 3,
            "timeout_s": 10,
        },
        "web: a SerpAPI-compatible endpoint; api_key_env names the variable holding its key",
    )
    judge_driver: str | None = option(
        "gemini-2.5-flash",
        "the description's recommendation; needs its API key in the grader's environment",
    )
    judge_server: str | None = option(None, "a local judging server")
    judge_params: dict[str, Any] = option(
        {"temperature": 0},
        "no token cap, as the reference: a thinking judge given 10 tokens replied nothing",
    )
    judge_concurrency: int = option(8, "judge requests in flight")


OPTIONS = TaskOptions(
    build={"fixture": FixtureBuild, "hub": HubBuild}, eval={"fixture": Eval, "hub": HubEval}
)
