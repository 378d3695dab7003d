"""The WebShop prompt protocol of the reference (``benchmarks/webshop/eval.py``), shared by the
evaluator and the scripted recipe.

Chat with the model's template: the reference's system message (verbatim), then its user prompt
(verbatim): the instruction, the available actions (``search[<your query>]`` on the search page,
then one ``click[…]`` per clickable, each indented two spaces), its rules and the last
``history_window`` (5) observation/action pairs, ending ``Observation n: …\\nAction n:``. Greedy, at
most 100 tokens, stop ``"\\n"``. The reply is cleaned as the reference does (an ``Action:`` prefix
dropped, ``choose[`` mapped to ``click[``).

``multi_turn`` (the fixture's prompt) keeps the same words in another shape: the first user turn is
the reference's prompt for the first page, then each action is an assistant turn and each page it
led to a user turn with its own available actions. Each step's conversation then extends the last,
so an episode's steps pack into one training sequence (the reference's prompt puts the actions
before the history, so its steps never extend one another).

Agent side: imports nothing from the task's grader side.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent_kit.protocol import ChatMessage
from agent_kit.rollout import Episode

#: The reference's system message and user prompt head, verbatim (rdagent 1.0.0 wheel,
#: ``rdagent/scenarios/rl/autorl_bench/benchmarks/webshop/eval.py``:
#: ``system_msg``/``_vllm_sys_msg`` and ``build_react_prompt``).
SYSTEM = (
    "You are a helpful shopping assistant browsing an e-commerce website. "
    "Given a user instruction, current observation, and available actions, "
    "pick the best action to find and purchase a matching product. "
    "Output ONLY one action (e.g., 'search[red shoes]', 'click[buy now]') "
    "with NO extra text, NO explanation."
)
PROMPT_HEAD = """You are shopping on an e-commerce website. Find and purchase a product matching the user's instruction.

Instruction: {instruction}

Available actions:
{available_actions}

Rules:
- Output ONLY one action from the available actions list above.
- For search, use: search[your query]
- For clicking, use: click[exact text from the list]
- Do NOT output anything other than the action.

Now it's your turn:
"""  # noqa: E501 - verbatim


def instruction_of(observation: str) -> str:
    """The instruction text of a WebShop page.

    >>> instruction_of("WebShop [SEP] Instruction: [SEP] i need a red mug [SEP] Search")
    'i need a red mug'
    """
    _, _, rest = observation.partition("Instruction: [SEP] ")
    return rest.split(" [SEP] ", 1)[0].strip()


def clean_action(output: str) -> str:
    """The action of a reply: first line, ``Action:``/``Action n:`` prefix removed, ``choose[`` ->
    ``click[``.

    >>> clean_action("Action 3: choose[Large]\\nmore")
    'click[Large]'
    """
    line = output.strip().split("\n", 1)[0].strip()
    if line.lower().startswith("action"):
        line = line.split(":", 1)[1].strip() if ":" in line else line
    return line.replace("choose[", "click[")


def render_messages(
    first_observation: str,
    history: list[tuple[str, str]],
    current: str,
    actions: list[str],
    window: int,
) -> list[ChatMessage]:
    """The conversation for the next action: the reference's prompt, the last ``window`` steps
    shown.

    Each shown step pairs an action with the page it was taken on (the reference paired it with the
    page it led to, so the first page vanished after one step and the current page was shown twice).

    >>> user = render_messages("Instruction: [SEP] a mug [SEP] Search",
    ...                        [("search[mug]", "Results")], "Results",
    ...                        ["click[b01]"], 5)[1]["content"]
    >>> user.split("Now it's your turn:\\n")[1]  # doctest: +NORMALIZE_WHITESPACE
    '\\nObservation 1: Instruction: [SEP] a mug [SEP] Search\\nAction 1:
    search[mug]\\n\\nObservation 2: Results\\nAction 2:'
    """
    observations = [first_observation] + [obs for _, obs in history]
    steps = list(zip(observations[:-1], [a for a, _ in history], strict=True))
    start = max(0, len(steps) - window)
    user = PROMPT_HEAD.format(
        instruction=instruction_of(first_observation),
        available_actions="\n".join(f"  {a}" for a in actions),
    )
    for i, (obs, act) in enumerate(steps[start:], start=start + 1):
        user += f"\nObservation {i}: {obs}\n" + f"Action {i}: {act}\n"
    n = len(steps) + 1
    user += f"\nObservation {n}: {current}\n" + f"Action {n}:"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def render_turns(
    first_observation: str,
    first_actions: list[str],
    steps: list[tuple[str, str, list[str]]],
    window: int,
) -> list[ChatMessage]:
    """The multi-turn conversation for the next action: the reference's prompt for the first page,
    then the last ``window`` steps, each an assistant turn (the action) and a user turn (the page it
    led to, with that page's available actions).

    Args:
        first_observation: The first page.
        first_actions: The first page's available actions.
        steps: ``(action, page it led to, that page's available actions)`` per step so far.
        window: Steps shown at most (older ones are dropped, the first user turn stays).

    >>> turns = render_turns("Instruction: [SEP] a mug [SEP] Search", ["search[<your query>]"],
    ...                      [("search[mug]", "Results", ["click[b01]"])], 5)
    >>> [t["role"] for t in turns], turns[1]["content"].split("Now it's your turn:\\n")[1]
    ... # doctest: +NORMALIZE_WHITESPACE
    (['system', 'user', 'assistant', 'user'], '\\nObservation 1: Instruction: [SEP] a mug [SEP]
    Search\\nAction 1:')
    >>> turns[3]["content"]
    'Observation 2: Results\\nAvailable actions:\\n  click[b01]\\nAction 2:'
    """

    def listed(actions: list[str]) -> str:
        return "\n".join(f"  {a}" for a in actions)

    user = PROMPT_HEAD.format(
        instruction=instruction_of(first_observation), available_actions=listed(first_actions)
    )
    messages: list[ChatMessage] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"{user}\nObservation 1: {first_observation}\nAction 1:"},
    ]
    start = max(0, len(steps) - window)
    for n, (action, page, actions) in enumerate(steps[start:], start=start + 2):
        messages.append({"role": "assistant", "content": action})
        user = f"Observation {n}: {page}\nAvailable actions:\n{listed(actions)}\nAction {n}:"
        messages.append({"role": "user", "content": user})
    return messages


@dataclass
class WebShopProtocol:
    """:class:`agent_kit.rollout.EpisodeProtocol` for WebShop (``multi_turn``:
    :func:`render_turns`)."""

    max_new_tokens: int = 100
    history_window: int = 5
    multi_turn: bool = False
    mode: str = "chat"
    stop: list[str] | None = None

    def __post_init__(self) -> None:
        """Stop at the end of the action line, like the reference."""
        if self.stop is None:
            self.stop = ["\n"]

    def render(self, episode: Episode) -> list[ChatMessage]:
        """The conversation for the episode's next action."""
        current = episode.current
        if self.multi_turn:
            steps = [
                (action, result.observation, result.admissible_actions)
                for action, result in zip(episode.actions, episode.results, strict=True)
            ]
            return render_turns(
                episode.first.observation,
                episode.first.admissible_actions,
                steps,
                self.history_window,
            )
        return render_messages(
            episode.first.observation,
            episode.history,
            current.observation,
            current.admissible_actions,
            self.history_window,
        )

    def parse(self, episode: Episode, output: str) -> str:
        """The env action of a reply."""
        return clean_action(output)
