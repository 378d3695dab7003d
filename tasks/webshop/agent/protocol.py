"""The WebShop prompt protocol of the reference (``benchmarks/webshop/eval.py``), shared by the
evaluator and the scripted recipe.

Chat with the model's template: a system message asking for one action only, then a user turn with
the instruction, the available actions (``search[<your query>]`` on the search page, else one
``click[…]`` per clickable), the rules and the last ``history_window`` (5) observation/action pairs,
ending ``Observation n: …\\nAction n:``. Greedy, at most 100 tokens, stop ``"\\n"``. The reply is
cleaned as the reference does (an ``Action:`` prefix dropped, ``choose[`` mapped to ``click[``).

Agent side: imports nothing from the task's grader side.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent_kit.protocol import ChatMessage
from agent_kit.rollout import Episode

SYSTEM = ("You are a helpful shopping assistant on an e-commerce website. Output ONLY one action "
          "(e.g., 'search[red shoes]', 'click[buy now]') and nothing else.")
RULES = ("Rules:\n- search[...] works only on the search page.\n- click[...] must name one of the available "
         "actions exactly.\n- Choose the options the instruction asks for (size, color, ...) before clicking buy now.\n"
         "- Buy one product that matches the instruction and is within the price limit.")


def instruction_of(observation: str) -> str:
    """The instruction text of a WebShop page.

    >>> instruction_of("WebShop [SEP] Instruction: [SEP] i need a red mug [SEP] Search")
    'i need a red mug'
    """
    _, _, rest = observation.partition("Instruction: [SEP] ")
    return rest.split(" [SEP] ", 1)[0].strip()


def clean_action(output: str) -> str:
    """The action of a reply: first line, ``Action:``/``Action n:`` prefix removed, ``choose[`` -> ``click[``.

    >>> clean_action("Action 3: choose[Large]\\nmore")
    'click[Large]'
    """
    line = output.strip().split("\n", 1)[0].strip()
    if line.lower().startswith("action"):
        line = line.split(":", 1)[1].strip() if ":" in line else line
    return line.replace("choose[", "click[")


def render_messages(first_observation: str, history: list[tuple[str, str]], current: str, actions: list[str],
                    window: int) -> list[ChatMessage]:
    """The conversation for the next action (the last ``window`` steps are shown)."""
    observations = [first_observation] + [obs for _, obs in history]
    steps = list(zip(observations[:-1], [a for a, _ in history], strict=True))
    start = max(0, len(steps) - window)
    lines = [f"Observation {i + 1}: {obs}\nAction {i + 1}: {act}" for i, (obs, act) in enumerate(steps) if i >= start]
    n = len(steps) + 1
    user = (f"You are shopping on an e-commerce website. Find and buy the product that matches the instruction.\n\n"
            f"Instruction: {instruction_of(first_observation)}\n\nAvailable actions:\n" + "\n".join(actions) +
            f"\n\n{RULES}\n\nNow it's your turn:\n" + "\n".join(lines + [f"Observation {n}: {current}\nAction {n}:"]))
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


@dataclass
class WebShopProtocol:
    """:class:`agent_kit.rollout.EpisodeProtocol` for WebShop."""

    max_new_tokens: int = 100
    history_window: int = 5
    mode: str = "chat"
    stop: list[str] | None = None

    def __post_init__(self) -> None:
        """Stop at the end of the action line, like the reference."""
        if self.stop is None:
            self.stop = ["\n"]

    def render(self, episode: Episode) -> list[ChatMessage]:
        """The conversation for the episode's next action."""
        current = episode.current
        return render_messages(episode.first.observation, episode.history, current.observation,
                               current.admissible_actions, self.history_window)

    def parse(self, episode: Episode, output: str) -> str:
        """The env action of a reply."""
        return clean_action(output)
