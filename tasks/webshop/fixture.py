"""The webshop fixture generator: a product catalogue and synthetic goals in WebShop's style.

Grader side: deterministic in its seed, so it can rebuild the private split; no agent imports it.
Products and goals carry the fields the reward reads (:mod:`.reward`); goal texts follow WebShop's
instruction style (``i need a <kind> that is <attributes>, with <option>: <value>, and price lower
than <limit> dollars``).
"""

from __future__ import annotations

import random

from .reward import Goal, Product

PRICE_RANGE = [10.0 * i for i in range(1, 100)]

# (name, query, product_category, attribute pool, option kinds)
_KINDS: tuple[tuple[str, str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "t-shirt",
        "men's t-shirts",
        "Clothing › Men › Shirts",
        ("cotton", "machine wash", "slim fit", "short sleeve", "long sleeve"),
        ("color", "size"),
    ),
    (
        "running shoes",
        "running shoes",
        "Clothing › Shoes › Athletic",
        ("non slip", "rubber sole", "lightweight", "breathable", "memory foam"),
        ("color", "size"),
    ),
    (
        "hair extension",
        "hair extensions",
        "Beauty › Hair Care › Extensions",
        ("natural looking", "clip in", "long lasting", "heat resistant"),
        ("color", "length"),
    ),
    (
        "deodorant",
        "natural deodorant",
        "Beauty › Personal Care › Deodorants",
        ("sensitive skin", "aluminum free", "long lasting", "travel size"),
        ("scent", "size"),
    ),
    (
        "coffee maker",
        "coffee makers",
        "Home › Kitchen › Coffee",
        ("easy clean", "programmable", "stainless steel", "auto shut off"),
        ("color", "capacity"),
    ),
    (
        "phone case",
        "phone cases",
        "Electronics › Accessories › Cases",
        ("shockproof", "wireless charging", "slim", "scratch resistant"),
        ("color", "model"),
    ),
    (
        "backpack",
        "laptop backpacks",
        "Bags › Backpacks › Laptop",
        ("water resistant", "usb charging port", "anti theft", "lightweight"),
        ("color", "size"),
    ),
    (
        "yoga mat",
        "yoga mats",
        "Sports › Fitness › Yoga",
        ("non slip", "extra thick", "eco friendly", "easy clean"),
        ("color", "thickness"),
    ),
    (
        "water bottle",
        "water bottles",
        "Sports › Outdoor › Hydration",
        ("bpa free", "leak proof", "stainless steel", "dishwasher safe"),
        ("color", "capacity"),
    ),
    (
        "desk lamp",
        "led desk lamps",
        "Home › Lighting › Lamps",
        ("dimmable", "usb charging port", "eye caring", "touch control"),
        ("color", "style"),
    ),
    (
        "green tea",
        "green tea",
        "Grocery › Beverages › Tea",
        ("gluten free", "organic", "caffeine free", "non gmo"),
        ("flavor", "size"),
    ),
    (
        "dog bed",
        "dog beds",
        "Pets › Dogs › Beds",
        ("machine washable", "orthopedic", "waterproof", "non slip"),
        ("color", "size"),
    ),
)
_OPTION_VALUES = {
    "color": ("black", "white", "navy blue", "red", "grey", "green", "pink", "beige"),
    "size": ("small", "medium", "large", "x-large", "3 ounce (pack of 1)", "2 pack"),
    "length": ("14 inch", "18 inch", "22 inch"),
    "scent": ("bright citrus", "lavender", "unscented"),
    "capacity": ("12 cup", "20 oz", "32 oz", "1 liter"),
    "model": ("iphone 13", "iphone 14", "galaxy s22"),
    "thickness": ("1/4 inch", "1/2 inch"),
    "style": ("modern", "classic"),
    "flavor": ("jasmine", "mint", "lemon"),
}
_BRANDS = (
    "Acme",
    "Zephyr",
    "Northwind",
    "Lumen",
    "Brisa",
    "Kestrel",
    "Orchard",
    "Vela",
    "Tidal",
    "Fjord",
    "Mosaic",
    "Quill",
)


def generate_catalogue(rng: random.Random, size: int) -> list[Product]:
    """``size`` products over a dozen product kinds, with WebShop's product fields."""
    products = []
    for index in range(size):
        name, query, category, pool, option_kinds = _KINDS[index % len(_KINDS)]
        brand = rng.choice(_BRANDS)
        attrs = sorted(rng.sample(pool, rng.randint(2, min(3, len(pool)))))
        options = {
            k: sorted(rng.sample(_OPTION_VALUES[k], rng.randint(2, min(3, len(_OPTION_VALUES[k])))))
            for k in option_kinds
        }
        price = round(rng.uniform(5, 80), 2)
        title = f"{brand} {name.title()} - {', '.join(a.title() for a in attrs)}"
        products.append(
            {
                "asin": f"B0{index:08d}"[:10].upper(),
                "name": f"{brand} {name}",
                "Title": title,
                "query": query,
                "category": category.split(" › ")[0].lower(),
                "product_category": category,
                "price": price,
                "options": options,
                "Attributes": attrs,
                "BulletPoints": [f"{a.capitalize()} {name}" for a in attrs] + [f"Made by {brand}"],
                "Description": f"This {name} by {brand} is {' and '.join(attrs)}.",
            }
        )
    return products


def generate_goal(rng: random.Random, product: Product) -> Goal:
    """A synthetic WebShop goal for ``product`` (attributes, one value per option, a price
    limit)."""
    attrs = sorted(
        rng.sample(product["Attributes"], rng.randint(1, min(2, len(product["Attributes"]))))
    )
    goal_options = {k: rng.choice(v) for k, v in sorted(product["options"].items())}
    upper = sorted(rng.sample([p for p in PRICE_RANGE if p > product["price"]][:4], 2))[1]
    kind = product["name"].split(" ", 1)[1]
    option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
    text = f"i need a {kind} that is {' and '.join(attrs)}, with {option_text}, and price lower than {upper:.2f} dollars"  # noqa: E501
    return {
        "asin": product["asin"],
        "instruction_text": text,
        "attributes": attrs,
        "goal_options": goal_options,
        "price_upper": upper,
    }


def fixture_data(
    seed: int, *, catalogue_size: int, eval_size: int, train_size: int
) -> tuple[list[Product], list[Goal]]:
    """The catalogue and ``eval_size + train_size`` goals with distinct instructions, from
    ``random.Random(seed)``.

    The first ``eval_size`` goals are the eval split, the rest the training split.

    >>> products, goals = fixture_data(0, catalogue_size=12, eval_size=2, train_size=3)
    >>> len(products), len(goals), len({g["instruction_text"] for g in goals})
    (12, 5, 5)
    >>> (products, goals) == fixture_data(0, catalogue_size=12, eval_size=2, train_size=3)
    True

    Raises:
        ValueError: Not enough distinct goals (ask for fewer, or a bigger catalogue).
    """
    rng = random.Random(seed)
    products = generate_catalogue(rng, catalogue_size)
    goals: list[Goal] = []
    seen: set[str] = set()
    for _ in range((eval_size + train_size) * 50):
        if len(goals) == eval_size + train_size:
            break
        goal = generate_goal(rng, rng.choice(products))
        if goal["instruction_text"] not in seen:
            seen.add(goal["instruction_text"])
            goals.append(goal)
    else:
        raise ValueError(
            "could not generate enough distinct goals; ask for fewer or a bigger catalogue"
        )
    return products, goals
