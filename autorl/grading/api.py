"""The cell's grading API (docs/design.md#the-grading-api): FastAPI on loopback with a bearer token,
served by uvicorn.

Endpoints: ``POST /submit``, ``GET /submissions``, ``GET /submissions/{id}``, ``GET /time``,
``GET /health``, and for interactive tasks the env endpoints (:func:`add_env_routes`). There is
deliberately no endpoint that sets or changes the baseline.

Every request passes :class:`_Guard` first (token, body size, content encoding), and every body is
parsed by :func:`_json_object`, so any malformed input gets a 4xx whose message says what is wrong
and how to fix it; tests/unit/test_grading_api_fuzz.py sends generated requests to hold that.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import socket
import time
from collections.abc import Callable
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from autorl.envs.training import TrainingEnvs
from autorl.grading.model_checks import SubmissionRejected
from autorl.grading.public_errors import scrub_any_paths
from autorl.grading.service import QueueFull, SubmissionService
from autorl.serving import ServerThread, bind_tcp
from autorl.workspace.run_meta import RunMeta

logger = logging.getLogger(__name__)

_SUBMIT_FIELDS = {"model_path", "wait"}
_SUBMIT_EXAMPLE = '{"model_path": "output/v1"}'
MAX_JSON_DEPTH = 16
"""Deepest nesting of arrays and objects a request body may have (every valid body is one flat
object).
"""
# Longer integers are refused before int() parses them (Python caps int() at 4300 digits).
_MAX_INT_DIGITS = 100
_MAX_ID_DIGITS = 18  # submission ids in a path: longer digit strings name no submission
_DRAIN_BYTES = 1 << 20
_DRAIN_S = 5.0
"""After a refusal, how much more of the body the guard reads (and drops), and for how long, before
it closes.

Closing a connection whose peer is still sending makes the kernel answer with a reset, and a client
that sends its whole body before reading (httpx, requests) then gets "connection reset" instead of
the refusal. Reading on a little lets a body of ordinary size end first; a bigger or stalled one is
cut off.
"""
_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class _Guard:
    """Token check, content-encoding check and body-size cap before any handler runs (pure ASGI).

    The body is read here, counted chunk by chunk as the server receives it, whether it comes with a
    ``Content-Length``, chunked, or with a ``Content-Length`` smaller than what follows (the
    server's HTTP parser then cuts the body at the declared length). Once the count passes
    ``max_body_bytes`` the request is answered 413 at once, and the connection is closed after at
    most :data:`_DRAIN_BYTES` more have been read and dropped (or :data:`_DRAIN_S` seconds have
    passed): nothing past the cap is ever kept. A body within the cap is handed on to the app whole,
    replayed from memory.

    Args:
        app: The app to guard.
        token: The cell's bearer token.
        max_body_bytes: The largest request body accepted.
    """

    def __init__(self, app: ASGIApp, token: str, max_body_bytes: int) -> None:
        self.app = app
        self.token = token.encode()
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse the request, or read its body within the cap and pass it on."""
        if scope["type"] == "websocket":  # no websocket endpoints: refuse before anything else
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.lower(), value)
        refusal = self._refusal(headers)
        if refusal is not None:
            await _refuse(refusal, receive, send, body_done=False)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: nobody to answer
                return
            chunk = message.get("body", b"")
            more = message.get("more_body", False)
            size += len(chunk)
            if size > self.max_body_bytes:
                await _refuse(self._too_large(), receive, send, body_done=not more)
                return
            chunks.append(chunk)
            if not more:
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    def _refusal(self, headers: dict[bytes, bytes]) -> JSONResponse | None:
        """The answer to a request refused on its headers alone, or None."""
        scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
        # Bytes, not str: hmac.compare_digest refuses str with non-ASCII characters (a TypeError, so
        # a 500).
        if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self.token):
            return _error(
                401, "missing or wrong bearer token: send 'Authorization: Bearer $GRADING_TOKEN'"
            )
        encoding = headers.get(b"content-encoding", b"identity").strip().lower()
        if encoding not in (b"identity", b""):
            return _error(
                415,
                f"Content-Encoding {encoding.decode('latin-1')!r} is not supported: send the JSON "
                "body uncompressed, without a Content-Encoding header",
            )
        # uvicorn's parser (h11) has checked the value; the length test spares int() a digit string
        # of any size.
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and (len(declared) > 18 or int(declared) > self.max_body_bytes):
            return self._too_large()
        return None

    def _too_large(self) -> JSONResponse:
        return _error(
            413,
            f"request body over {self.max_body_bytes} bytes: send only a small JSON object such as "
            f"{_SUBMIT_EXAMPLE} (the grader reads the model files from the workspace)",
        )


async def _refuse(answer: JSONResponse, receive: Receive, send: Send, *, body_done: bool) -> None:
    """Send ``answer`` now, read and drop the rest of the body (within :data:`_DRAIN_BYTES`,
    :data:`_DRAIN_S`), then close.

    ``body_done``: the body was already read to its end (the server would wait for a next one).
    """
    headers = [*answer.raw_headers, (b"connection", b"close")]
    await send({"type": "http.response.start", "status": answer.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body, "more_body": True})
    drained = 0
    with anyio.move_on_after(_DRAIN_S):
        while not body_done and drained <= _DRAIN_BYTES:
            message = await receive()
            drained += len(message.get("body", b""))
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then defers to the server's
    (disconnects).
    """
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


def _parse_int(digits: str) -> int:
    if len(digits.lstrip("-")) > _MAX_INT_DIGITS:
        raise ValueError(
            f"an integer with {len(digits)} digits is too large (at most {_MAX_INT_DIGITS})"
        )
    return int(digits)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _parse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON: numbers must be finite")


def _depth(value: Any) -> int:
    """How deeply arrays and objects nest in a parsed JSON value (a scalar is 0), without
    recursion.
    """
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        )
        if children is not None:
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in children)
    return deepest


def _json_object(raw: bytes, fields: set[str], example: str) -> dict[str, Any] | JSONResponse:
    """Parse a request body that must be a JSON object with only ``fields``, or the 400 answer
    saying why not.

    Refused: text that is not UTF-8 (or UTF-16/32, which JSON's encoding detection accepts), invalid
    JSON, NaN and infinite numbers, integers of more than 100 digits, nesting deeper than
    :data:`MAX_JSON_DEPTH`, strings that are not valid Unicode (lone surrogate escapes such as
    ``"\\ud800"``), anything but an object, and unknown fields.

    >>> _json_object(b'{"a": 1}', {"a"}, "{}")
    {'a': 1}
    >>> json.loads(_json_object(b'[' * 5000, {"a"}, "{}").body)["error"][:46]
    'body nests arrays and objects too deeply (more'
    """
    hint = f"send a JSON object such as {example}"
    try:
        text = raw.decode(json.detect_encoding(raw)) if raw else "null"
    except UnicodeDecodeError as error:
        return _error(400, f"body is not UTF-8 text ({error}): {hint}")
    too_deep = _error(
        400, f"body nests arrays and objects too deeply (more than {MAX_JSON_DEPTH} levels): {hint}"
    )
    try:
        payload = json.loads(
            text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant
        )
    except RecursionError:  # deeper than the parser's own limit (about 1,000 levels)
        return too_deep
    except ValueError as error:  # JSONDecodeError, and the refusals of the parse_* hooks
        return _error(400, f"body is not valid JSON ({error}): {hint}")
    if _depth(payload) > MAX_JSON_DEPTH:
        return too_deep
    try:
        json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return _error(
            400,
            "body holds a string that is not valid Unicode (a lone surrogate escape such as "
            f"\\ud800): {hint}",
        )
    if not isinstance(payload, dict):
        if not raw.strip():
            return _error(400, f"body is empty: {hint}")
        return _error(
            400, f"body must be a JSON object, not {_JSON_TYPES.get(type(payload), 'null')}: {hint}"
        )
    unknown = sorted(set(payload) - fields)
    if unknown:
        return _error(400, f"unknown field(s) {unknown}; allowed fields: {sorted(fields)}: {hint}")
    return payload


def _add_error_handlers(app: FastAPI) -> None:
    """Unknown paths, wrong methods and invalid parameters answer ``{"error": ...}`` naming the
    endpoints.
    """

    def endpoints() -> str:
        listed = [
            f"{method} {route.path}"
            for route in app.routes
            if isinstance(route, Route)
            for method in sorted((route.methods or set()) - {"HEAD"})
        ]
        return ", ".join(listed)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        where = f"{request.method} {request.url.path!r}"
        if exc.status_code == 404:
            return _error(404, f"no endpoint {where}; the endpoints are: {endpoints()}")
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            answer = _error(405, f"{where} is not allowed: {request.url.path!r} takes {allowed}")
            answer.headers["Allow"] = allowed
            return answer
        return _error(exc.status_code, f"{where}: {exc.detail}")

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        return _error(
            400,
            f"invalid request {request.method} {request.url.path!r}: {exc}; the endpoints are: "
            f"{endpoints()}",
        )

    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)


def create_app(
    service: SubmissionService,
    run_meta: RunMeta,
    *,
    token: str,
    task_id: str,
    max_body_bytes: int,
    submit_timeout_s: Callable[[], float],
    health_extra: Callable[[], dict[str, Any]] = dict,
    envs: TrainingEnvs | None = None,
) -> FastAPI:
    """Build the grading app of one cell (``envs``: the training episodes of an interactive
    task).
    """
    app = FastAPI(title="autorl grading API", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(_Guard, token=token, max_body_bytes=max_body_bytes)
    _add_error_handlers(app)
    add_env_routes(app, envs)

    @app.post("/submit")
    async def submit(request: Request) -> JSONResponse:
        raw = await request.body()  # within max_body_bytes: _Guard read it
        # Waiting for a score blocks; do it on the thread pool, not on the event loop.
        return await run_in_threadpool(_submit, raw)

    def _submit(raw: bytes) -> JSONResponse:
        payload = _json_object(raw, _SUBMIT_FIELDS, _SUBMIT_EXAMPLE)
        if isinstance(payload, JSONResponse):
            return payload
        if "model_path" not in payload:
            return _error(400, f'missing "model_path"; send {_SUBMIT_EXAMPLE}')
        wait = payload.get("wait", True)
        if not isinstance(wait, bool):
            return _error(400, '"wait" must be true or false')
        try:
            submission_id = service.submit(payload["model_path"])
        except SubmissionRejected as rejected:
            return _error(rejected.status_code, rejected.message)
        except QueueFull as full:
            return _error(429, str(full))
        if not wait:
            return JSONResponse(
                {"submission_id": submission_id, "status": "queued"}, status_code=202
            )
        service.wait(submission_id, submit_timeout_s())
        return JSONResponse(service.response(submission_id))

    @app.get("/submissions")
    def submissions() -> JSONResponse:
        return JSONResponse({"submissions": service.responses()})

    @app.get("/submissions/{submission_id}")
    def submission(submission_id: str) -> JSONResponse:
        # A str parameter, parsed here: ids are small positive whole numbers, and any other text
        # (-1, 1.5, a 5,000-digit number) simply names no submission.
        known = (
            submission_id.isascii()
            and submission_id.isdigit()
            and len(submission_id) <= _MAX_ID_DIGITS
        )
        body = service.response(int(submission_id)) if known else None
        if body is None:
            return _error(
                404,
                f"no submission {submission_id!r}; GET /submissions lists this cell's submissions",
            )
        return JSONResponse(body)

    @app.get("/time")
    def time_left() -> JSONResponse:
        meta = run_meta.snapshot()
        now = time.time()
        working = None
        if meta["start_time"] is not None:
            working = max(
                0.0, (meta["end_time"] or now) - meta["start_time"] - service.queue_wait_s()
            )
        return JSONResponse(
            meta | {"now": now, "remaining": run_meta.remaining(now), "working_time": working}
        )

    @app.get("/health")
    def health() -> JSONResponse:
        return JSONResponse(
            {"status": "ok", "task": task_id, "queued": service.queued()} | health_extra()
        )

    return app


def add_env_routes(app: FastAPI, envs: TrainingEnvs | None) -> None:
    """Env endpoints for online rollouts on the training split (docs/design.md#tasks).

    ``GET /env/episodes``; ``POST /env/reset {"episode_id": "train/…"}`` (evaluation episodes get
    403); ``POST /env/step {"session_id", "action"}``; ``POST /env/close {"session_id"}``. Each
    answers ``observation, reward, done, admissible_actions, info`` where it applies.
    """
    from autorl.envs.base import EnvError
    from autorl.envs.training import EpisodeRefused, TooManySessions, UnknownEpisode

    if envs is not None:
        app.router.on_shutdown.append(
            envs.close_all
        )  # the cell is over: free its places in the EnvPool

    def guarded(
        handler: Callable[[dict[str, Any]], dict[str, Any]],
        raw: bytes,
        fields: set[str],
        example: str,
    ) -> JSONResponse:
        if envs is None:
            return _error(
                404, "this task has no environment: env endpoints exist only for interactive tasks"
            )
        payload = _json_object(raw, fields, example)
        if isinstance(payload, JSONResponse):
            return payload
        try:
            return JSONResponse(handler(payload))
        except EpisodeRefused as refused:
            return _error(403, str(refused))
        except UnknownEpisode as unknown:
            return _error(404, str(unknown))
        except TooManySessions as full:
            return _error(429, str(full))
        except EnvError as error:
            # An environment's message may name the host's folders or servers (its data, its URL):
            # the agent gets it without them, the log keeps it whole.
            logger.info("env request refused: %s", error)
            return _error(409, scrub_any_paths(str(error)))

    @app.get("/env/episodes")
    def env_episodes() -> JSONResponse:
        if envs is None:
            return _error(
                404, "this task has no environment: env endpoints exist only for interactive tasks"
            )
        return JSONResponse(envs.describe())

    def do_reset(payload: dict[str, Any]) -> dict[str, Any]:
        assert envs is not None
        session_id, result = envs.reset(payload.get("episode_id"))
        return {"session_id": session_id, "episode_id": payload["episode_id"], **result.as_dict()}

    def do_step(payload: dict[str, Any]) -> dict[str, Any]:
        assert envs is not None
        if "action" not in payload:
            raise EnvError('missing "action"; send {"session_id": "...", "action": "..."}')
        return envs.step(payload.get("session_id"), payload["action"]).as_dict()

    def do_close(payload: dict[str, Any]) -> dict[str, Any]:
        assert envs is not None
        envs.close(payload.get("session_id"))
        return {"closed": payload.get("session_id")}

    @app.post("/env/reset")
    async def env_reset(request: Request) -> JSONResponse:
        return await run_in_threadpool(
            guarded, do_reset, await request.body(), {"episode_id"}, '{"episode_id": "train/0"}'
        )

    @app.post("/env/step")
    async def env_step(request: Request) -> JSONResponse:
        return await run_in_threadpool(
            guarded,
            do_step,
            await request.body(),
            {"session_id", "action"},
            '{"session_id": "s1", "action": "..."}',
        )

    @app.post("/env/close")
    async def env_close(request: Request) -> JSONResponse:
        return await run_in_threadpool(
            guarded, do_close, await request.body(), {"session_id"}, '{"session_id": "s1"}'
        )


class GradingServer(ServerThread):
    """The grading API served on a background thread (:class:`autorl.serving.ServerThread`).

    Args:
        app: The app from :func:`create_app`.
        host: Loopback address to bind when no ``sock`` is given (a free port on it).
        sock: An already-bound socket to serve on instead (e.g. a unix socket).
    """

    def __init__(
        self, app: FastAPI, host: str = "127.0.0.1", *, sock: socket.socket | None = None
    ) -> None:
        super().__init__(app, sock if sock is not None else bind_tcp(host), name="grading-api")
