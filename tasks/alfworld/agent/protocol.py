"""The ALFWorld ReAct protocol of the reference (its port of ReAct's ``alfworld.ipynb``).

Prompt = ``"Interact with a household to solve a task. Here are two examples.\\n"`` + the task
type's examples 1 and 0 + ``"\\nHere is the task.\\n"`` + the reset observation + ``"\\n>"``, then
one ``" {action}\\n{observation}\\n>"`` per step. Raw completion, greedy, stop ``"\\n"``; the action
is the stripped first line (a leading ``"> "`` removed). Prompts longer than the model's window are
truncated the way the reference's later fix does it: the examples go first, then the oldest steps;
the task statement and the latest steps always stay.

Agent side: shared by the evaluator and the scripted recipe; imports nothing from the task's
grader side.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent_kit.rollout import Episode

from .shots import SHOTS

HEADER = "Interact with a household to solve a task. Here are two examples.\n"
TASK_INTRO = "\nHere is the task.\n"


def examples(task_type: str) -> str:
    """The two in-context examples of a task type (``react_<type>_1`` then ``react_<type>_0``)."""
    return SHOTS[f"react_{task_type}_1"] + SHOTS[f"react_{task_type}_0"]


def step_text(action: str, observation: str) -> str:
    """One step as it is appended to the prompt.

    >>> step_text("go to desk 1", "You arrive at desk 1.")
    ' go to desk 1\\nYou arrive at desk 1.\\n>'
    """
    return f" {action}\n{observation}\n>"


def render_prompt(
    task_type: str, first_observation: str, history: list[tuple[str, str]], max_chars: int | None
) -> str:
    """The full prompt of the next step, truncated to ``max_chars`` characters when given.

    >>> p = render_prompt("put", "Your task is to: put a pen in desk.",
    ...                   [("look", "You see a desk 1.")], 100)
    >>> p
    '\\nHere is the task.\\nYour task is to: put a pen in desk.\\n> look\\nYou see a desk 1.\\n>'
    """
    task = TASK_INTRO + first_observation + "\n>"
    steps = [step_text(a, o) for a, o in history]
    full = HEADER + examples(task_type) + task + "".join(steps)
    if max_chars is None or len(full) <= max_chars:
        return full
    # Drop the examples, then the oldest steps, until the prompt fits (the task always stays).
    kept = list(steps)
    while kept and len(task) + sum(map(len, kept)) > max_chars:
        kept.pop(0)
    return task + "".join(kept)


def parse_action(output: str) -> str:
    """The action in a raw generation: its first line, stripped, without a leading ``>``.

    >>> parse_action(" go to fridge 1\\nYou arrive")
    'go to fridge 1'
    >>> parse_action("> take apple 1 from countertop 1")
    'take apple 1 from countertop 1'
    """
    line = output.strip().split("\n", 1)[0].strip() if output.strip() else ""
    while line.startswith(">"):
        line = line[1:].strip()
    return line


@dataclass
class AlfworldProtocol:
    """:class:`agent_kit.rollout.EpisodeProtocol` for ALFWorld."""

    max_new_tokens: int = 100
    max_prompt_chars: int | None = None
    mode: str = "text"
    stop: list[str] | None = None

    def __post_init__(self) -> None:
        """Stop at the end of the action line, like the reference."""
        if self.stop is None:
            self.stop = ["\n"]

    def render(self, episode: Episode) -> str:
        """The prompt for the episode's next action."""
        task_type = str(episode.first.info["task_type"])
        return render_prompt(
            task_type, episode.first.observation, episode.history, self.max_prompt_chars
        )

    def parse(self, episode: Episode, output: str) -> str:
        """The env command of a generation."""
        return parse_action(output)
