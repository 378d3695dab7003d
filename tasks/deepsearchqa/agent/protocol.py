"""The DeepSearchQA ReAct protocol of the reference, with its stop-string bug fixed.

Raw completion (no chat template): :data:`SYSTEM_PROMPT`, then ``"\\n\\nQuestion: …\\nAnswer type:
…\\n\\nThought:"``. Each step the model writes a thought and an ``Action: search[query]`` or
``Action: answer[…]`` line; generation stops at ``"\\nObservation:"`` or ``"\\nThought:"``. The
reference also stopped at ``"\\nAction:"``, which cut every step before its action, so search
never ran; here the action line is kept and parsed from this step's output only. After a search
the prompt continues ``"\\nObservation: <results>\\nThought:"``. Greedy, at most 256 tokens, at most
6 steps; a step without an action gets the env's "Invalid action" observation.

Agent side: shared by the evaluator and the scripted recipe; imports nothing from the task's grader
side.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent_kit.rollout import Episode

#: The reference's ``REACT_SYSTEM_PROMPT``, verbatim (rdagent 1.0.0 wheel,
#: ``rdagent/scenarios/rl/autorl_bench/benchmarks/deepsearchqa/eval.py``; trailing newline
#: included).
SYSTEM_PROMPT = """You are a research assistant that answers questions by searching the web.

You must follow this format strictly:
Thought: [your reasoning]
Action: search[your search query]   <- to search the web
  OR
Action: answer[Paris]   <- to give final answer

Rules:
- Always start with a Thought
- Use search[] to find information
- Use answer[] ONLY when you have enough information
- For Set Answer questions, list all items separated by commas
- Be concise and factual
"""
STOP = ["\nObservation:", "\nThought:"]
_ACTION = re.compile(r"Action:\s*(search|answer)\[(.+?)\]", re.DOTALL)


def first_prompt(question_observation: str) -> str:
    """The prompt before the first step (the env's first observation holds question and answer
    type)."""
    return f"{SYSTEM_PROMPT}\n\n{question_observation}\n\nThought:"


def parse_step(output: str) -> tuple[str, str]:
    """``(action, text kept in the transcript)`` of one step's output.

    The kept text is the step's output up to its action, stripped, after one space (the reference
    appends ``f" {generated}"`` of the stripped output).

    >>> parse_step("I need the year.\\nAction: search[Varnholm founded]\\nObservation: x")
    ('search[Varnholm founded]', ' I need the year.\\nAction: search[Varnholm founded]')
    >>> parse_step("  no idea\\n")
    ('no idea', ' no idea')
    """
    match = _ACTION.search(output)
    if match is None:
        return output.strip(), f" {output.strip()}"
    return f"{match.group(1)}[{match.group(2).strip()}]", f" {output[: match.end()].strip()}"


def render_prompt(question_observation: str, steps: list[tuple[str, str]]) -> str:
    """The prompt after ``steps`` (``(kept step text, observation)`` pairs)."""
    text = first_prompt(question_observation)
    for kept, observation in steps:
        text += f"{kept}\nObservation: {observation}\nThought:"
    return text


@dataclass
class DeepSearchProtocol:
    """:class:`agent_kit.rollout.EpisodeProtocol` for DeepSearchQA."""

    max_new_tokens: int = 256
    mode: str = "text"
    stop: list[str] | None = None

    def __post_init__(self) -> None:
        """The fixed stop strings (no ``"\\nAction:"``)."""
        if self.stop is None:
            self.stop = list(STOP)

    def render(self, episode: Episode) -> str:
        """The prompt for the episode's next step."""
        kept = [parse_step(out)[1] for out in episode.raw_outputs]
        observations = [obs for _, obs in episode.history]
        return render_prompt(episode.first.observation, list(zip(kept, observations, strict=True)))

    def parse(self, episode: Episode, output: str) -> str:
        """The env action of a step's output."""
        return parse_step(output)[0]
