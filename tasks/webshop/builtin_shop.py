"""The built-in WebShop: WebShop's text environment over a local product catalogue (grader side).

Pages, observations and actions follow WebShop's ``WebAgentTextEnv(observation_mode="text")``:
page texts joined by ``" [SEP] "``, ``search[query]`` on the search page, ``click[x]`` for any
clickable (lower-cased) — product ids on result pages, option values, ``description`` /
``features`` / ``reviews``, ``< prev``, ``next >``, ``back to search`` and ``buy now``. Search is
BM25 (``bm25s``) over titles, attributes and descriptions, 10 results a page, 50 at most. Buying
ends the episode with WebShop's reward (:func:`.reward.get_reward`). An action that is not
available leaves the page as it is (as in WebShop).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autorl.envs.base import EnvData, EnvError, EpisodeSpec, StepResult, split_of

from .reward import Goal, Product, get_reward

SEP = " [SEP] "
PAGE_SIZE = 10
MAX_RESULTS = 50
SUBPAGES = ("description", "features", "reviews")
_ACTION = re.compile(r"^\s*(search|click)\[(.*)\]\s*$", re.DOTALL)


def parse_action(action: str) -> tuple[str, str] | None:
    """``("search"|"click", argument)`` of a well-formed action, else None.

    >>> parse_action("click[Buy Now]")
    ('click', 'Buy Now')
    >>> parse_action("buy it") is None
    True
    """
    match = _ACTION.match(action or "")
    return (match.group(1), match.group(2).strip()) if match else None


class Catalogue:
    """Products by id and a BM25 index over them (one per catalogue file, shared by instances)."""

    _loaded: dict[Path, Catalogue] = {}

    def __init__(self, products: list[Product]) -> None:
        """Index the products."""
        import bm25s

        self.products = {p["asin"]: p for p in products}
        self.order = [p["asin"] for p in products]
        corpus = [
            " ".join([p["Title"], *p["Attributes"], p["Description"], p["query"]]) for p in products
        ]
        self.index = bm25s.BM25()
        self.index.index(
            bm25s.tokenize(corpus, stopwords=None, show_progress=False), show_progress=False
        )

    @classmethod
    def load(cls, path: Path) -> Catalogue:
        """The catalogue of a ``catalogue.jsonl`` file (cached per process)."""
        if path not in cls._loaded:
            if not path.is_file():
                raise EnvError(f"no WebShop catalogue at {path}; build the task data first")
            rows = [
                json.loads(line)
                for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip()
            ]
            cls._loaded[path] = cls(rows)
        return cls._loaded[path]

    def search(self, query: str) -> list[str]:
        """Product ids for a query, best first (at most :data:`MAX_RESULTS`)."""
        import bm25s

        tokens = bm25s.tokenize([query], stopwords=None, show_progress=False)
        if not any(tokens.ids[0]) and not tokens.vocab:
            return []
        k = min(MAX_RESULTS, len(self.order))
        docs, scores = self.index.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [self.order[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]


def load_goals(folder: Path) -> dict[str, Goal]:
    """``goals.jsonl`` of one data folder, by episode id."""
    path = Path(folder) / "goals.jsonl"
    if not path.is_file():
        raise EnvError(f"no WebShop goals at {path}; build the task data first")
    rows = [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    return {row["episode_id"]: row for row in rows}


@dataclass
class _Session:
    goal: Goal
    page: str = "search"
    query: str = ""
    results: list[str] = field(default_factory=list)
    page_num: int = 1
    asin: str = ""
    options: dict[str, str] = field(default_factory=dict)
    subpage: str = ""
    reward: dict[str, float] = field(default_factory=dict)


class BuiltinWebShop:
    """WebShop's text environment over a local catalogue (implements
    :class:`autorl.envs.base.Env`)."""

    def __init__(self) -> None:
        """No session yet."""
        self.catalogue: Catalogue | None = None
        self.session: _Session | None = None
        self._goals: dict[Path, dict[str, Goal]] = {}
        self.expert = False

    def reset(self, episode: EpisodeSpec, data: EnvData) -> StepResult:
        """Open the search page of the episode's goal."""
        split = split_of(episode.episode_id)
        folder = data.public_dir if split == "train" else data.private_dir
        if folder not in self._goals:
            self._goals[folder] = load_goals(folder)
        goal = self._goals[folder].get(episode.episode_id)
        if goal is None:
            raise EnvError(f"no WebShop session {episode.episode_id!r} in this task's data")
        self.catalogue = Catalogue.load(data.public_dir / "catalogue.jsonl")
        self.session = _Session(goal=goal)
        self.expert = split == "train"
        return self._result(done=False)

    # ---- pages ------------------------------------------------------------------------------

    def clickables(self) -> list[str]:
        """What can be clicked on the current page (lower-cased, as WebShop lists them)."""
        s, cat = self._state()
        if s.page == "search" or s.page == "done":
            return []
        if s.page == "results":
            start = (s.page_num - 1) * PAGE_SIZE
            shown = [a.lower() for a in s.results[start : start + PAGE_SIZE]]
            nav = (
                ["back to search"]
                + (["< prev"] if s.page_num > 1 else [])
                + (["next >"] if start + PAGE_SIZE < len(s.results) else [])
            )
            return nav + shown
        if s.page == "item":
            product = cat.products[s.asin]
            values = [v.lower() for vs in product["options"].values() for v in vs]
            return ["back to search", "< prev", *values, *SUBPAGES, "buy now"]
        return ["back to search", "< prev"]

    def page_parts(self) -> list[str]:
        """The visible texts of the current page, in order (joined with [SEP] for the
        observation)."""
        s, cat = self._state()
        instruction = ["Instruction:", s.goal["instruction_text"]]
        if s.page == "search":
            return ["WebShop", *instruction, "Search"]
        if s.page == "results":
            start = (s.page_num - 1) * PAGE_SIZE
            parts = [
                *instruction,
                "Back to Search",
                f"Page {s.page_num} (Total results: {len(s.results)})",
            ]
            parts += (["< Prev"] if s.page_num > 1 else []) + (
                ["Next >"] if start + PAGE_SIZE < len(s.results) else []
            )
            for asin in s.results[start : start + PAGE_SIZE]:
                product = cat.products[asin]
                parts += [asin, product["Title"], f"${product['price']:.2f}"]
            return parts
        product = cat.products[s.asin]
        if s.page == "item":
            parts = [*instruction, "Back to Search", "< Prev"]
            for kind, values in product["options"].items():
                parts += [kind, *values]
            return parts + [
                product["Title"],
                f"Price: ${product['price']:.2f}",
                "Rating: N.A.",
                "Description",
                "Features",
                "Reviews",
                "Buy Now",
            ]
        if s.page == "sub":
            content = {
                "description": [product["Description"]],
                "features": list(product["BulletPoints"]),
                "reviews": ["No reviews yet."],
            }[s.subpage]
            return [*instruction, "Back to Search", "< Prev", *content]
        return [
            "Thank you for shopping with us!",
            "Your code:",
            "None",
            "Your score (min 0.0, max 1.0)",
            f"{s.reward['reward']:.4f}",
        ]

    # ---- actions ----------------------------------------------------------------------------

    def step(self, action: str) -> StepResult:
        """Apply ``search[…]`` or ``click[…]``; anything unavailable leaves the page unchanged."""
        s, cat = self._state()
        if s.page == "done":
            raise EnvError("the episode is over; reset to play another")
        parsed = parse_action(action)
        if parsed is not None:
            verb, arg = parsed
            if verb == "search" and s.page == "search" and arg:
                s.query, s.results, s.page_num, s.page = arg, cat.search(arg), 1, "results"
            elif verb == "click" and arg.lower() in self.clickables():
                self._click(arg.lower())
        return self._result(done=s.page == "done")

    def _click(self, target: str) -> None:
        s, cat = self._state()
        if target == "back to search":
            s.page, s.options, s.asin = "search", {}, ""
        elif target == "next >":
            s.page_num += 1
        elif target == "< prev":
            if s.page == "results":
                s.page_num -= 1
            elif s.page == "item":
                s.page, s.options = "results", {}
            else:
                s.page = "item"
        elif s.page == "results":
            s.page, s.asin = "item", target.upper()
        elif target in SUBPAGES:
            s.page, s.subpage = "sub", target
        elif target == "buy now":
            product = cat.products[s.asin]
            target_product = cat.products[s.goal["asin"]]
            s.reward = get_reward(product, s.goal, target_product, product["price"], s.options)
            s.page = "done"
        else:
            for kind, values in cat.products[s.asin]["options"].items():
                match = [v for v in values if v.lower() == target]
                if match:
                    s.options[kind] = match[0]

    def expert_action(self) -> str | None:
        """The next action of a shopper who knows the goal's product (for training episodes)."""
        s, cat = self._state()
        target = s.goal["asin"]
        if s.page == "search":
            return f"search[{cat.products[target]['Title'].lower()}]"
        if s.page == "results":
            start = (s.page_num - 1) * PAGE_SIZE
            if target in s.results[start : start + PAGE_SIZE]:
                return f"click[{target.lower()}]"
            return (
                "click[next >]"
                if target in s.results[start + PAGE_SIZE :]
                else "click[back to search]"
            )
        if s.page == "item" and s.asin == target:
            for kind, value in s.goal["goal_options"].items():
                if s.options.get(kind) != value:
                    return f"click[{value.lower()}]"
            return "click[buy now]"
        return "click[back to search]" if s.page != "done" else None

    def _state(self) -> tuple[_Session, Catalogue]:
        if self.session is None or self.catalogue is None:
            raise EnvError("step() before reset(): start an episode first")
        return self.session, self.catalogue

    def _result(self, *, done: bool) -> StepResult:
        s, _ = self._state()
        actions = (["search[<your query>]"] if s.page == "search" else []) + [
            f"click[{c}]" for c in self.clickables()
        ]
        info: dict[str, Any] = {"page": s.page}
        if done:
            info |= s.reward
        elif self.expert:
            info["expert_action"] = self.expert_action()
        return StepResult(
            SEP.join(self.page_parts()), s.reward.get("reward", 0.0), done, actions, info
        )

    def close(self) -> None:
        """Forget the session."""
        self.session = None
