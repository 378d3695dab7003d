"""Evaluator for alpacaeval: chat-template generation, a pairwise LLM judge, AlpacaEval 2.0's LC
win rate.

1. Every eval instruction goes to the engine in one batched call: one user turn with the model's
   chat template, greedy, at most ``max_new_tokens`` new tokens; outputs are stripped.
2. A judge compares each output with the reference output using AlpacaEval's pairwise prompt
   (:mod:`.pairwise`), output order randomised per instruction. Answers are cached
   on disk by (judge, request) under the grader's cache dir and at most ``judge_concurrency``
   requests are in flight. A reply that is empty or not ``m``/``M`` raises ``JudgeError`` (an
   infrastructure failure, never a loss) and is not cached.
3. The score is AlpacaEval 2.0's length-controlled win rate (:mod:`.lc`).

The judge is either a configured driver (``judge_driver: gpt-5.2`` reads
``conf/driver/gpt-5.2.yaml``; the reference judged with GPT-5.2) or a judging model served by a
local OpenAI-compatible server that this evaluator starts and stops (``judge_server: rules``:
the fixture's rule-based judge, :mod:`.rules`; it is not a language model). Local judging
models are named in :data:`LOCAL_JUDGES`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from autorl.engine.base import ChatMessage, GenerationEngine
from autorl.errors import ConfigError, TaskError
from autorl.judge.client import JudgeClient, JudgeSpec, load_judge_spec
from autorl.registry import Registry
from autorl.tasks import EvalContext, EvalResult

from .agent.protocol import chat_prompt
from .fixture import ideal_answer
from .lc import LCPrior, length_controlled_win_rate
from .options import Eval
from .pairwise import comparison, preference, require_choice

NUM_SAMPLES = 5


class JudgeModel(Protocol):
    """A local judging model, served by :mod:`autorl.judge.server` under its ``name``."""

    name: str

    def __call__(self, messages: list[ChatMessage]) -> str:
        """The judge's reply to one chat."""
        ...


# Local judging models (``judge_server``): name -> a factory of a fresh judging model.
LOCAL_JUDGES: Registry[Callable[[], JudgeModel]] = Registry(
    "local judge", {"rules": f"{__package__}.rules:RuleJudge"}
)


def oracle_reply(item: dict[str, Any]) -> str:
    """A reply the fixture judge ranks above the reference on every fixture item (for contract
    tests)."""
    return ideal_answer(str(item["question"]))


@contextlib.contextmanager
def judge_spec(options: Eval) -> Iterator[JudgeSpec]:
    """The judge the options name, with a local server running for the ``with`` block if it is one.

    Raises:
        ConfigError: Neither or both of ``judge_driver`` and ``judge_server`` are set, or unknown
            names.
    """
    driver, server = options.judge_driver, options.judge_server
    if bool(driver) == bool(server):
        raise ConfigError(
            "alpacaeval needs exactly one of eval options judge_driver (a conf/driver name, e.g. "
            f"gpt-5.2) and judge_server (a local judging model: {', '.join(LOCAL_JUDGES)}); "
            f"got judge_driver={driver!r}, judge_server={server!r}"
        )
    if driver:
        yield load_judge_spec(str(driver))
        return
    factory = LOCAL_JUDGES.get(str(server))
    from autorl.judge.server import LocalJudgeServer

    model = factory()
    with LocalJudgeServer({model.name: model}) as running:
        yield JudgeSpec(name=f"local-{server}", model=model.name, base_url=running.base_url)


def _read_items(private_dir: Path, limit: Any) -> list[dict[str, Any]]:
    with (Path(private_dir) / "eval.jsonl").open(encoding="utf-8") as fh:
        items = [json.loads(line) for line in fh if line.strip()]
    if limit is not None:
        items = items[: int(limit)]
    if not items:
        raise TaskError(f"no eval items in {private_dir / 'eval.jsonl'}")
    return items


def evaluate(engine: GenerationEngine, ctx: EvalContext) -> EvalResult:
    """Score ``engine`` on ``ctx.private_dir/eval.jsonl``.

    Args:
        engine: Greedy generation engine.
        ctx: ``private_dir`` holds ``eval.jsonl`` (``question``, ``reference``, ...) and, for the
            ``length_controlled_v1`` GLM, ``lc_prior.csv``. ``options``, an :class:`~.options.Eval`
            (defaults and meanings in ``options.py``): ``judge_driver`` and
            ``judge_server`` (exactly one set; see the module docstring), ``judge_params`` (request
            fields sent verbatim, e.g. ``{max_completion_tokens: 100}``), ``judge_concurrency``,
            ``lc_glm`` (``length_controlled_v1`` or ``length_controlled_minimal``),
            ``max_new_tokens``, ``limit`` (first N items; ``None`` = all). ``cache_dir``: where
            judge answers are cached (under ``judge/``; the grader passes its cache dir); ``None``
            disables the cache.

    Returns:
        The LC win rate (0-100), with the raw win rate, judge usage and samples in details.

    Raises:
        TaskError: Unknown or missing options, missing eval data or LC prior, or the engine
            returned the wrong count.
        ConfigError: Bad judge options.
        JudgeError: The judge failed, or a reply was empty or not ``m``/``M`` (nothing unusable is
            cached).
    """
    options = ctx.options_as(Eval)
    private_dir, cache_dir = Path(ctx.private_dir), ctx.cache_dir
    items = _read_items(private_dir, options.limit)
    glm = options.lc_glm
    prior = None
    if glm == "length_controlled_v1":
        prior_path = Path(private_dir) / "lc_prior.csv"
        if not prior_path.is_file():
            raise TaskError(
                f"lc_glm length_controlled_v1 needs {prior_path} (AlpacaEval's df_gamed.csv, "
                "built with "
                "the hub source); use lc_glm: length_controlled_minimal for other data"
            )
        prior = LCPrior.from_csv(prior_path)
    max_new_tokens = options.max_new_tokens

    # The judge is set up first, so a missing API key or a bad judge option fails before generating.
    with (
        judge_spec(options) as spec,
        JudgeClient(
            spec,
            params=dict(options.judge_params),
            concurrency=options.judge_concurrency,
            cache_dir=None if cache_dir is None else Path(cache_dir) / "judge",
        ) as client,
    ):
        conversations = [chat_prompt(str(item["question"])) for item in items]
        raw = engine.generate_chat(conversations, max_new_tokens=max_new_tokens)
        if len(raw) != len(items):
            raise TaskError(f"engine returned {len(raw)} generations for {len(items)} prompts")
        outputs = [(text or "").strip() for text in raw]
        comparisons = [
            comparison(item["question"], item["reference"], out)
            for item, out in zip(items, outputs, strict=True)
        ]
        answers = client.complete_many([c.messages for c in comparisons], parse=require_choice)
        usage = client.usage.as_dict(spec.price_per_mtok)
    preferences = [
        preference(answer, c.switched) for answer, c in zip(answers, comparisons, strict=True)
    ]

    metrics = length_controlled_win_rate(
        preferences,
        [len(i["reference"]) for i in items],
        [len(o) for o in outputs],
        glm=glm,
        prior=prior,
    )
    # Details reach the agent through the grading API: no instruction or reference from the private
    # split.
    samples = [
        {"output": out, "judge_answer": answer, "preference": pref}
        for out, answer, pref in list(zip(outputs, answers, preferences, strict=True))[:NUM_SAMPLES]
    ]
    details = {
        "length_controlled_winrate": metrics["length_controlled_winrate"],
        "win_rate": metrics["win_rate"],
        "discrete_win_rate": metrics["discrete_win_rate"],
        "n_wins": metrics["n_wins"],
        "n_wins_base": metrics["n_wins_base"],
        "n_draws": metrics["n_draws"],
        "avg_length": sum(map(len, outputs)) / len(outputs),
        "lc_glm": glm,
        "judge": {"name": spec.name, "model": spec.model, **usage},
        "max_new_tokens": max_new_tokens,
        "samples": samples,
    }
    return EvalResult(
        score=float(metrics["length_controlled_winrate"]), num_examples=len(items), details=details
    )
