"""WebShop's data model and reward, and the generated fixture catalogue with its goals.

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
import random
import re
from typing import Any

Product = dict[str, Any]
Goal = dict[str, Any]
EXACT_MATCH_OPTS = ("size",)
PRICE_RANGE = [10.0 * i for i in range(1, 100)]
_STOP = {"a", "an", "the", "and", "or", "for", "with", "of", "in", "on", "to", "by", "pack", "set", "&", "-"}


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
    title_score = 0.2 if not desired else len(set(_content_words(product["name"])) & set(desired)) / len(desired)
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type


def _in_text(value: str, product: Product) -> bool:
    value = value.lower()
    return (value in product["Title"].lower() or value in " ".join(product["BulletPoints"]).lower()
            or value in product["Description"].lower())


def get_reward(product: Product, goal: Goal, target: Product, price: float, options: dict[str, str]) -> dict[str, float]:
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
    goal_options = [str(v).lower() for v in (goal["goal_options"].values() if isinstance(goal["goal_options"], dict) else goal["goal_options"])]
    num_attr = 0
    for g_attr in attrs:
        if any(token_set_ratio(p_attr, g_attr) > 85 for p_attr in product["Attributes"]) or _in_text(g_attr, product):
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
    return {"reward": total, "r_type": r_type, "r_att": num_attr / max(1, len(attrs)),
            "r_option": num_opt / len(goal_options) if goal_options else 0.0, "r_price": r_price}


# ---- the fixture catalogue -----------------------------------------------------------------

# (name, query, product_category, attribute pool, option kinds)
_KINDS: tuple[tuple[str, str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("t-shirt", "men's t-shirts", "Clothing › Men › Shirts", ("cotton", "machine wash", "slim fit", "short sleeve", "long sleeve"), ("color", "size")),
    ("running shoes", "running shoes", "Clothing › Shoes › Athletic", ("non slip", "rubber sole", "lightweight", "breathable", "memory foam"), ("color", "size")),
    ("hair extension", "hair extensions", "Beauty › Hair Care › Extensions", ("natural looking", "clip in", "long lasting", "heat resistant"), ("color", "length")),
    ("deodorant", "natural deodorant", "Beauty › Personal Care › Deodorants", ("sensitive skin", "aluminum free", "long lasting", "travel size"), ("scent", "size")),
    ("coffee maker", "coffee makers", "Home › Kitchen › Coffee", ("easy clean", "programmable", "stainless steel", "auto shut off"), ("color", "capacity")),
    ("phone case", "phone cases", "Electronics › Accessories › Cases", ("shockproof", "wireless charging", "slim", "scratch resistant"), ("color", "model")),
    ("backpack", "laptop backpacks", "Bags › Backpacks › Laptop", ("water resistant", "usb charging port", "anti theft", "lightweight"), ("color", "size")),
    ("yoga mat", "yoga mats", "Sports › Fitness › Yoga", ("non slip", "extra thick", "eco friendly", "easy clean"), ("color", "thickness")),
    ("water bottle", "water bottles", "Sports › Outdoor › Hydration", ("bpa free", "leak proof", "stainless steel", "dishwasher safe"), ("color", "capacity")),
    ("desk lamp", "led desk lamps", "Home › Lighting › Lamps", ("dimmable", "usb charging port", "eye caring", "touch control"), ("color", "style")),
    ("green tea", "green tea", "Grocery › Beverages › Tea", ("gluten free", "organic", "caffeine free", "non gmo"), ("flavor", "size")),
    ("dog bed", "dog beds", "Pets › Dogs › Beds", ("machine washable", "orthopedic", "waterproof", "non slip"), ("color", "size")),
)
_OPTION_VALUES = {
    "color": ("black", "white", "navy blue", "red", "grey", "green", "pink", "beige"),
    "size": ("small", "medium", "large", "x-large", "3 ounce (pack of 1)", "2 pack"),
    "length": ("14 inch", "18 inch", "22 inch"), "scent": ("bright citrus", "lavender", "unscented"),
    "capacity": ("12 cup", "20 oz", "32 oz", "1 liter"), "model": ("iphone 13", "iphone 14", "galaxy s22"),
    "thickness": ("1/4 inch", "1/2 inch"), "style": ("modern", "classic"), "flavor": ("jasmine", "mint", "lemon"),
}
_BRANDS = ("Acme", "Zephyr", "Northwind", "Lumen", "Brisa", "Kestrel", "Orchard", "Vela", "Tidal", "Fjord", "Mosaic", "Quill")


def generate_catalogue(rng: random.Random, size: int) -> list[Product]:
    """``size`` products over a dozen product kinds, with WebShop's product fields."""
    products = []
    for index in range(size):
        name, query, category, pool, option_kinds = _KINDS[index % len(_KINDS)]
        brand = rng.choice(_BRANDS)
        attrs = sorted(rng.sample(pool, rng.randint(2, min(3, len(pool)))))
        options = {k: sorted(rng.sample(_OPTION_VALUES[k], rng.randint(2, min(3, len(_OPTION_VALUES[k]))))) for k in option_kinds}
        price = round(rng.uniform(5, 80), 2)
        title = f"{brand} {name.title()} - {', '.join(a.title() for a in attrs)}"
        products.append({
            "asin": f"B0{index:08d}"[:10].upper(), "name": f"{brand} {name}", "Title": title, "query": query,
            "category": category.split(" › ")[0].lower(), "product_category": category, "price": price,
            "options": options, "Attributes": attrs,
            "BulletPoints": [f"{a.capitalize()} {name}" for a in attrs] + [f"Made by {brand}"],
            "Description": f"This {name} by {brand} is {' and '.join(attrs)}.",
        })
    return products


def generate_goal(rng: random.Random, product: Product) -> Goal:
    """A synthetic WebShop goal for ``product`` (attributes, one value per option, a price limit)."""
    attrs = sorted(rng.sample(product["Attributes"], rng.randint(1, min(2, len(product["Attributes"])))))
    goal_options = {k: rng.choice(v) for k, v in sorted(product["options"].items())}
    upper = sorted(rng.sample([p for p in PRICE_RANGE if p > product["price"]][:4], 2))[1]
    kind = product["name"].split(" ", 1)[1]
    option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
    text = f"i need a {kind} that is {' and '.join(attrs)}, with {option_text}, and price lower than {upper:.2f} dollars"
    return {"asin": product["asin"], "instruction_text": text, "attributes": attrs, "goal_options": goal_options,
            "price_upper": upper}
