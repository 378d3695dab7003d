"""Hostile chat templates and generation settings, and what a scored outcome predicted: shared by
the hostile-submission tests (through the grading API) and the decoding tests (on the engine)."""

from __future__ import annotations

from typing import Any

from autorl.engine.chat_render import RenderLimits
from autorl.grading.scoring import ScoreOutcome

# A short render limit, so that a looping template fails within seconds.
LIMITS = RenderLimits(call_timeout_s=4.0, budget_s=30.0)

RAISING = "{{ raise_exception(messages | map(attribute='content') | join(' || ')) }}"
LOOPING = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
HUGE = "{{ 'x' * 3000000 }}"

HOSTILE_GENERATION = {
    "num_beams": 8,
    "min_new_tokens": 48,
    "do_sample": True,
    "temperature": 5.0,
    "repetition_penalty": 3.0,
}


def predictions(outcome: ScoreOutcome) -> list[Any]:
    """The model's answers in a scored outcome's details, in order."""
    return predictions_of(outcome.details)


def predictions_of(details: dict[str, Any]) -> list[Any]:
    """The model's answers in a submission's recorded details, in order."""
    return [sample["prediction"] for sample in details["samples"]]
