"""A shopping expert for WebShop that sees only what the agent sees.

The built-in shop's ``info["expert_action"]`` knows the goal's product: it searches that product's
exact title (a brand the instruction never names) and clicks its id among look-alikes, so a policy
imitating it learns to guess. This expert decides every move from the page text alone: it searches
the instruction's product and attributes, opens the first listed product whose title has every
attribute and whose price is under the limit (else the one with the most attributes), clicks each
option value the instruction names and buys. Each move copies or compares text the prompt shows,
which a policy can learn.

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
    """What an instruction asks for: the product phrase (with its attributes), the attributes, the
    option values and the price limit (``None``: not stated)."""

    product: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]
    price_upper: float | None


def parse_wish(instruction: str) -> Wish:
    """Read an instruction of WebShop's template; anything else becomes a bare product phrase.

    >>> wish = parse_wish("i need a desk lamp that is dimmable and eye caring, with color: pink, and style: classic, "
    ...                   "and price lower than 30.00 dollars")
    >>> wish.product, wish.attributes, wish.options, wish.price_upper
    ('desk lamp dimmable eye caring', ('dimmable', 'eye caring'), ('pink', 'classic'), 30.0)
    >>> parse_wish("Find me a blue mug")
    Wish(product='find me a blue mug', attributes=(), options=(), price_upper=None)
    """
    text = instruction.strip().lower()
    price = re.search(r"price lower than (\d+(?:\.\d+)?) dollars", text)
    head = text.split(", with ", 1)[0].split(", and price", 1)[0]
    options = tuple(m.group(1).strip() for m in re.finditer(r"\w[\w ]*?: ([^,]+)", text[len(head):]))
    head = re.sub(r"^i (?:need|want|am looking for) (?:an? |some )?", "", head)
    kind, _, attrs = head.partition(" that is ")
    attributes = tuple(a.strip() for a in attrs.split(" and ") if a.strip()) if attrs else ()
    return Wish(" ".join([kind.strip(), *attributes]), attributes, options, float(price.group(1)) if price else None)


def _results(observation: str) -> list[tuple[str, str, float]]:
    """(id, title, price) of each product listed on a results page."""
    parts = observation.split(SEP)
    listed = []
    for i, part in enumerate(parts[:-2]):
        price = _PRICE.fullmatch(parts[i + 2].strip())
        if _ASIN.fullmatch(part.strip().lower()) and price:
            listed.append((part.strip().lower(), parts[i + 1].lower(), float(price.group(1))))
    return listed


def _pick(wish: Wish, listed: list[tuple[str, str, float]]) -> str:
    """The first product with every attribute under the price limit, else the one matching the most."""
    def score(item: tuple[str, str, float]) -> tuple[int, bool]:
        _, title, price = item
        return sum(a in title for a in wish.attributes), wish.price_upper is None or price < wish.price_upper
    best = max(listed, key=score)  # max keeps the first of equals: the shop's ranking breaks ties
    return best[0]


def next_action(episode: Episode) -> str | None:
    """The expert's next action (``None``: the episode is over)."""
    current = episode.current
    if current.done:
        return None
    available = [a.lower() for a in current.admissible_actions]
    wish = parse_wish(instruction_of(current.observation) or instruction_of(episode.first.observation))
    if any(a.startswith("search[") for a in available):
        return f"search[{wish.product}]"
    if "click[buy now]" in available:
        clicked = {a for a, _ in episode.history}
        for value in wish.options:
            action = f"click[{value}]"
            if action in available and action not in clicked:
                return action
        return "click[buy now]"
    listed = _results(current.observation)
    if listed:
        return f"click[{_pick(wish, listed)}]"
    return "click[< prev]" if "click[< prev]" in available else "click[back to search]"
