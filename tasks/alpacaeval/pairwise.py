"""AlpacaEval's pairwise comparison prompt, output-order randomisation and answer parsing.

The prompt is AlpacaEval 2.0's ``alpaca_eval_clf_gpt4_turbo/alpaca_eval_clf.txt`` (the prompt of
its default annotator ``weighted_alpaca_eval_gpt4_turbo``), verbatim, as a system and a user chat
message. The judge answers with one model identifier: ``m`` (the first output shown) or ``M``
(the second). AlpacaEval reads that choice from token log-probabilities; we read the answer text,
which works with any chat-completions endpoint (reasoning models such as GPT-5.2 return no
log-probabilities) and is what its binarised variant ``alpaca_eval_clf_gpt4_turbo`` keeps anyway.

As in AlpacaEval, the order in which the two outputs are shown is randomised per instruction
(seeded on the instruction), and the preference is mapped back: 1 = reference (``output_1``)
better, 2 = model (``output_2``) better. The evaluator passes :func:`require_choice` to the judge
client, so a reply that is not ``m`` or ``M`` (empty included) raises ``JudgeError`` and is never
cached or scored; AlpacaEval would drop it as a NaN preference, which silently shrinks the eval set
(and an empty reply from a thinking judge out of tokens would go unnoticed).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from autorl.engine.base import ChatMessage

SYSTEM_PROMPT = (
    "You are a highly efficient assistant, who evaluates and selects the best large language "
    "model (LLMs) based "
    "on the quality of their responses to a given instruction. This process will be used to "
    "create a leaderboard "
    "reflecting the most accurate and human-preferred answers."
)

USER_TEMPLATE = """I require a leaderboard for various large language models. I'll provide you with prompts given to these models and their corresponding outputs. Your task is to assess these responses, and select the model that produces the best output from a human perspective.

## Instruction

{{
    "instruction": \"\"\"{instruction}\"\"\",
}}

## Model Outputs

Here are the unordered outputs from the models. Each output is associated with a specific model, identified by a unique model identifier.

{{
    {{
        "model_identifier": "m",
        "output": \"\"\"{output_1}\"\"\"
    }},
    {{
        "model_identifier": "M",
        "output": \"\"\"{output_2}\"\"\"
    }}
}}

## Task

Evaluate the models based on the quality and relevance of their outputs, and select the model that generated the best output. Answer by providing the model identifier of the best model. We will use your output as the name of the best model, so make sure your output only contains one of the following model identifiers and nothing else (no quotes, no spaces, no new lines, ...): m or M.

## Best Model Identifier"""  # noqa: E501

# The fixed text between the fields, used to read a rendered prompt back (the local judge does).
_PARSE = re.compile(
    r'"instruction": """(?P<instruction>.*)""",\n}\n\n## Model Outputs.*?'
    r'"model_identifier": "m",\n        "output": """(?P<first>.*)"""\n    },\n    {\n'  # noqa: E501
    r'        "model_identifier": "M",\n        "output": """(?P<second>.*)"""\n    }\n}\n\n## Task',  # noqa: E501
    re.DOTALL,
)


@dataclass(frozen=True)
class Comparison:
    """One pairwise judge request.

    Attributes:
        messages: The chat sent to the judge.
        switched: The model's output is shown first (as ``m``).
    """

    messages: list[ChatMessage]
    switched: bool


def is_switched(instruction: str, seed: int = 0) -> bool:
    """Whether the model's output is shown first for this instruction (deterministic, ~half the
    time).

    >>> is_switched("Name three primes.") == is_switched("Name three primes.")
    True
    """
    digest = hashlib.sha256(f"{seed}:{instruction}".encode()).digest()
    return digest[0] % 2 == 1


def comparison(instruction: str, reference: str, model_output: str, *, seed: int = 0) -> Comparison:
    """The judge request comparing ``model_output`` with ``reference`` on ``instruction``."""
    switched = is_switched(instruction, seed)
    first, second = (model_output, reference) if switched else (reference, model_output)
    user = USER_TEMPLATE.format(instruction=instruction, output_1=first, output_2=second)
    return Comparison(
        [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}], switched
    )


def parse_choice(answer: str) -> str | None:
    """``"m"`` or ``"M"`` from the judge's answer, tolerating quotes and whitespace; else ``None``.

    >>> parse_choice(" M\\n"), parse_choice("'m'"), parse_choice("Model m"), parse_choice("")
    ('M', 'm', None, None)
    """
    cleaned = answer.strip().strip("\"'`*. ").strip()
    return cleaned if cleaned in ("m", "M") else None


def require_choice(answer: str) -> str:
    """The choice in the judge's answer, for the judge client's ``parse`` check.

    >>> require_choice(" M\\n")
    'M'
    >>> require_choice("I prefer the first one")
    Traceback (most recent call last):
    ...
    ValueError: expected the model identifier 'm' or 'M' and nothing else

    Raises:
        ValueError: The answer is not ``m`` or ``M`` (:func:`parse_choice`).
    """
    choice = parse_choice(answer)
    if choice is None:
        raise ValueError("expected the model identifier 'm' or 'M' and nothing else")
    return choice


def preference(answer: str, switched: bool) -> float:
    """AlpacaEval preference from the judge's answer: 1 reference better, 2 model better, NaN
    unusable.

    >>> preference("m", False), preference("m", True), preference("M", False)
    (1.0, 2.0, 2.0)
    """
    choice = parse_choice(answer)
    if choice is None:
        return float("nan")
    first_better = choice == "m"
    model_better = first_better if switched else not first_better
    return 2.0 if model_better else 1.0


def read_prompt(user_message: str) -> tuple[str, str, str] | None:
    """``(instruction, first output, second output)`` from a rendered user message, or ``None``."""
    match = _PARSE.search(user_message)
    if match is None:
        return None
    return match.group("instruction"), match.group("first"), match.group("second")
