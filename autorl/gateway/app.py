"""The gateway's HTTP app and server: routes, token check, budgets, recording.

Routes (the agent's CLI is pointed at ``Gateway.url``):

- ``POST /v1/chat/completions``: OpenAI chat completions (``chat``);
- ``POST /v1/responses``: OpenAI Responses (``responses``);
- ``POST /v1/messages``: Anthropic Messages (``messages``);
- ``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent``: Gemini
  (``gemini``);
- ``POST /v1/messages/count_tokens``, ``POST /v1beta/models/{model}:countTokens``: token counts
  (:mod:`.count`);
- ``GET /v1/models``, ``GET /health``: the driver's model, liveness.

Token counts are answered by the gateway itself with LiteLLM's token counter: no provider call, no
record, no spend.

The agent authenticates with the cell's gateway token in whichever header its CLI uses
(``Authorization: Bearer``, ``x-api-key``, ``x-goog-api-key`` or ``?key=``); it never sees the
provider key.

Everything the agent sends is treated as hostile (docs/threat-model.md): the body is read up to
a size limit, cut to its protocol's allow-list (:mod:`.requests`, the dropped names go into the
call's record), and forwarded with the gateway's own headers and URL (:mod:`.upstream`). Each call
reserves its worst case of the budgets before it is forwarded (:mod:`.budget`), and a stream the
agent closes before the provider reported usage is charged an estimate, never nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import re
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from autorl.gateway import requests, translate
from autorl.gateway.budget import Ledger, Reservation, estimate_tokens, max_output_tokens
from autorl.gateway.count import CountError, count_response, count_tokens
from autorl.gateway.replies import Relay, error_response
from autorl.gateway.settings import DriverSettings
from autorl.gateway.upstream import (
    UpstreamFailure,
    forwarded_query,
    request_headers,
    response_headers,
    send_with_retries,
    upstream_url,
)
from autorl.gateway.usage import SSEUsageParser, Usage, usage_from_json
from autorl.records.types import DriverCall
from autorl.serving import ServerThread, bind_tcp

logger = logging.getLogger(__name__)
# Anthropic's own limit on a Messages request: the largest body a real CLI sends (Claude Code's
# long conversations with images are a few MB) fits, and no provider takes a larger one.
MAX_BODY_BYTES = 32 * 1024 * 1024
# A model name in a Gemini path becomes part of the upstream URL when the model is not enforced.
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_BODY_KINDS: dict[str, requests.BodyKind] = {
    p: p for p in ("chat", "responses", "messages", "gemini")
}
# What a call's record keeps of the model name the agent asked for.
MAX_MODEL_CHARS = 200
STREAM_CUT_SHORT = "stream closed by the client before usage; tokens estimated"
NO_USAGE = "provider reported no usage; tokens estimated"


@dataclass
class _Call:
    """One call in flight: what its record needs, and what it holds of the budgets."""

    protocol: str
    started: float
    t0: float
    requested: str | None
    stream: bool
    request_bytes: int
    reservation: Reservation | None = None
    notes: list[str] = field(default_factory=list)
    relayed: bool = False  # a streamed answer took over recording it


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
        max_body_bytes: Largest request body read; a larger one is answered 413 as soon as it
            passes the limit.
    """

    def __init__(
        self,
        settings: DriverSettings,
        *,
        token: str,
        api_key: str | None,
        cell_id: str,
        sink: Callable[[DriverCall], None],
        host: str = "127.0.0.1",
        sock: socket.socket | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.settings = settings
        self.token = token
        self.api_key = api_key
        self.cell_id = cell_id
        self.sink = sink
        self.max_body_bytes = max_body_bytes
        self.ledger = Ledger(settings)
        self._client: httpx.AsyncClient | None = None
        self.app = self._build_app()
        self.server = ServerThread(
            self.app, sock if sock is not None else bind_tcp(host), name=f"gateway-{cell_id}"
        )

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
        return self.ledger.totals()

    # Recording.

    def _record(
        self,
        call: _Call,
        *,
        status: int,
        attempts: int,
        usage: Usage,
        response_bytes: int,
        translated: bool,
        error: str | None,
    ) -> None:
        """Settle the call's reservation to ``usage``, count it, and send its record to the sink."""
        cost = None
        if usage.tokens_in is not None or usage.tokens_out is not None:
            cost = self.settings.cost(usage.tokens_in or 0, usage.tokens_out or 0)
        self.ledger.settle(
            call.reservation, usage.tokens_in or 0, usage.tokens_out or 0, cost or 0.0
        )
        call.reservation = None  # settled once
        text = "; ".join(([error] if error else []) + call.notes)
        record = DriverCall(
            cell_id=self.cell_id,
            call_id=uuid.uuid4().hex,
            started_at=call.started,
            latency_s=time.monotonic() - call.t0,
            protocol=call.protocol,
            requested_model=call.requested,
            model=self.settings.model,
            status_code=status,
            stream=int(call.stream),
            attempts=attempts,
            tokens_in=usage.tokens_in,
            tokens_out=usage.tokens_out,
            cached_in=usage.cached_in,
            cost_usd=cost,
            request_bytes=call.request_bytes,
            response_bytes=response_bytes,
            translated=int(translated),
            error=text or None,
        )
        try:
            self.sink(record)
        except Exception:  # noqa: BLE001 - a recording failure must not break the agent's call
            logger.exception(
                "could not record driver call %s of cell %s", record.call_id, self.cell_id
            )

    def _charged(
        self, call: _Call, usage: Usage, final: bool, output_chars: int, reason: str
    ) -> Usage:
        """The usage to charge: as reported when ``final``, else at least the input estimate and
        the output actually relayed (``reason`` goes into the record)."""
        if final:
            return usage
        call.notes.append(reason)
        estimated_in = call.reservation.tokens_in if call.reservation is not None else 1
        return Usage(
            tokens_in=max(usage.tokens_in or 0, estimated_in),
            tokens_out=max(usage.tokens_out or 0, estimate_tokens(output_chars)),
            cached_in=usage.cached_in,
        )

    # The app.

    def _authorised(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, bearer = header.partition(" ")
        candidates = [
            bearer.strip() if scheme.lower() == "bearer" else "",
            request.headers.get("x-api-key", ""),
            request.headers.get("x-goog-api-key", ""),
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

        app = FastAPI(
            title="autorl driver gateway",
            docs_url=None,
            redoc_url=None,
            openapi_url=None,
            lifespan=lifespan,
        )

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
            if not _MODEL_NAME.fullmatch(model):
                return error_response(
                    "gemini", 400, f"invalid model name {model[:80]!r} in the path"
                )
            if method == "countTokens":
                return await self.count("gemini", request)
            if method not in ("generateContent", "streamGenerateContent"):
                return error_response(
                    "gemini",
                    404,
                    f"unsupported Gemini method {method!r}; "
                    "use generateContent, streamGenerateContent or countTokens",
                )
            return await self.handle(
                "gemini", request, f"/models/{model}:{method}", path_model=model
            )

        @app.get("/v1/models")
        def models(request: Request) -> JSONResponse:
            if not self._authorised(request):
                return error_response("chat", 401, "missing or wrong gateway token")
            return JSONResponse(
                {
                    "object": "list",
                    "data": [
                        {
                            "id": self.settings.model,
                            "object": "model",
                            "owned_by": self.settings.provider,
                        }
                    ],
                }
            )

        @app.get("/health")
        def health() -> JSONResponse:
            return JSONResponse(
                {"status": "ok", "driver": self.settings.name, "model": self.settings.model}
                | self.totals()
            )

        return app

    async def _read(
        self, protocol: str, request: Request
    ) -> tuple[bytes, dict[str, Any]] | Response:
        """The request's raw body and its JSON object, or the error response (token, size, JSON).

        The body is read chunk by chunk and refused as soon as it passes :attr:`max_body_bytes`
        (or at once when its declared length does), so an oversized body is never held whole.
        """
        if not self._authorised(request):
            return error_response(
                protocol,
                401,
                "missing or wrong gateway token: use the token this cell's agent was given",
            )
        too_large = error_response(protocol, 413, f"request body over {self.max_body_bytes} bytes")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            return too_large
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body_bytes:
                return too_large
            chunks.append(chunk)
        raw = b"".join(chunks)
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            return error_response(protocol, 400, f"request body is not valid JSON: {error}")
        except RecursionError:
            return error_response(protocol, 400, "request body is nested too deeply")
        if not isinstance(body, dict):
            return error_response(protocol, 400, "request body must be a JSON object")
        return raw, body

    def _allowed(
        self, kind: requests.BodyKind, body: dict[str, Any]
    ) -> tuple[dict[str, Any], list[str]]:
        """The body cut to its allow-list, and a note naming what was dropped (logged too).

        Raises:
            requests.RequestError: the body does not fit the protocol's schema.
        """
        allowed, dropped = requests.parse(kind, body)
        if not dropped:
            return allowed, []
        note = "dropped request fields not on the gateway's allow-list: " + ", ".join(dropped)
        logger.warning("cell %s, %s call: %s", self.cell_id, kind, note)
        return allowed, [note[:2000]]

    async def count(self, protocol: str, request: Request) -> Response:
        """Answer a token-count call (:mod:`autorl.gateway.count`); nothing is forwarded or
        recorded."""
        read = await self._read(protocol, request)
        if isinstance(read, Response):
            return read
        try:
            body, _ = self._allowed(
                "messages_count" if protocol == "messages" else "gemini_count", read[1]
            )
        except requests.RequestError as error:
            return error_response(protocol, 400, str(error))
        try:
            # LiteLLM is imported on the first count (seconds) and counting is CPU work: off the
            # event loop.
            tokens = await asyncio.to_thread(count_tokens, protocol, body, self.settings.model)
        except CountError as error:
            return error_response(protocol, 400, str(error))
        return JSONResponse(count_response(protocol, tokens))

    async def handle(
        self, protocol: str, request: Request, suffix: str, path_model: str | None = None
    ) -> Response:
        """Check, cut to the allow-list, reserve, forward (or translate) and record one call."""
        started, t0 = time.time(), time.monotonic()
        read = await self._read(protocol, request)
        if isinstance(read, Response):
            return read
        raw, received = read
        try:
            body, notes = self._allowed(_BODY_KINDS[protocol], received)
        except requests.RequestError as error:
            return error_response(protocol, 400, str(error))
        requested = (
            path_model
            if protocol == "gemini"
            else (str(body["model"]) if body.get("model") is not None else None)
        )
        if requested is not None:  # the agent's string, kept with every call's record: bounded
            requested = requested[:MAX_MODEL_CHARS]
        stream = suffix.endswith(":streamGenerateContent") or body.get("stream") is True
        call = _Call(protocol, started, t0, requested, stream, len(raw), notes=notes)
        if self.settings.enforce_model:
            if protocol == "gemini":
                suffix = suffix.replace(f"/models/{path_model}:", f"/models/{self.settings.model}:")
            else:
                body["model"] = self.settings.model
        if protocol == "chat" and stream:
            body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        payload = json.dumps(body).encode()
        reservation = self.ledger.reservation(
            estimate_tokens(len(payload)),
            max_output_tokens(protocol, body, self.settings.default_max_output_tokens),
        )
        refused = self.ledger.reserve(reservation)
        if refused is not None:
            self._record(
                call,
                status=429,
                attempts=0,
                usage=Usage(),
                response_bytes=0,
                translated=False,
                error=refused,
            )
            return error_response(protocol, 429, refused)
        call.reservation = reservation
        try:
            if protocol not in self.settings.protocols:
                return await self._translated(call, body)
            url = upstream_url(
                self.settings,
                protocol,
                suffix,
                forwarded_query(protocol, request.query_params.multi_items()),
            )
            headers = request_headers(request.headers, protocol, self.api_key)
            return await self._forward(call, url, headers, payload)
        finally:
            if call.reservation is not None and not call.relayed:
                # An unexpected error skipped the record: release what the call held.
                self.ledger.release(call.reservation)
                call.reservation = None

    async def _forward(
        self, call: _Call, url: str, headers: dict[str, str], payload: bytes
    ) -> Response:
        assert self._client is not None, (
            "the gateway's HTTP client is created by the app's lifespan"
        )
        protocol = call.protocol
        try:
            upstream, attempts, retried = await send_with_retries(
                self._client, self.settings, url, headers, payload
            )
        except UpstreamFailure as failure:
            self._record(
                call,
                status=502,
                attempts=failure.attempts,
                usage=Usage(),
                response_bytes=0,
                translated=False,
                error=str(failure),
            )
            return error_response(protocol, 502, str(failure))
        status = upstream.status_code
        relay = response_headers(upstream.headers)
        if "text/event-stream" in upstream.headers.get("content-type", "") and status < 400:
            return self._relay(
                call,
                upstream.aiter_bytes(),
                status=status,
                headers=relay,
                attempts=attempts,
                translated=False,
                close=upstream.aclose,
            )
        try:
            content = await upstream.aread()
        finally:
            await upstream.aclose()
        error = (
            None
            if status < 400
            else f"provider HTTP {status}: {content[:500].decode(errors='replace')}"
        )
        if error and retried:
            error += f" (after retries; previous: {retried})"
        usage = usage_from_json(protocol, content)
        if status < 400:
            reported = usage.tokens_in is not None or usage.tokens_out is not None
            usage = self._charged(call, usage, reported, len(content), NO_USAGE)
        self._record(
            call,
            status=status,
            attempts=attempts,
            usage=usage,
            response_bytes=len(content),
            translated=False,
            error=error,
        )
        return Response(content, status_code=status, headers=relay)

    def _relay(
        self,
        call: _Call,
        source: AsyncIterator[bytes],
        *,
        status: int,
        headers: dict[str, str] | None,
        attempts: int,
        translated: bool,
        close: Callable[[], Awaitable[None]] | None,
    ) -> Response:
        """Stream ``source`` to the agent, reading usage as it passes; recorded when it ends.

        A stream that ends before the provider's final usage event (the agent closed it, or the
        provider's stream broke off) is charged its input estimate and the output relayed so far.
        """
        parser = SSEUsageParser(call.protocol)
        state: dict[str, Any] = {"sent": 0, "error": None, "finished": False}
        call.relayed = True

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in source:
                    parser.feed(chunk)
                    state["sent"] += len(chunk)
                    yield chunk
                # Recorded before the response's last frame, so a client that has read the whole
                # stream finds its call recorded.
                await finish()
            except Exception as failure:  # noqa: BLE001 - recorded; a translated stream just ends
                what = "translation stream" if translated else "provider stream"
                state["error"] = f"{what} failed: {type(failure).__name__}: {failure}"
                logger.warning("cell %s: %s", self.cell_id, state["error"])
                if not translated:
                    raise

        async def finish() -> None:
            if state["finished"]:
                return
            state["finished"] = True
            usage = parser.close()
            usage = self._charged(call, usage, parser.final, parser.output_chars, STREAM_CUT_SHORT)
            self._record(
                call,
                status=status,
                attempts=attempts,
                usage=usage,
                response_bytes=state["sent"],
                translated=translated,
                error=state["error"],
            )
            # The source may be left suspended by a client that went away: close it, and with it
            # the provider's stream, now rather than when it is garbage-collected.
            for closer in (getattr(source, "aclose", None), close):
                if closer is not None:
                    with contextlib.suppress(Exception):
                        await closer()

        return Relay(chunks(), finish, status_code=status, headers=headers)

    async def _translated(self, call: _Call, body: dict[str, Any]) -> Response:
        protocol = call.protocol
        try:
            result = await translate.call(self.settings, protocol, body, self.api_key)
        except translate.TranslationError as failure:
            self._record(
                call,
                status=failure.status,
                attempts=1,
                usage=Usage(),
                response_bytes=0,
                translated=True,
                error=str(failure),
            )
            return error_response(protocol, failure.status, str(failure))
        if result.stream is None:
            usage = result.usage
            reported = usage.tokens_in is not None or usage.tokens_out is not None
            usage = self._charged(call, usage, reported, len(result.content), NO_USAGE)
            self._record(
                call,
                status=200,
                attempts=1,
                usage=usage,
                response_bytes=len(result.content),
                translated=True,
                error=None,
            )
            return Response(result.content, media_type="application/json")
        return self._relay(
            call, result.stream, status=200, headers=None, attempts=1, translated=True, close=None
        )
