"""Evaluator for gsm8k: few-shot chat CoT prompt, greedy, exact match of the final number.

The prompt follows OpenCompass ``configs/datasets/gsm8k/gsm8k_gen_1d7fe4.py``: each shot is a
user turn ``"Question: {q}\\nLet's think step by step\\nAnswer:"`` and an assistant turn whose
worked answer ends ``"The answer is N"``; the eval question is the last user turn.
"""

from __future__ import annotations

import json
from pathlib import Path

from autorl.engine.base import ChatMessage, GenerationEngine
from autorl.errors import TaskError
from autorl.tasks import EvalContext, EvalResult

from .agent.protocol import HASHES, extract_answer, format_question, normalize_number
from .options import Eval

NUM_SAMPLES = 5

# The four shots of OpenCompass gsm8k_gen_1d7fe4, copied verbatim (typos included, e.g. the
# "6 3 pointers" in shot 2), so scores are comparable with published OpenCompass numbers.
SHOTS: tuple[tuple[str, str], ...] = (
    (
        "Angelo and Melanie want to plan how many hours over the next week they should study "
        "together for their test next week. They have 2 chapters of their textbook to study and 4 "
        "worksheets to memorize. They figure out that they should dedicate 3 hours to each "
        "chapter of their textbook and 1.5 hours for each worksheet. If they plan to study no "
        "more than 4 hours each day, how many days should they plan to study total over the next week if they take a 10-minute break every hour, include 3 10-minute snack breaks each day, and 30 minutes for lunch each day?",  # noqa: E501
        "Angelo and Melanie think they should dedicate 3 hours to each of the 2 chapters, 3 hours "
        "x 2 chapters = 6 hours total.\nFor the worksheets they plan to dedicate 1.5 hours for "
        "each worksheet, 1.5 hours x 4 worksheets = 6 hours total.\nAngelo and Melanie need to "
        "start with planning 12 hours to study, at 4 hours a day, 12 / 4 = 3 days.\nHowever, they "
        "need to include time for breaks and lunch. Every hour they want to include a 10-minute break, so 12 total hours x 10 minutes = 120 extra minutes for breaks.\nThey also want to include 3 10-minute snack breaks, 3 x 10 minutes = 30 minutes.\nAnd they want to include 30 minutes for lunch each day, so 120 minutes for breaks + 30 minutes for snack breaks + 30 minutes for lunch = 180 minutes, or 180 / 60 minutes per hour = 3 extra hours.\nSo Angelo and Melanie want to plan 12 hours to study + 3 hours of breaks = 15 hours total.\nThey want to study no more than 4 hours each day, 15 hours / 4 hours each day = 3.75\nThey will need to plan to study 4 days to allow for all the time they need.\nThe answer is 4\n",  # noqa: E501
    ),
    (
        "Mark's basketball team scores 25 2 pointers, 8 3 pointers and 10 free throws.  Their "
        "opponents score double the 2 pointers but half the 3 pointers and free throws.  What's "
        "the total number of points scored by both teams added together?",  # noqa: E501
        "Mark's team scores 25 2 pointers, meaning they scored 25*2= 50 points in 2 "
        "pointers.\nHis team also scores 6 3 pointers, meaning they scored 8*3= 24 points in 3 "
        "pointers\nThey scored 10 free throws, and free throws count as one point so they scored "
        "10*1=10 points in free throws.\nAll together his team scored 50+24+10= 84 points\nMark's "
        "opponents scored double his team's number of 2 pointers, meaning they scored 50*2=100 points in 2 pointers.\nHis opponents scored half his team's number of 3 pointers, meaning they scored 24/2= 12 points in 3 pointers.\nThey also scored half Mark's team's points in free throws, meaning they scored 10/2=5 points in free throws.\nAll together Mark's opponents scored 100+12+5=117 points\nThe total score for the game is both team's scores added together, so it is 84+117=201 points\nThe answer is 201\n",  # noqa: E501
    ),
    (
        "Bella has two times as many marbles as frisbees. She also has 20 more frisbees than deck "
        "cards. If she buys 2/5 times more of each item, what would be the total number of the "
        "items she will have if she currently has 60 marbles?",  # noqa: E501
        "When Bella buys 2/5 times more marbles, she'll have increased the number of marbles by "
        "2/5*60 = 24\nThe total number of marbles she'll have is 60+24 = 84\nIf Bella currently "
        "has 60 marbles, and she has two times as many marbles as frisbees, she has 60/2 = 30 "
        "frisbees.\nIf Bella buys 2/5 times more frisbees, she'll have 2/5*30 = 12 more "
        "frisbees.\nThe total number of frisbees she'll have will increase to 30+12 = 42\nBella also has 20 more frisbees than deck cards, meaning she has 30-20 = 10 deck cards\nIf she buys 2/5 times more deck cards, she'll have 2/5*10 = 4 more deck cards.\nThe total number of deck cards she'll have is 10+4 = 14\nTogether, Bella will have a total of 14+42+84 = 140 items\nThe answer is 140\n",  # noqa: E501
    ),
    (
        "A group of 4 fruit baskets contains 9 apples, 15 oranges, and 14 bananas in the first "
        "three baskets and 2 less of each fruit in the fourth basket. How many fruits are there?",  # noqa: E501
        "For the first three baskets, the number of apples and oranges in one basket is "
        "9+15=24\nIn total, together with bananas, the number of fruits in one basket is 24+14=38 "
        "for the first three baskets.\nSince there are three baskets each having 38 fruits, there "
        "are 3*38=114 fruits in the first three baskets.\nThe number of apples in the fourth "
        "basket is 9-2=7\nThere are also 15-2=13 oranges in the fourth basket\nThe combined number of oranges and apples in the fourth basket is 13+7=20\nThe fourth basket also contains 14-2=12 bananas.\nIn total, the fourth basket has 20+12=32 fruits.\nThe four baskets together have 32+114=146 fruits.\nThe answer is 146\n",  # noqa: E501
    ),
)


def gold_answer(answer: str) -> str:
    """The normalised number after ``#### `` in a GSM8K answer.

    Raises:
        TaskError: The answer has no ``#### N``.
    """
    match = HASHES.search(answer)
    gold = normalize_number(match.group(1)) if match else None
    if gold is None:
        raise TaskError(f"eval answer has no '#### N' final number: {answer[-80:]!r}")
    return gold


def build_conversation(question: str, num_shots: int) -> list[ChatMessage]:
    """The chat sent for one eval question: ``num_shots`` shot pairs, then the question."""
    messages: list[ChatMessage] = []
    for shot_q, shot_a in SHOTS[:num_shots]:
        messages.append({"role": "user", "content": format_question(shot_q)})
        messages.append({"role": "assistant", "content": shot_a})
    messages.append({"role": "user", "content": format_question(question)})
    return messages


def evaluate(engine: GenerationEngine, ctx: EvalContext) -> EvalResult:
    """Score ``engine`` on ``ctx.private_dir/eval.jsonl`` with one batched generation call.

    Args:
        engine: Greedy generation engine (``autorl.engine.base.GenerationEngine``).
        ctx: ``private_dir`` holds ``eval.jsonl`` (``{"question", "answer"}`` rows); ``options``
            are an :class:`~.options.Eval` (defaults and meanings in ``options.py``): ``num_shots``
            (0-4), ``max_new_tokens``, ``limit`` (first N items; ``None`` = all), ``stop`` (where a
            generation is cut: a model that keeps going invents the next ``"Question:"``, which
            OpenCompass's postprocess cuts too).

    Returns:
        Accuracy x100 of exact matches of the final number, with a few samples in details.

    Raises:
        TaskError: Bad options, malformed eval data, or an engine returning the wrong count.
    """
    options, private_dir = ctx.options_as(Eval), ctx.private_dir
    num_shots, limit, max_new_tokens = options.num_shots, options.limit, options.max_new_tokens
    if not 0 <= num_shots <= len(SHOTS):
        raise TaskError(f"gsm8k num_shots must be 0..{len(SHOTS)}, got {num_shots}")

    with (Path(private_dir) / "eval.jsonl").open(encoding="utf-8") as fh:
        items = [json.loads(line) for line in fh if line.strip()]
    if limit is not None:
        items = items[:limit]
    if not items:
        raise TaskError(f"no eval items in {private_dir / 'eval.jsonl'}")
    golds = [gold_answer(item["answer"]) for item in items]

    conversations = [build_conversation(item["question"], num_shots) for item in items]
    outputs = engine.generate_chat(
        conversations, max_new_tokens=max_new_tokens, stop=list(options.stop)
    )
    if len(outputs) != len(items):
        raise TaskError(f"engine returned {len(outputs)} generations for {len(items)} prompts")

    extracted = [extract_answer(text or "") for text in outputs]
    correct = sum(
        pred is not None and pred == gold for pred, gold in zip(extracted, golds, strict=True)
    )
    samples = [
        {"question": item["question"], "prediction": out, "extracted": pred, "gold": gold}
        for item, out, pred, gold in list(zip(items, outputs, extracted, golds, strict=True))[
            :NUM_SAMPLES
        ]
    ]
    details = {
        "correct": correct,
        "num_shots": num_shots,
        "max_new_tokens": max_new_tokens,
        "samples": samples,
    }
    return EvalResult(score=100.0 * correct / len(items), num_examples=len(items), details=details)
