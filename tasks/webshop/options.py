"""The options of webshop's builders, evaluator and environment, per data source, with defaults.

``task.build.<source>.<name>=...`` and ``task.eval.<source>.<name>=...`` override them in a sweep;
the environment gets the eval options too.
"""

from __future__ import annotations

from dataclasses import dataclass

from autorl.task_options import TaskOptions, option


@dataclass
class FixtureBuild:
    """``build.py`` ``build_fixture``: a generated catalogue and goals (``fixture.py``)."""

    catalogue_size: int = option(240, "generated products in public/catalogue.jsonl")
    train_size: int = option(300, "training sessions (goals) in public/goals.jsonl")
    eval_size: int = option(100, "eval sessions 0..eval_size-1 in private/goals.jsonl")


@dataclass
class HubBuild:
    """``build.py`` ``build_hub``: session ids of WebShop's own goals."""

    train_size: int = option(1000, "training sessions listed, from first_train_session on")
    eval_size: int = option(100, "eval sessions 0..eval_size-1 (the reference's 0-99)")
    first_train_session: int = option(1500, "WebShop's own training goals start here")


@dataclass
class Eval:
    """``evaluate.py``'s and ``env.py``'s options; these defaults are the fixture's."""

    max_steps: int = option(15, "actions per session before it ends with reward 0")
    max_new_tokens: int = option(24, "generation cap per action")
    history_window: int = option(
        5, "steps shown in the prompt (the reference's 5); the expert's sessions take at most 5"
    )
    multi_turn: bool = option(
        True,
        "one chat turn per step, so an episode's steps pack into one training sequence "
        "(README.md); "
        "false: the reference's single user prompt",
    )
    success_threshold: float = option(
        0.5, "a session succeeds when its purchase reward is at least this"
    )
    concurrency: int = option(100, "sessions played at once")
    limit: int | None = option(None, "play only the first N eval sessions; null: all")
    backend: str = option(
        "builtin",
        "builtin: the generated shop in-process; server: a running WebShop server (human goals); "
        "textenv: WebShop's own text env in-process, as the reference played it (synthetic goals)",
    )
    server_url: str | None = option(None, "backend server: its base URL")
    server_timeout_s: int = option(30, "backend server: HTTP timeout per request")


@dataclass
class HubEval(Eval):
    """The reference's limits and prompt, sessions 0-99 of WebShop's text env."""

    max_steps: int = option(50, "actions per session before it ends with reward 0")
    max_new_tokens: int = option(100, "generation cap per action")
    multi_turn: bool = option(False, "the reference's single user prompt")
    backend: str = option(
        "textenv",
        "the reference's sessions 0-99 (synthetic goals, seed-233 shuffle); server: human goals",
    )
    server_url: str | None = option("http://127.0.0.1:3000", "backend server: its base URL")


OPTIONS = TaskOptions(
    build={"fixture": FixtureBuild, "hub": HubBuild}, eval={"fixture": Eval, "hub": HubEval}
)
