"""Judging DeepSearchQA answers (grader side): the reference's judge prompt, an OpenAI-compatible
judge, and the fixture's rule-based judging model.

The judge is a configured driver (``judge_driver``: ``conf/driver/<name>.yaml``) or a local judging
model served on loopback by :class:`autorl.judge.server.LocalJudgeServer` (``judge_server: rules``),
both reached through :class:`autorl.judge.client.JudgeClient` (cached, bounded concurrency).
Fixes of the reference: an empty prediction is never correct (it is not sent to the judge); a
failed judge call, or an empty or unparseable reply, is an error (never cached), not a substring
fallback or "incorrect".
"""

from __future__ import annotations

import contextlib
import re
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autorl.engine.base import ChatMessage
from autorl.errors import ConfigError
from autorl.registry import Registry

#: The reference's judge system prompt and user prompt, verbatim (rdagent 1.0.0 wheel,
#: ``rdagent/scenarios/rl/autorl_bench/benchmarks/deepsearchqa/eval.py``, ``_judge_answer``;
#: the 8-space indentation of its f-string lines is part of the text the reference sent).
SYSTEM = "You are a strict answer evaluator."
JUDGE_TEMPLATE = """You are an answer evaluator. Compare the predicted answer to the gold answer.
        Question answer type: {answer_type}
        Gold answer: {gold}
        Predicted answer: {predicted}
        For "Single Answer": The predicted answer is correct if it contains the same key information as the gold answer.
        For "Set Answer": The predicted answer is correct if it contains ALL items from the gold answer (order doesn't matter, minor wording variations are OK).
        Reply with ONLY "correct" or "incorrect". No explanation."""  # noqa: E501 - verbatim
_FIELDS = re.compile(
    r"Question answer type: (.*)\n {8}Gold answer: (.*)\n {8}Predicted answer: (.*)\n {8}For "
    r"\"Single",
    re.DOTALL,
)
#: The smallest ``max_tokens`` a driver judge may be given: a thinking model
#: (gemini-2.5-flash) spends its reasoning tokens inside this cap, and with a cap of 10 it
#: answered empty replies.
MIN_DRIVER_MAX_TOKENS = 1024
VERDICTS = ("correct", "incorrect")


def judge_messages(answer_type: str, gold: str, prediction: str) -> list[ChatMessage]:
    """The reference's judge chat for one prediction."""
    user = JUDGE_TEMPLATE.format(answer_type=answer_type, gold=gold, predicted=prediction)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def verdict_of(reply: str) -> str:
    """The reference's reading of a judge reply: its first line, lower-cased, punctuation stripped.

    >>> verdict_of("Correct."), verdict_of("incorrect\\nbecause")
    ('correct', 'incorrect')
    """
    lines = reply.strip().splitlines()
    return (lines[0] if lines else "").strip().strip(string.punctuation + " ").lower()


def check_reply(reply: str) -> None:
    """Accept a judge reply whose verdict is "correct" or "incorrect" (the judge client's ``parse``
    check).

    The reference counted any other reply as incorrect; here it raises, so the judge client neither
    caches it nor scores it (an empty reply from a thinking model out of tokens is a judge failure).

    Raises:
        ValueError: The reply is empty or its first line is not a verdict.
    """
    if verdict_of(reply) not in VERDICTS:
        raise ValueError(
            f"the judge's first line must be 'correct' or 'incorrect', got {reply.strip()[:80]!r}"
        )


def is_correct_reply(reply: str) -> bool:
    """Whether a (checked) judge reply says "correct".

    >>> is_correct_reply("Correct."), is_correct_reply("incorrect"), is_correct_reply("")
    (True, False, False)
    """
    return verdict_of(reply) == "correct"


#: Words a strict answer may wrap around its key information ("It was founded in 1742.").
_FILLER = frozenset(
    {
        "a",
        "an",
        "the",
        "it",
        "its",
        "is",
        "was",
        "were",
        "in",
        "of",
        "by",
        "from",
        "and",
        "or",
        "town",
        "founded",
        "year",
        "trade",
        "made",
        "rich",
        "rivers",
        "river",
        "run",
        "runs",
        "through",
        "answer",
    }
)


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.lower()).split())


def rule_judgement(answer_type: str, gold: str, prediction: str) -> bool:
    """The fixture judge's decision, as strict as the judge prompt asks: the prediction holds the
    gold (Single) or every gold item (Set), normalised, and no other words than those and filler.

    The second rule is what makes it strict: a hedge that lists candidates ("salt, wool, amber" for
    "salt") contains the gold but is not the same key information; under containment alone, listing
    all ten trades was right on every trade question.

    >>> rule_judgement("Single Answer", "1742", "It was founded in 1742.")
    True
    >>> rule_judgement("Set Answer", "Ostra, Lindel", "Ostra and Lindel")
    True
    >>> rule_judgement("Set Answer", "Ostra, Lindel", "Ostra")
    False
    >>> rule_judgement("Single Answer", "1742", "")
    False
    >>> rule_judgement("Single Answer", "salt", "salt, wool, amber")
    False
    """
    pred = _norm(prediction)
    if not pred:
        return False
    items = (
        [gold]
        if answer_type.lower().startswith("single")
        else [g for g in gold.split(",") if g.strip()]
    )
    normalised = [_norm(item) for item in items]
    allowed = _FILLER.union(*(item.split() for item in normalised))
    return all(f" {item} " in f" {pred} " for item in normalised) and set(pred.split()) <= allowed


class RuleQAJudge:
    """The fixture's judging model (not a language model): reads the judge prompt, answers by
    rule."""

    name = "qa-rules"

    def __call__(self, messages: list[ChatMessage]) -> str:
        """``correct`` or ``incorrect`` for a chat built by :func:`judge_messages`."""
        match = _FIELDS.search(messages[-1]["content"])
        if match is None:
            return "incorrect"
        return "correct" if rule_judgement(*match.groups()) else "incorrect"


#: Local judging models by ``judge_server`` name (served by
#: :class:`autorl.judge.server.LocalJudgeServer`).
LOCAL_JUDGES: Registry[type[RuleQAJudge]] = Registry(
    "local judge", {"rules": f"{__name__}:RuleQAJudge"}
)


@contextlib.contextmanager
def open_judge(options: dict[str, Any], cache_dir: Path | None) -> Iterator[Any]:
    """A :class:`autorl.judge.client.JudgeClient` for ``judge_driver`` or ``judge_server`` options.

    Args:
        options: The task's eval options; ``judge_driver``, ``judge_server`` (exactly one set),
            ``judge_params`` and ``judge_concurrency`` are read (all required).
        cache_dir: Where judge answers are cached (``None``: no cache).

    Raises:
        ConfigError: Neither or both are set, or the local judge is unknown (with "did you mean").
    """
    from autorl.judge.client import JudgeClient, JudgeSpec, load_judge_spec

    driver, server = options["judge_driver"], options["judge_server"]
    if bool(driver) == bool(server):
        raise ConfigError(
            "deepsearchqa needs exactly one of the options judge_driver (a conf/driver name, e.g. "
            f"gemini-2.5-flash) and judge_server ({', '.join(LOCAL_JUDGES)}); got {driver!r}, "
            f"{server!r}"
        )
    params = dict(options["judge_params"] or {})
    if (
        driver
        and params.get("max_tokens") is not None
        and int(params["max_tokens"]) < MIN_DRIVER_MAX_TOKENS
    ):
        raise ConfigError(
            f"deepsearchqa judge_params.max_tokens={params['max_tokens']} is too small for a judge "
            f"driver: thinking models spend it on reasoning and reply empty; leave max_tokens out "
            f"(the reference sets none) or give at least {MIN_DRIVER_MAX_TOKENS}"
        )
    concurrency = int(options["judge_concurrency"])
    if driver:
        with JudgeClient(
            load_judge_spec(str(driver)),
            params=params,
            concurrency=concurrency,
            cache_dir=cache_dir,
        ) as client:
            yield client
        return
    model = LOCAL_JUDGES.get(str(server))()  # ConfigError with "did you mean" for an unknown name
    from autorl.judge.server import LocalJudgeServer

    with (
        LocalJudgeServer({model.name: model}) as running,
        JudgeClient(
            JudgeSpec(name=f"local-{server}", model=model.name, base_url=running.base_url),
            params=params,
            concurrency=concurrency,
            cache_dir=cache_dir,
        ) as client,
    ):
        yield client


def judge_answers(client: Any, items: list[tuple[str, str, str]]) -> list[bool]:
    """Judge ``(answer_type, gold, prediction)`` triples; empty predictions are incorrect without a
    call.

    Raises:
        autorl.judge.client.JudgeError: A judge reply is empty or not a verdict (never cached,
        never scored).
    """
    asked = [i for i, (_, _, pred) in enumerate(items) if pred.strip()]
    replies = client.complete_many([judge_messages(*items[i]) for i in asked], check_reply)
    verdict = [False] * len(items)
    for i, reply in zip(asked, replies, strict=True):
        verdict[i] = is_correct_reply(reply)
    return verdict
