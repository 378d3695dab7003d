"""A local stand-in for WebShop's web site, serving the built-in catalogue as HTML.

The real site (``web_agent_site`` of princeton-nlp/WebShop) is not installable from a package
registry; this FastAPI app answers the same GET routes with pages of the same structure
(``<button>``s, ``<a class="product-link">`` product ids, option ``<label>``s under their type, and
the done page's "Your score (min 0.0, max 1.0)"), so the task's HTTP client
(``tasks/webshop/server_client.py``) can be tested against it. Session ``fixed_<i>`` is goal ``i``
of the given goals file. Test-only: it reuses the built-in shop (``tasks/webshop/builtin_shop.py``)
for its pages.
"""

from __future__ import annotations

import ast
from html import escape
from pathlib import Path
from typing import Any

from autorl.tasks import get_task, load_task_module

_SHOP = load_task_module(get_task("webshop"), "builtin_shop.py")
BuiltinWebShop = _SHOP.BuiltinWebShop


def _html(parts: list[str]) -> str:
    return "<html><head><title>WebShop</title></head><body>" + "".join(parts) + "</body></html>"


def create_site(catalogue_path: Path, goals_path: Path) -> Any:
    """The stand-in site over a ``catalogue.jsonl`` and a ``goals.jsonl`` (``<split>/<i>`` ids)."""
    from fastapi import FastAPI
    from fastapi.responses import HTMLResponse

    catalogue = _SHOP.Catalogue.load(catalogue_path)
    goals = {int(k.split("/", 1)[1]): v for k, v in _SHOP.load_goals(goals_path.parent).items()}
    app = FastAPI(title="WebShop stand-in")

    def shop(session_id: str) -> BuiltinWebShop:
        index = int(session_id.removeprefix("fixed_"))
        env = BuiltinWebShop()
        env.catalogue = catalogue
        env.session = _SHOP._Session(goal=goals[index])
        return env

    def header(env: BuiltinWebShop, back: bool = True) -> list[str]:
        assert env.session is not None
        parts = [
            "<div id='instruction-text'><h4>Instruction:</h4>"
            f"<p>{escape(env.session.goal['instruction_text'])}</p></div>"
        ]
        return parts + (["<button>Back to Search</button>"] if back else [])

    @app.get("/{session_id}", response_class=HTMLResponse)
    def index(session_id: str) -> str:
        env = shop(session_id)
        return _html(
            [
                "<h1>WebShop</h1>",
                *header(env, back=False),
                "<form><input name='search_query'><button>Search</button></form>",
            ]
        )

    def results(env: BuiltinWebShop, keywords: str, page: int) -> None:
        assert env.session is not None and env.catalogue is not None
        env.session.query, env.session.results = keywords, env.catalogue.search(keywords)
        env.session.page, env.session.page_num = "results", page

    @app.get("/search_results/{session_id}/{keywords}/{page}", response_class=HTMLResponse)
    def search_results(session_id: str, keywords: str, page: int) -> str:
        env = shop(session_id)
        results(env, keywords, page)
        assert env.session is not None
        parts = env.page_parts()[3:]  # after the instruction and "Back to Search"
        html = header(env) + [f"<h5>{escape(parts[0])}</h5>"]
        rest = parts[1:]
        while rest and rest[0] in ("< Prev", "Next >"):
            html.append(f"<button>{escape(rest.pop(0))}</button>")
        for i in range(0, len(rest), 3):
            html += [
                f"<a class='product-link'>{escape(rest[i])}</a>",
                f"<h4>{escape(rest[i + 1])}</h4>",
                f"<h5>{escape(rest[i + 2])}</h5>",
            ]
        return _html(html)

    def item(env: BuiltinWebShop, asin: str, options: str) -> None:
        assert env.session is not None
        env.session.page, env.session.asin, env.session.options = (
            "item",
            asin,
            dict(ast.literal_eval(options)),
        )

    @app.get(
        "/item_page/{session_id}/{asin}/{keywords}/{page}/{options}", response_class=HTMLResponse
    )
    def item_page(session_id: str, asin: str, keywords: str, page: int, options: str) -> str:
        env = shop(session_id)
        item(env, asin, options)
        assert env.catalogue is not None
        product = env.catalogue.products[asin]
        html = header(env) + ["<button>&lt; Prev</button>"]
        for kind, values in product["options"].items():
            html += [f"<h4>{escape(kind)}</h4>"] + [
                f"<input type='radio'><label>{escape(v)}</label>" for v in values
            ]
        html += [
            f"<h2>{escape(product['Title'])}</h2>",
            f"<h4>Price: ${product['price']:.2f}</h4>",
            "<h4>Rating: N.A.</h4>",
        ]
        html += [f"<button>{b}</button>" for b in ("Description", "Features", "Reviews", "Buy Now")]
        return _html(html)

    @app.get(
        "/item_sub_page/{session_id}/{asin}/{keywords}/{page}/{sub_page}/{options}",
        response_class=HTMLResponse,
    )
    def item_sub_page(
        session_id: str, asin: str, keywords: str, page: int, sub_page: str, options: str
    ) -> str:
        env = shop(session_id)
        item(env, asin, options)
        assert env.session is not None
        env.session.page, env.session.subpage = "sub", sub_page.lower()
        content = env.page_parts()[4:]
        return _html(
            header(env) + ["<button>&lt; Prev</button>"] + [f"<p>{escape(c)}</p>" for c in content]
        )

    @app.get("/done/{session_id}/{asin}/{options}", response_class=HTMLResponse)
    def done(session_id: str, asin: str, options: str) -> str:
        env = shop(session_id)
        item(env, asin, options)
        env.step("click[buy now]")
        return _html([f"<p>{escape(t)}</p>" for t in env.page_parts()])

    return app
