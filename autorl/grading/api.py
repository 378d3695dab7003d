"""The cell's grading API (SPEC §5): FastAPI on loopback with a bearer token, served by uvicorn.

Endpoints: ``POST /submit``, ``GET /submissions``, ``GET /submissions/{id}``, ``GET /time``,
``GET /health``, and for interactive tasks the env endpoints (:func:`add_env_routes`). There is
deliberately no endpoint that sets or changes the baseline.
"""

from __future__ import annotations

import hmac
import json
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.responses import Response

from autorl.envs.training import TrainingEnvs
from autorl.grading.model_checks import SubmissionRejected
from autorl.grading.service import QueueFull, SubmissionService
from autorl.serving import ServerThread, bind_tcp
from autorl.workspace.run_meta import RunMeta

logger = logging.getLogger(__name__)

_SUBMIT_FIELDS = {"model_path", "wait"}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class _GuardMiddleware(BaseHTTPMiddleware):
    """Token check and body-size cap before any handler runs."""

    def __init__(self, app: Any, token: str, max_body_bytes: int) -> None:
        super().__init__(app)
        self.token = token
        self.max_body_bytes = max_body_bytes

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), self.token):
            return _error(401, "missing or wrong bearer token: send 'Authorization: Bearer $GRADING_TOKEN'")
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            return _error(413, f"request body over {self.max_body_bytes} bytes; send only {{\"model_path\": ...}}")
        return await call_next(request)


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
    """Build the grading app of one cell (``envs``: the training episodes of an interactive task)."""
    app = FastAPI(title="autorl grading API", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(_GuardMiddleware, token=token, max_body_bytes=max_body_bytes)
    add_env_routes(app, envs)

    @app.post("/submit")
    async def submit(request: Request) -> JSONResponse:
        raw = await request.body()
        # Waiting for a score blocks; do it on the thread pool, not on the event loop.
        return await run_in_threadpool(_submit, raw)

    def _submit(raw: bytes) -> JSONResponse:
        if len(raw) > max_body_bytes:
            return _error(413, f"request body over {max_body_bytes} bytes")
        try:
            payload = json.loads(raw or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            return _error(400, f"body is not valid JSON ({error}); send {{\"model_path\": \"output/v1\"}}")
        if not isinstance(payload, dict):
            return _error(400, 'body must be a JSON object like {"model_path": "output/v1"}')
        unknown = sorted(set(payload) - _SUBMIT_FIELDS)
        if unknown:
            return _error(400, f"unknown field(s) {unknown}; allowed fields: {sorted(_SUBMIT_FIELDS)}")
        if "model_path" not in payload:
            return _error(400, 'missing "model_path"; send {"model_path": "output/v1"}')
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
            return JSONResponse({"submission_id": submission_id, "status": "queued"}, status_code=202)
        service.wait(submission_id, submit_timeout_s())
        return JSONResponse(service.response(submission_id))

    @app.get("/submissions")
    def submissions() -> JSONResponse:
        return JSONResponse({"submissions": service.responses()})

    @app.get("/submissions/{submission_id}")
    def submission(submission_id: int) -> JSONResponse:
        body = service.response(submission_id)
        if body is None:
            return _error(404, f"no submission {submission_id}; GET /submissions lists this cell's submissions")
        return JSONResponse(body)

    @app.get("/time")
    def time_left() -> JSONResponse:
        meta = run_meta.snapshot()
        now = time.time()
        working = None
        if meta["start_time"] is not None:
            working = max(0.0, (meta["end_time"] or now) - meta["start_time"] - service.queue_wait_s())
        return JSONResponse(meta | {"now": now, "remaining": run_meta.remaining(now), "working_time": working})

    @app.get("/health")
    def health() -> JSONResponse:
        return JSONResponse({"status": "ok", "task": task_id, "queued": service.queued()} | health_extra())

    return app


def _json_body(raw: bytes, fields: set[str]) -> dict[str, Any] | JSONResponse:
    try:
        payload = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return _error(400, f"body is not valid JSON ({error})")
    if not isinstance(payload, dict):
        return _error(400, f"body must be a JSON object with {sorted(fields)}")
    unknown = sorted(set(payload) - fields)
    if unknown:
        return _error(400, f"unknown field(s) {unknown}; allowed fields: {sorted(fields)}")
    return payload


def add_env_routes(app: FastAPI, envs: TrainingEnvs | None) -> None:
    """Env endpoints for online rollouts on the training split (SPEC §6.3).

    ``GET /env/episodes``; ``POST /env/reset {"episode_id": "train/…"}`` (evaluation episodes get
    403); ``POST /env/step {"session_id", "action"}``; ``POST /env/close {"session_id"}``. Each
    answers ``observation, reward, done, admissible_actions, info`` where it applies.
    """
    from autorl.envs.base import EnvError
    from autorl.envs.training import EpisodeRefused, TooManySessions, UnknownEpisode

    if envs is not None:
        app.router.on_shutdown.append(envs.close_all)  # the cell is over: free its places in the EnvPool

    def guarded(handler: Callable[[dict[str, Any]], dict[str, Any]], raw: bytes, fields: set[str]) -> JSONResponse:
        if envs is None:
            return _error(404, "this task has no environment: env endpoints exist only for interactive tasks")
        payload = _json_body(raw, fields)
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
            return _error(409, str(error))

    @app.get("/env/episodes")
    def env_episodes() -> JSONResponse:
        if envs is None:
            return _error(404, "this task has no environment: env endpoints exist only for interactive tasks")
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
        return await run_in_threadpool(guarded, do_reset, await request.body(), {"episode_id"})

    @app.post("/env/step")
    async def env_step(request: Request) -> JSONResponse:
        return await run_in_threadpool(guarded, do_step, await request.body(), {"session_id", "action"})

    @app.post("/env/close")
    async def env_close(request: Request) -> JSONResponse:
        return await run_in_threadpool(guarded, do_close, await request.body(), {"session_id"})


class GradingServer(ServerThread):
    """The grading API served on a background thread (:class:`autorl.serving.ServerThread`).

    Args:
        app: The app from :func:`create_app`.
        host: Loopback address to bind when no ``sock`` is given (a free port on it).
        sock: An already-bound socket to serve on instead (e.g. a unix socket).
    """

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", *, sock: socket.socket | None = None) -> None:
        super().__init__(app, sock if sock is not None else bind_tcp(host), name="grading-api")
