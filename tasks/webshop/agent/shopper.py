"""A shopping expert for WebShop that sees only what the agent sees, and that ``small`` can imitate.

The built-in shop's ``info["expert_action"]`` knows the goal's product: it searches that product's
exact title (a brand the instruction never names) and clicks its id among look-alikes, so a policy
imitating it learns to guess. This expert decides every move from the page text alone, in moves
chosen for how fast a policy learns them (tasks/webshop/README.md, "What `small` learns here"): it
searches the instruction's product kind (``search[yoga mat]``), opens the first result, clicks each
option value the instruction names and buys (79 % of the default build's eval sessions). Searching
the kind with its attributes wins more (97 %; 100 % when opening the first result that has them
all), but after 450 packed SFT steps ``small`` got 14 of 40 such queries right, where it gets 30 of
40 kind queries and 36 of 40 first-result clicks after 150.

Agent side: used by the scripted recipe (``recipe.py``); no grader-side import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent_kit.rollout import Episode

from .protocol import instruction_of

SEP = " [SEP] "
_PRICE = re.compile(r"\$(\d+(?:\.\d+)?)")
_ASIN = re.compile(r"b[0-9a-z]{9}")


@dataclass(frozen=True)
class Wish:
    """What an instruction asks for: the product kind, its attributes and the option values."""

    kind: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]


def parse_wish(instruction: str) -> Wish:
    """Read an instruction of WebShop's template; anything else becomes a bare product phrase.

    >>> wish = parse_wish("i need a desk lamp that is dimmable and eye caring, with color: pink, "
    ...                   "and style: classic, and price lower than 30.00 dollars")
    >>> wish.kind, wish.attributes, wish.options
    ('desk lamp', ('dimmable', 'eye caring'), ('pink', 'classic'))
    >>> parse_wish("Find me a blue mug")
    Wish(kind='find me a blue mug', attributes=(), options=())
    """
    text = instruction.strip().lower()
    head = text.split(", with ", 1)[0].split(", and price", 1)[0]
    options = tuple(
        m.group(1).strip() for m in re.finditer(r"\w[\w ]*?: ([^,]+)", text[len(head) :])
    )
    head = re.sub(r"^i (?:need|want|am looking for) (?:an? |some )?", "", head)
    kind, _, attrs = head.partition(" that is ")
    attributes = tuple(a.strip() for a in attrs.split(" and ") if a.strip()) if attrs else ()
    return Wish(kind.strip(), attributes, options)


def listed_ids(observation: str) -> list[str]:
    """The ids of the products listed on a results page, in order (an id, then a title and a price).

    >>> listed_ids("Page 1 (Total results: 2) [SEP] B000000007 [SEP] Acme Mug [SEP] $12.5 [SEP] "
    ...            "B000000003 [SEP] x")
    ['b000000007']
    """
    parts = observation.split(SEP)
    return [
        part.strip().lower()
        for i, part in enumerate(parts[:-2])
        if _ASIN.fullmatch(part.strip().lower()) and _PRICE.fullmatch(parts[i + 2].strip())
    ]


def next_action(episode: Episode) -> str | None:
    """The expert's next action (``None``: the episode is over)."""
    current = episode.current
    if current.done:
        return None
    available = [a.lower() for a in current.admissible_actions]
    wish = parse_wish(
        instruction_of(current.observation) or instruction_of(episode.first.observation)
    )
    if any(a.startswith("search[") for a in available):
        return f"search[{wish.kind}]"
    if "click[buy now]" in available:
        clicked = set(episode.actions)
        for value in wish.options:
            action = f"click[{value}]"
            if action in available and action not in clicked:
                return action
        return "click[buy now]"
    listed = listed_ids(current.observation)
    if listed:
        return f"click[{listed[0]}]"
    return "click[< prev]" if "click[< prev]" in available else "click[back to search]"
