"""WebShop's data model and purchase reward (grader side: the built-in shop scores a purchase with
it).

Products and goals have the fields of WebShop's ``items_shuffle`` / ``items_ins_v2`` data that
the reward reads (``asin, name, Title, query, category, product_category, price, options,
Attributes, BulletPoints, Description``; goals: ``asin, instruction_text, attributes,
goal_options, price_upper``). :func:`get_reward` follows ``web_agent_site/engine/goal.py``:
``(attribute matches + option matches + price ok) / (attributes + options + 1) × r_type``. Two
stand-ins, because their models are not installable offline: thefuzz's ``token_set_ratio`` is
reimplemented with :mod:`difflib`, and spaCy's noun tagging of product names (for ``r_type``) is
replaced by the name's content words.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

Product = dict[str, Any]
Goal = dict[str, Any]
EXACT_MATCH_OPTS = ("size",)
_STOP = {
    "a",
    "an",
    "the",
    "and",
    "or",
    "for",
    "with",
    "of",
    "in",
    "on",
    "to",
    "by",
    "pack",
    "set",
    "&",
    "-",
}


def _tokens(text: str) -> list[str]:
    return re.sub(r"[^0-9a-z]+", " ", text.lower()).split()


def token_set_ratio(a: str, b: str) -> int:
    """thefuzz's ``token_set_ratio`` (0-100) with difflib's similarity ratio.

    >>> token_set_ratio("machine wash cotton", "cotton, machine wash")
    100
    >>> token_set_ratio("red", "blue") < 50
    True
    """
    t1, t2 = set(_tokens(a)), set(_tokens(b))
    inter = " ".join(sorted(t1 & t2))
    one = (inter + " " + " ".join(sorted(t1 - t2))).strip()
    two = (inter + " " + " ".join(sorted(t2 - t1))).strip()

    def ratio(x: str, y: str) -> float:
        return difflib.SequenceMatcher(None, x, y).ratio() if (x or y) else 0.0

    scores = [ratio(one, two)]
    if inter:
        scores += [ratio(inter, one), ratio(inter, two)]
    return round(100 * max(scores))


def _content_words(name: str) -> list[str]:
    return [t for t in _tokens(name) if t not in _STOP and not t.isdigit()]


def type_reward(product: Product, target: Product) -> float:
    """WebShop's ``r_type``: 1 for the same kind of product, down to 0 for an unrelated one."""
    query_match = product["query"] == target["query"]
    mine = {x.strip() for x in product["product_category"].split("›")}
    wanted = {x.strip() for x in target["product_category"].split("›")}
    category_match = len(mine & wanted) >= 2
    desired = _content_words(target["name"])
    title_score = (
        0.2
        if not desired
        else len(set(_content_words(product["name"])) & set(desired)) / len(desired)
    )
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type


def _in_text(value: str, product: Product) -> bool:
    value = value.lower()
    return (
        value in product["Title"].lower()
        or value in " ".join(product["BulletPoints"]).lower()
        or value in product["Description"].lower()
    )


def get_reward(
    product: Product, goal: Goal, target: Product, price: float, options: dict[str, str]
) -> dict[str, float]:
    """The purchase reward of buying ``product`` with ``options`` at ``price`` for ``goal``.

    Args:
        product: The product bought.
        goal: The goal (``attributes``, ``goal_options``, ``price_upper``).
        target: The goal's own product (its ``query``, ``name`` and ``product_category``).
        price: The price paid.
        options: Option type -> chosen value.

    Returns:
        ``reward`` (0-1) and its parts ``r_type, r_att, r_option, r_price``.
    """
    attrs = list(goal["attributes"])
    goal_options = [
        str(v).lower()
        for v in (
            goal["goal_options"].values()
            if isinstance(goal["goal_options"], dict)
            else goal["goal_options"]
        )
    ]
    num_attr = 0
    for g_attr in attrs:
        if any(
            token_set_ratio(p_attr, g_attr) > 85 for p_attr in product["Attributes"]
        ) or _in_text(g_attr, product):
            num_attr += 1
    num_opt = 0
    for kind, value in options.items():
        value = str(value).lower()
        if kind.lower() in EXACT_MATCH_OPTS:
            matched = value in goal_options
        else:
            matched = any(token_set_ratio(g, value) > 85 for g in goal_options)
        if matched or _in_text(value, product):
            num_opt += 1
    r_price = float(price <= goal["price_upper"]) if goal["price_upper"] > 0 else 0.0
    r_type = type_reward(product, target)
    total = (num_attr + num_opt + r_price) / (len(attrs) + len(goal_options) + 1) * r_type
    return {
        "reward": total,
        "r_type": r_type,
        "r_att": num_attr / max(1, len(attrs)),
        "r_option": num_opt / len(goal_options) if goal_options else 0.0,
        "r_price": r_price,
    }
