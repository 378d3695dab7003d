"""The gsm8k prompt protocol and answer extraction, shared by the evaluator and the scripted recipe.

Agent side: imports nothing from the task's grader side.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# One number: a comma is part of it only as a thousands separator (groups of exactly three digits),
# so "1,234" is one number (1234) and "3,4" is two (3 and 4). OpenCompass's gsm8k_postprocess
# splits every comma ("1,234" -> 234, a false negative: a reference bug we fix); joining every
# comma ("3,4" -> 34) would credit a list of numbers as one number it never states.
_NUM = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\d,]*\d)"
# After "The answer is" / "####" the number must stand alone: one followed by ", <digit>" starts
# a list (e.g. "The answer is 3, 4"), which is not a single final answer.
_ALONE = r"(?!\s*,\s*-?\d)"
_ANSWER_IS = re.compile(rf"the answer is\s*:?\s*({_NUM}){_ALONE}", re.IGNORECASE)
_ANSWER_HASHES = re.compile(rf"####\s*({_NUM}){_ALONE}")
_ANY_NUM = re.compile(_NUM)
# Gold answers: the text after "#### " with its commas removed, as OpenCompass's
# gsm8k_dataset_postprocess does (GSM8K's golds are single numbers).
HASHES = re.compile(r"####\s*(-?[\d,]*\d(?:\.\d+)?)")


def normalize_number(raw: str) -> str | None:
    """Canonical form of a number string: no commas, "$" or trailing ".", and ``N.0`` -> ``N``.

    >>> normalize_number("$1,234.00")
    '1234'
    >>> normalize_number("12.50.")
    '12.5'
    >>> normalize_number("abc") is None
    True
    """
    cleaned = raw.replace(",", "").replace("$", "").strip().rstrip(".")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def extract_answer(text: str) -> str | None:
    """The model's final number, normalised; ``None`` when there is none.

    The text is cut at the first ``Question:`` (a hallucinated next problem). Then the first
    ``The answer is N`` wins, else the first ``#### N``, else the last number in the text (the
    OpenCompass rule). A comma joins digits only as a thousands separator (``1,234`` is 1234);
    ``3,4`` is the two numbers 3 and 4, and ``The answer is 3,4`` is a list, not an answer, so
    the last number (4) is taken, as OpenCompass would.

    >>> extract_answer("5 + 7 = 12 apples.\\nThe answer is 12")
    '12'
    >>> extract_answer("She pays $1,250.00 in total.\\n#### 1,250")
    '1250'
    >>> extract_answer("First 3 then 4, so 7.")
    '7'
    >>> extract_answer("The answer is 8.0.\\nQuestion: The answer is 9")
    '8'
    >>> extract_answer("The answer is 3,4"), extract_answer("The answer is 1,234,567")
    ('4', '1234567')
    >>> extract_answer("I don't know") is None
    True
    """
    text = text.split("Question:")[0].replace("$", "")
    for pattern in (_ANSWER_IS, _ANSWER_HASHES):
        match = pattern.search(text)
        if match:
            return normalize_number(match.group(1))
    numbers = _ANY_NUM.findall(text)
    return normalize_number(numbers[-1]) if numbers else None


def format_question(question: str) -> str:
    """One user turn of the protocol."""
    return f"Question: {question}\nLet's think step by step\nAnswer:"
