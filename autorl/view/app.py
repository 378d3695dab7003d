"""The live viewer's web app: read-only routes over one sweep folder (docs/threat-model.md §7).

Every route is a GET; the record store is opened ``read_only`` (SQLite's ``mode=ro``), so no
request can change a sweep. Routes take ids (a cell's id, a revision's number, a byte offset),
never a path. Without a token only a loopback ``Host`` is answered (a page on another site cannot
reach the viewer through DNS rebinding); with one, each request must carry it (the
``Authorization: Bearer`` header, the ``token`` query parameter, which also sets a same-site
cookie, or that cookie).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, PlainTextResponse, StreamingResponse

from autorl.records.store import RecordStore
from autorl.records.types import CellRecord
from autorl.view import pages

COOKIE = "autorl_view_token"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
# The headers of every answer: the page policy again (a header cannot be dropped by a template),
# no content sniffing, no referrer to another site, no framing.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; connect-src 'self'; img-src data:; "
        "style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
LIVE_JS = (Path(__file__).parent / "static" / "live.js").read_text(encoding="utf-8")


def _host_name(host_header: str) -> str:
    """The host of a ``Host`` header, without its port."""
    if host_header.startswith("["):
        return host_header.split("]", 1)[0] + "]"
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def create_app(
    sweep_dir: Path, *, token: str | None = None, poll_s: float = 1.0, heartbeat_s: float = 15.0
) -> FastAPI:
    """The viewer of ``sweep_dir`` (which holds ``records.sqlite``).

    Args:
        sweep_dir: The sweep folder, ``<out_dir>/<sweep_id>``.
        token: When set, a request without it gets 401.
        poll_s: How often an event stream reads the store for a change.
        heartbeat_s: How often an idle event stream sends a comment (so a proxy keeps it open).

    Raises:
        autorl.errors.AutorlError: The folder holds no record store.
    """
    sweep_dir = Path(sweep_dir).resolve()
    store = RecordStore(sweep_dir / "records.sqlite", read_only=True)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        store.close()

    # No docs routes: the app serves the sweep and nothing else.
    app = FastAPI(
        title="autorl viewer", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan
    )
    app.state.store = store

    @app.middleware("http")
    async def guard(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        """Refuse a foreign Host (without a token) or a missing token; add the headers."""
        from_query = False
        if token is None:
            if _host_name(request.headers.get("host", "")) not in LOOPBACK_HOSTS:
                return PlainTextResponse("the viewer answers loopback hosts only", 421)
        else:
            given = request.headers.get("authorization", "").removeprefix("Bearer ")
            given = given or request.cookies.get(COOKIE, "")
            if not hmac.compare_digest(given.encode(), token.encode()):
                given = request.query_params.get("token", "")
                from_query = True
                if not hmac.compare_digest(given.encode(), token.encode()):
                    return PlainTextResponse(
                        "a token is needed: open the link the viewer printed", 401
                    )
        response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        if from_query:
            response.set_cookie(COOKIE, token or "", httponly=True, samesite="strict")
        return response

    def cell_or_404(cell_id: str) -> CellRecord:
        cell = store.get_cell(cell_id)
        if cell is None:
            raise HTTPException(404, "no such cell in this sweep")
        return cell

    def events(
        read: Callable[[], dict[str, Any]], macro: str, request: Request
    ) -> StreamingResponse:
        """A stream of ``{"version", "html"}`` events: one at once, then one per change (the
        records are read each poll; the fragment is rendered only when their version moved)."""

        async def stream() -> AsyncIterator[str]:
            last, idle = "", 0.0
            while not await request.is_disconnected():
                context = await run_in_threadpool(read)
                if context["version"] != last:
                    last, idle = context["version"], 0.0
                    html = await run_in_threadpool(pages.fragment, macro, **context)
                    yield f"data: {json.dumps({'version': last, 'html': html})}\n\n"
                elif idle >= heartbeat_s:
                    idle = 0.0
                    yield ": idle\n\n"
                await asyncio.sleep(poll_s)
                idle += poll_s

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"X-Accel-Buffering": "no"}
        )

    def cell_records(cell_id: str) -> dict[str, Any]:
        return pages.cell_context(store, sweep_dir, cell_or_404(cell_id))

    @app.get("/", response_class=HTMLResponse)
    def sweep_page(state: str = "", task: str = "") -> str:
        """The sweep: its groups, running cells and cells (``?state=``/``?task=`` filter them)."""
        filters = pages.Filters(state, task)
        html = pages.fragment("sweep_main", **pages.sweep_context(store, filters))
        return pages.page(f"Sweep {sweep_dir.name}", html, f"/events{filters.query}")

    @app.get("/events")
    def sweep_events(request: Request, state: str = "", task: str = "") -> StreamingResponse:
        """The sweep page's live part, again whenever the store changes."""
        filters = pages.Filters(state, task)
        return events(lambda: pages.sweep_context(store, filters), "sweep_main", request)

    @app.get("/cell/{cell_id}", response_class=HTMLResponse)
    def cell_page(cell_id: str) -> str:
        """One cell: its record, submissions, driver calls, code revisions and log tail."""
        html = pages.fragment("cell_main", **cell_records(cell_id))
        return pages.page(f"Cell {cell_id}", html, pages.cell_href(cell_id, "events"))

    @app.get("/cell/{cell_id}/events")
    def cell_events(cell_id: str, request: Request) -> StreamingResponse:
        """The cell page's live part, again whenever its records or its log change."""
        cell_or_404(cell_id)
        return events(lambda: cell_records(cell_id), "cell_main", request)

    @app.get("/cell/{cell_id}/revision/{n}", response_class=HTMLResponse)
    def revision_page(cell_id: str, n: int) -> str:
        """The diff of the cell's ``n``-th code revision (from 1, oldest first)."""
        cell_or_404(cell_id)
        revisions = store.list_code_revisions(cell_id)
        if not 1 <= n <= len(revisions):
            raise HTTPException(404, f"this cell has {len(revisions)} code revisions")
        html = pages.fragment("revision_main", revision=revisions[n - 1], n=n, total=len(revisions))
        title = f"Cell {cell_id}: revision {n}"
        return pages.page(title, html, back=pages.cell_href(cell_id))

    @app.get("/cell/{cell_id}/log", response_class=HTMLResponse)
    def log_page(cell_id: str, offset: int | None = None) -> str:
        """A page of the cell's ``agent.log`` from byte ``offset`` (default: its last page)."""
        cell_or_404(cell_id)
        if offset is not None and offset < 0:
            raise HTTPException(422, "offset is a byte offset, 0 or more")
        log = pages.read_log(sweep_dir, cell_id, offset)
        previous = max(log.offset - pages.LOG_PAGE, 0) if log.offset > 0 else None
        href = pages.cell_href(cell_id, "log")
        html = pages.fragment("log_main", log=log, log_href=href, previous=previous)
        return pages.page(f"Cell {cell_id}: agent.log", html, back=pages.cell_href(cell_id))

    @app.get("/static/live.js")
    def live_js() -> Response:
        """The pages' one script."""
        return Response(LIVE_JS, media_type="text/javascript")

    return app


def routes(app: FastAPI) -> set[str]:
    """``METHOD path`` of each route (HEAD aside), for the threat model's table."""
    found: set[str] = set()
    for route in app.routes:
        methods: Any = getattr(route, "methods", None) or ()
        found.update(f"{m} {getattr(route, 'path', '')}" for m in methods if m != "HEAD")
    return found
