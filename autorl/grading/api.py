"""The cell's grading API (SPEC §5): FastAPI on loopback with a bearer token, served by uvicorn.

Endpoints: ``POST /submit``, ``GET /submissions``, ``GET /submissions/{id}``, ``GET /time``,
``GET /health``. There is deliberately no endpoint that sets or changes the baseline.
"""

from __future__ import annotations

import hmac
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.responses import Response

from autorl.grading.model_checks import SubmissionRejected
from autorl.grading.service import QueueFull, SubmissionService
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
) -> FastAPI:
    """Build the grading app of one cell."""
    app = FastAPI(title="autorl grading API", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(_GuardMiddleware, token=token, max_body_bytes=max_body_bytes)

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


class GradingServer:
    """Runs a grading app with uvicorn on a background thread, on a free loopback port."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1") -> None:
        """Pick a free port; call :meth:`start` to serve."""
        self.host = host
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            self.port = int(probe.getsockname()[1])
        config = uvicorn.Config(app, host=host, port=self.port, log_level="warning", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="grading-api", daemon=True)

    @property
    def url(self) -> str:
        """Base URL of the server."""
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 15.0) -> None:
        """Start serving and wait until the server accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"grading API did not start on {self.url} within {timeout} s")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop serving and join the thread."""
        self._server.should_exit = True
        self._thread.join(timeout=10)
