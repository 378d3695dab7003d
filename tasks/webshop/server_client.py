"""WebShop through a running WebShop web server (princeton-nlp/WebShop's ``web_agent_site`` app);
grader side.

The client speaks the site's HTTP protocol as ReAct's WebShop harness does: pages are GET
requests on ``/<session>``, ``/search_results/<session>/<keywords>/<page>``,
``/item_page/<session>/<asin>/<keywords>/<page>/<options>``,
``/item_sub_page/<session>/<asin>/<keywords>/<page>/<sub_page>/<options>`` and
``/done/<session>/<asin>/<options>`` (session ``fixed_<i>`` is goal ``i``); the HTML's visible texts
become the observation (joined by ``" [SEP] "``, as WebShop's text env does), buttons, product
links and option labels the clickables, and the done page's "Your score (min 0.0, max 1.0)" the
reward. Episode ids map to sessions: ``eval/<i>`` and ``train/<i>`` play ``fixed_<i>``.
The Flask app serves WebShop's *human* goals over its full catalogue, so ``fixed_<i>`` is not the
reference's session ``i`` (the reference used the text env's synthetic goals: :mod:`.text_env`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote

from autorl.envs.base import EnvData, EnvError, EpisodeSpec, StepResult
from autorl.tasks import typed_options

from .builtin_shop import SEP, SUBPAGES, parse_action
from .options import Eval

SCORE_LABEL = "Your score (min 0.0, max 1.0)"
_HIDDEN = {"style", "script", "head", "title", "meta"}


class _Visible(HTMLParser):
    """Visible text nodes with the tag (and class) of their parent, in document order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str]] = []
        self.texts: list[tuple[str, str, str]] = []  # (text, parent tag, parent class)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ("input", "br", "img", "meta", "link", "hr"):
            self.stack.append((tag, dict(attrs).get("class") or ""))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data: str) -> None:
        text = data.strip()
        if text and not any(tag in _HIDDEN for tag, _ in self.stack):
            tag, cls = self.stack[-1] if self.stack else ("", "")
            self.texts.append((text, tag, cls))


@dataclass
class ParsedPage:
    """What the client reads off one HTML page."""

    texts: list[str]
    buttons: list[str] = field(default_factory=list)
    asins: list[str] = field(default_factory=list)
    options: dict[str, str] = field(default_factory=dict)  # option value -> option type
    reward: float | None = None


def parse_page(html: str) -> ParsedPage:
    """Visible texts, buttons, product links, options (with their type) and the score of a page.

    >>> page = parse_page('<h4>color</h4><label>red</label><button>Buy Now</button>'
    ...                   '<p>Your score (min 0.0, max 1.0)</p><p>0.5</p>')
    >>> page.buttons, page.options, page.reward
    (['Buy Now'], {'red': 'color'}, 0.5)
    """
    parser = _Visible()
    parser.feed(html)
    page = ParsedPage([t for t, _, _ in parser.texts])
    option_type = ""
    for text, tag, cls in parser.texts:
        if tag == "button":
            page.buttons.append(text)
        elif tag == "label":
            page.options[text] = option_type
        elif "product-link" in cls.split():
            page.asins.append(text)
        else:
            option_type = text
    if SCORE_LABEL in page.texts:
        idx = page.texts.index(SCORE_LABEL)
        page.reward = float(page.texts[idx + 1])
    return page


class WebShopServerEnv:
    """A WebShop session on a running server (implements :class:`autorl.envs.base.Env`)."""

    def __init__(self) -> None:
        """No session yet."""
        self.base_url = ""
        self.state: dict[str, Any] = {}
        self.page: ParsedPage | None = None
        self._http: Any = None

    def reset(self, episode: EpisodeSpec, data: EnvData) -> StepResult:
        """Open ``fixed_<i>`` of the episode's goal index."""
        import httpx

        options = typed_options(
            Eval, episode.source.env_options, what="webshop eval", complete=True, error=EnvError
        )
        url = options.server_url
        if not url:
            raise EnvError(
                "the WebShop server backend needs eval option server_url (e.g. "
                "http://127.0.0.1:3000)"
            )
        index = episode.episode_id.split("/", 1)[1]
        if not index.isdigit():
            raise EnvError(
                "WebShop server episodes are goal indices like 'eval/7', got "
                f"{episode.episode_id!r}"
            )
        if self._http is None or self.base_url != url.rstrip("/"):
            self.base_url = url.rstrip("/")
            self._http = httpx.Client(timeout=float(options.server_timeout_s))
        self.state = {"session": f"fixed_{int(index)}", "page_type": "init"}
        return self._load(done=False)

    def _url(self) -> str:
        s = self.state
        kw = quote(str(s.get("keywords", "")), safe="")
        opts = quote(repr(s.get("options", {})), safe="")
        paths = {
            "init": f"/{s['session']}",
            "search": f"/search_results/{s['session']}/{kw}/{s.get('page', 1)}",
            "item": f"/item_page/{s['session']}/{s.get('asin')}/{kw}/{s.get('page', 1)}/{opts}",
            "item_sub": f"/item_sub_page/{s['session']}/{s.get('asin')}/{kw}/{s.get('page', 1)}/{s.get('sub_page')}/{opts}",  # noqa: E501
            "end": f"/done/{s['session']}/{s.get('asin')}/{opts}",
        }
        return self.base_url + paths[s["page_type"]]

    def _load(self, *, done: bool) -> StepResult:
        response = self._http.get(self._url())
        if response.status_code != 200:
            raise EnvError(f"WebShop server answered HTTP {response.status_code} for {self._url()}")
        self.page = parse_page(response.text)
        reward = self.page.reward or 0.0
        clickables = (
            [b.lower() for b in self.page.buttons]
            + [a.lower() for a in self.page.asins]
            + [o.lower() for o in self.page.options]
        )
        actions = (["search[<your query>]"] if self.state["page_type"] == "init" else []) + [
            f"click[{c}]" for c in clickables
        ]
        return StepResult(
            SEP.join(self.page.texts), reward, done, actions, {"page": self.state["page_type"]}
        )

    def step(self, action: str) -> StepResult:
        """Apply ``search[…]``/``click[…]``; unavailable actions leave the page as it is."""
        if self.page is None:
            raise EnvError("step() before reset(): start an episode first")
        parsed = parse_action(action)
        s, page = self.state, self.page
        if parsed is None:
            return self._load(done=False)
        verb, arg = parsed
        low = arg.lower()
        buttons = {b.lower(): b for b in page.buttons}
        if verb == "search" and s["page_type"] == "init" and arg:
            self.state = {
                "session": s["session"],
                "page_type": "search",
                "keywords": arg.lower(),
                "page": 1,
            }
        elif verb == "click" and low in buttons:
            if low == "buy now" and s["page_type"] == "item":
                s["page_type"] = "end"
                return self._load(done=True)
            if low == "back to search":
                self.state = {"session": s["session"], "page_type": "init"}
            elif low == "next >":
                s["page"] = int(s.get("page", 1)) + 1
            elif low == "< prev":
                if s["page_type"] == "search":
                    s["page"] = max(1, int(s.get("page", 1)) - 1)
                elif s["page_type"] == "item":
                    s["page_type"], s["options"] = "search", {}
                else:
                    s["page_type"] = "item"
            elif low in SUBPAGES and s["page_type"] == "item":
                s["page_type"], s["sub_page"] = "item_sub", buttons[low]
        elif (
            verb == "click"
            and s["page_type"] == "search"
            and low in {a.lower() for a in page.asins}
        ):
            s["page_type"], s["asin"], s["options"] = (
                "item",
                next(a for a in page.asins if a.lower() == low),
                {},
            )
        elif (
            verb == "click"
            and s["page_type"] == "item"
            and low in {o.lower() for o in page.options}
        ):
            value = next(o for o in page.options if o.lower() == low)
            s.setdefault("options", {})[page.options[value]] = value
        return self._load(done=False)

    def close(self) -> None:
        """Close the HTTP connection."""
        if self._http is not None:
            self._http.close()
            self._http = None
