"""The options of humaneval's builders and evaluator, per data source, with their defaults.

``task.build.<source>.<name>=...`` and ``task.eval.<source>.<name>=...`` override them in a sweep.
"""

from __future__ import annotations

from dataclasses import dataclass

from autorl.task_options import TaskOptions, option


@dataclass
class FixtureBuild:
    """``build.py`` ``build_fixture``: generated offline problems (``fixture.py``)."""

    train_size: int = option(240, "generated problems in public/train.jsonl")
    eval_size: int = option(40, "generated problems in private/eval.jsonl (disjoint from train)")


@dataclass
class HubBuild:
    """``build.py`` ``build_hub``: openai/openai_humaneval's test split, cut in two."""

    hub_path: str = option(
        "openai/openai_humaneval", "dataset repo, or a local folder with its layout"
    )
    split_at: int = option(82, "test problems [:split_at] go to train, the rest to eval")


@dataclass
class Eval:
    """``evaluate.py``'s options; these defaults are the fixture's."""

    max_new_tokens: int = option(48, "generation cap per completion; fixture bodies are one line")
    limit: int | None = option(None, "score only the first N problems; null: all")
    timeout_s: int = option(
        10, "wall-clock limit of one whole problem (judge and candidate processes together)"
    )
    workers: int = option(2, "problems judged at once")
    memory_mb: int = option(1024, "memory limit of each of a problem's two processes")
    max_processes: int = option(32, "process limit of each of a problem's two processes")
    sandbox_mode: str | None = option(
        None,
        "judge isolation; null, namespaces: required (else it refuses); rlimits: without them, "
        "the private split visible to judged code",
    )


@dataclass
class HubEval(Eval):
    """The reference's generation cap; more problems judged at once."""

    max_new_tokens: int = option(512, "generation cap per completion")
    workers: int = option(4, "problems judged at once")


OPTIONS = TaskOptions(
    build={"fixture": FixtureBuild, "hub": HubBuild}, eval={"fixture": Eval, "hub": HubEval}
)
