"""The gateway's HTTP app and server: routes, token check, budgets, recording.

Routes (the agent's CLI is pointed at ``Gateway.url``):

| route | protocol |
|---|---|
| ``POST /v1/chat/completions`` | OpenAI chat completions (``chat``) |
| ``POST /v1/responses`` | OpenAI Responses (``responses``) |
| ``POST /v1/messages`` | Anthropic Messages (``messages``) |
| ``POST /v1beta/models/{model}:generateContent`` / ``:streamGenerateContent`` | Gemini (``gemini``) |
| ``POST /v1/messages/count_tokens`` · ``POST /v1beta/models/{model}:countTokens`` | token counts (:mod:`.count`) |
| ``GET /v1/models`` · ``GET /health`` | the driver's model · liveness |

Token counts are answered by the gateway itself with LiteLLM's token counter: no provider call, no
record, no spend.

The agent authenticates with the cell's gateway token in whichever header its CLI uses
(``Authorization: Bearer``, ``x-api-key``, ``x-goog-api-key`` or ``?key=``); it never sees the
provider key.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from autorl.gateway import translate
from autorl.gateway.count import CountError, count_response, count_tokens
from autorl.gateway.settings import DriverSettings
from autorl.gateway.upstream import UpstreamFailure, request_headers, response_headers, send_with_retries, upstream_url
from autorl.gateway.usage import SSEUsageParser, Usage, usage_from_json
from autorl.records.types import DriverCall
from autorl.serving import ServerThread, bind_tcp

logger = logging.getLogger(__name__)
_MAX_BODY_BYTES = 64 * 1024 * 1024


def error_response(protocol: str, status: int, message: str) -> JSONResponse:
    """An error in the shape the protocol's clients parse, so the CLI shows the message."""
    if protocol == "messages":
        kind = {401: "authentication_error", 429: "rate_limit_error"}.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status_code=status)
    if protocol == "gemini":
        code = {401: "UNAUTHENTICATED", 429: "RESOURCE_EXHAUSTED"}.get(
            status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT"
        )
        return JSONResponse({"error": {"code": status, "message": message, "status": code}}, status_code=status)
    kind = {401: "invalid_api_key", 429: "insufficient_quota"}.get(
        status, "server_error" if status >= 500 else "invalid_request_error"
    )
    return JSONResponse({"error": {"message": message, "type": kind, "code": kind}}, status_code=status)


class Gateway:
    """One cell's driver gateway: a FastAPI app served by uvicorn on a loopback thread.

    Args:
        settings: The driver.
        token: The cell's gateway token (what the agent sends instead of a provider key).
        api_key: The provider key (None for keyless servers).
        cell_id: The cell, for the records.
        sink: Receives every :class:`DriverCall` (called on the gateway's thread; must not block).
        host: Loopback address to bind when no ``sock`` is given.
        sock: An already-bound socket to serve on instead (a sealed cell's unix socket).
    """

    def __init__(
        self, settings: DriverSettings, *, token: str, api_key: str | None, cell_id: str,
        sink: Callable[[DriverCall], None], host: str = "127.0.0.1", sock: socket.socket | None = None,
    ) -> None:
        self.settings = settings
        self.token = token
        self.api_key = api_key
        self.cell_id = cell_id
        self.sink = sink
        self._lock = threading.Lock()
        self._totals = {"calls": 0, "tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0}
        self._client: httpx.AsyncClient | None = None
        self.app = self._build_app()
        self.server = ServerThread(self.app, sock if sock is not None else bind_tcp(host), name=f"gateway-{cell_id}")

    @property
    def url(self) -> str:
        """Root URL of the gateway (routes start with ``/v1`` or ``/v1beta``)."""
        return self.server.url

    def start(self) -> None:
        """Serve on a background thread; returns once the port accepts connections."""
        self.server.start()

    def stop(self) -> None:
        """Stop serving."""
        self.server.stop()

    def totals(self) -> dict[str, Any]:
        """Calls, tokens in/out and cost so far (cost 0.0 when the price is unknown)."""
        with self._lock:
            return dict(self._totals)

    # Budget and recording.

    def budget_exhausted(self) -> str | None:
        """Why the next call is refused, or None while the budgets allow it."""
        s = self.settings
        totals = self.totals()
        used = totals["tokens_in"] + totals["tokens_out"]
        if s.max_tokens is not None and used >= s.max_tokens:
            return (f"driver token budget exhausted: {used} tokens used of driver.budget.max_tokens={s.max_tokens} "
                    "for this cell; no further driver calls are allowed")
        if s.max_cost_usd is not None and totals["cost_usd"] >= s.max_cost_usd:
            return (f"driver cost budget exhausted: ${totals['cost_usd']:.4f} spent of driver.budget.max_cost_usd="
                    f"{s.max_cost_usd} for this cell; no further driver calls are allowed")
        return None

    def _record(self, call: DriverCall) -> None:
        with self._lock:
            self._totals["calls"] += 1
            self._totals["tokens_in"] += call.tokens_in or 0
            self._totals["tokens_out"] += call.tokens_out or 0
            self._totals["cost_usd"] += call.cost_usd or 0.0
        try:
            self.sink(call)
        except Exception:  # noqa: BLE001 - a recording failure must not break the agent's call
            logger.exception("could not record driver call %s of cell %s", call.call_id, self.cell_id)

    def _call(self, protocol: str, started: float, t0: float, requested: str | None, *, status: int, stream: bool,
              attempts: int, usage: Usage, request_bytes: int, response_bytes: int, translated: bool,
              error: str | None) -> DriverCall:
        cost = None
        if usage.tokens_in is not None or usage.tokens_out is not None:
            cost = self.settings.cost(usage.tokens_in or 0, usage.tokens_out or 0)
        return DriverCall(
            cell_id=self.cell_id, call_id=uuid.uuid4().hex, started_at=started, latency_s=time.monotonic() - t0,
            protocol=protocol, requested_model=requested, model=self.settings.model, status_code=status,
            stream=int(stream), attempts=attempts, tokens_in=usage.tokens_in, tokens_out=usage.tokens_out,
            cached_in=usage.cached_in, cost_usd=cost, request_bytes=request_bytes, response_bytes=response_bytes,
            translated=int(translated), error=error,
        )

    # The app.

    def _authorised(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, bearer = header.partition(" ")
        candidates = [
            bearer.strip() if scheme.lower() == "bearer" else "",
            request.headers.get("x-api-key", ""), request.headers.get("x-goog-api-key", ""),
            request.query_params.get("key", ""),
        ]
        return any(c and hmac.compare_digest(c, self.token) for c in candidates)

    def _build_app(self) -> FastAPI:
        @contextlib.asynccontextmanager
        async def lifespan(_: FastAPI) -> AsyncIterator[None]:
            # One connection pool per server, bound to the server's event loop.
            self._client = httpx.AsyncClient(timeout=self.settings.timeout_s)
            try:
                yield
            finally:
                await self._client.aclose()

        app = FastAPI(title="autorl driver gateway", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            return await self.handle("chat", request, "/chat/completions")

        @app.post("/v1/responses")
        async def responses(request: Request) -> Response:
            return await self.handle("responses", request, "/responses")

        @app.post("/v1/messages")
        async def messages(request: Request) -> Response:
            return await self.handle("messages", request, "/messages")

        @app.post("/v1/messages/count_tokens")
        async def messages_count(request: Request) -> Response:
            return await self.count("messages", request)

        @app.post("/v1beta/models/{target}")
        async def gemini(target: str, request: Request) -> Response:
            model, _, method = target.partition(":")
            if method == "countTokens":
                return await self.count("gemini", request)
            if method not in ("generateContent", "streamGenerateContent"):
                return error_response(
                    "gemini", 404,
                    f"unsupported Gemini method {method!r}; use generateContent, streamGenerateContent or countTokens",
                )
            return await self.handle("gemini", request, f"/models/{model}:{method}", path_model=model)

        @app.get("/v1/models")
        def models(request: Request) -> JSONResponse:
            if not self._authorised(request):
                return error_response("chat", 401, "missing or wrong gateway token")
            return JSONResponse(
                {"object": "list", "data": [{"id": self.settings.model, "object": "model", "owned_by": self.settings.provider}]}
            )

        @app.get("/health")
        def health() -> JSONResponse:
            return JSONResponse({"status": "ok", "driver": self.settings.name, "model": self.settings.model} | self.totals())

        return app

    async def _read(self, protocol: str, request: Request) -> tuple[bytes, dict[str, Any]] | Response:
        """The request's raw body and its JSON object, or the error response (token, size, JSON)."""
        if not self._authorised(request):
            return error_response(protocol, 401, "missing or wrong gateway token: use the token this cell's agent was given")
        raw = await request.body()
        if len(raw) > _MAX_BODY_BYTES:
            return error_response(protocol, 413, f"request body over {_MAX_BODY_BYTES} bytes")
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            return error_response(protocol, 400, f"request body is not valid JSON: {error}")
        if not isinstance(body, dict):
            return error_response(protocol, 400, "request body must be a JSON object")
        return raw, body

    async def count(self, protocol: str, request: Request) -> Response:
        """Answer a token-count call (:mod:`autorl.gateway.count`); nothing is forwarded or recorded."""
        read = await self._read(protocol, request)
        if isinstance(read, Response):
            return read
        _, body = read
        try:
            # LiteLLM is imported on the first count (seconds) and counting is CPU work: off the event loop.
            tokens = await asyncio.to_thread(count_tokens, protocol, body, self.settings.model)
        except CountError as error:
            return error_response(protocol, 400, str(error))
        return JSONResponse(count_response(protocol, tokens))

    async def handle(self, protocol: str, request: Request, suffix: str, path_model: str | None = None) -> Response:
        """Check, forward (or translate) and record one call."""
        started, t0 = time.time(), time.monotonic()
        read = await self._read(protocol, request)
        if isinstance(read, Response):
            return read
        raw, body = read
        requested = path_model if protocol == "gemini" else (str(body["model"]) if "model" in body else None)
        stream = suffix.endswith(":streamGenerateContent") or body.get("stream") is True
        record: dict[str, Any] = dict(stream=stream, request_bytes=len(raw))
        refused = self.budget_exhausted()
        if refused is not None:
            self._record(self._call(protocol, started, t0, requested, status=429, attempts=0, usage=Usage(),
                                    response_bytes=0, translated=False, error=refused, **record))
            return error_response(protocol, 429, refused)
        if self.settings.enforce_model:
            if protocol == "gemini":
                suffix = suffix.replace(f"/models/{path_model}:", f"/models/{self.settings.model}:")
            else:
                body["model"] = self.settings.model
        if protocol == "chat" and stream:
            body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        if protocol not in self.settings.protocols:
            return await self._translated(protocol, body, started, t0, requested, record)
        url = upstream_url(self.settings, protocol, suffix, request.url.query)
        headers = request_headers(request.headers, protocol, self.api_key)
        return await self._forward(protocol, url, headers, json.dumps(body).encode(), started, t0, requested, record)

    async def _forward(self, protocol: str, url: str, headers: dict[str, str], payload: bytes, started: float,
                       t0: float, requested: str | None, record: dict[str, Any]) -> Response:
        assert self._client is not None, "the gateway's HTTP client is created by the app's lifespan"
        try:
            upstream, attempts, retried = await send_with_retries(self._client, self.settings, url, headers, payload)
        except UpstreamFailure as failure:
            self._record(self._call(protocol, started, t0, requested, status=502, attempts=failure.attempts, usage=Usage(),
                                    response_bytes=0, translated=False, error=str(failure), **record))
            return error_response(protocol, 502, str(failure))
        status = upstream.status_code
        relay = response_headers(upstream.headers)
        if "text/event-stream" in upstream.headers.get("content-type", "") and status < 400:
            parser = SSEUsageParser(protocol)

            async def relay_stream() -> AsyncIterator[bytes]:
                sent = 0
                try:
                    async for chunk in upstream.aiter_bytes():
                        parser.feed(chunk)
                        sent += len(chunk)
                        yield chunk
                finally:
                    await upstream.aclose()
                    self._record(self._call(protocol, started, t0, requested, status=status, attempts=attempts,
                                            usage=parser.close(), response_bytes=sent, translated=False, error=None, **record))

            return StreamingResponse(relay_stream(), status_code=status, headers=relay)
        content = await upstream.aread()
        await upstream.aclose()
        error = None if status < 400 else f"provider HTTP {status}: {content[:500].decode(errors='replace')}"
        if error and retried:
            error += f" (after retries; previous: {retried})"
        self._record(self._call(protocol, started, t0, requested, status=status, attempts=attempts,
                                usage=usage_from_json(protocol, content), response_bytes=len(content), translated=False,
                                error=error, **record))
        return Response(content, status_code=status, headers=relay)

    async def _translated(self, protocol: str, body: dict[str, Any], started: float, t0: float, requested: str | None,
                          record: dict[str, Any]) -> Response:
        try:
            result = await translate.call(self.settings, protocol, body, self.api_key)
        except translate.TranslationError as failure:
            self._record(self._call(protocol, started, t0, requested, status=failure.status, attempts=1, usage=Usage(),
                                    response_bytes=0, translated=True, error=str(failure), **record))
            return error_response(protocol, failure.status, str(failure))
        if result.stream is None:
            self._record(self._call(protocol, started, t0, requested, status=200, attempts=1, usage=result.usage,
                                    response_bytes=len(result.content), translated=True, error=None, **record))
            return Response(result.content, media_type="application/json")
        parser = SSEUsageParser(protocol)
        events = result.stream

        async def relay_stream() -> AsyncIterator[bytes]:
            sent, error = 0, None
            try:
                async for chunk in events:
                    parser.feed(chunk)
                    sent += len(chunk)
                    yield chunk
            except Exception as failure:  # noqa: BLE001 - recorded; the stream just ends
                error = f"translation stream failed: {failure}"
                logger.warning("cell %s: %s", self.cell_id, error)
            finally:
                self._record(self._call(protocol, started, t0, requested, status=200, attempts=1, usage=parser.close(),
                                        response_bytes=sent, translated=True, error=error, **record))

        return StreamingResponse(relay_stream(), media_type="text/event-stream")
