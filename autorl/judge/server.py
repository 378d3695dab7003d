"""A small OpenAI-compatible chat-completions server for local judging models.

It implements the part of the API a judge client uses: ``POST /v1/chat/completions`` (non-streaming)
and ``GET /v1/models``, with OpenAI's response and error shapes. Each served model is a callable
from the chat messages to the reply text (a task's rule-based judging model, for example).
:class:`LocalJudgeServer` serves it on a free loopback port (:mod:`autorl.serving`: the port is
bound once and handed to uvicorn, no race) in a background thread for as long as a ``with`` block
lasts.
"""

# No `from __future__ import annotations` here: FastAPI must see the request model classes
# defined inside create_app() as real annotations, not strings.
import time
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any

from autorl.engine.base import ChatMessage
from autorl.serving import ServerThread, bind_tcp

JudgingModel = Callable[[list[ChatMessage]], str]


def create_app(models: dict[str, JudgingModel]) -> Any:
    """A FastAPI app serving ``models`` (name -> callable) under ``/v1``."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel, ConfigDict

    class Message(BaseModel):
        model_config = ConfigDict(extra="allow")
        role: str
        content: str

    class ChatRequest(BaseModel):
        model_config = ConfigDict(
            extra="allow"
        )  # temperature, max_tokens, ...: accepted, not needed
        model: str
        messages: list[Message]
        stream: bool = False

    app = FastAPI(title="autorl local judge")

    def error(status: int, message: str, kind: str) -> JSONResponse:
        return JSONResponse(
            {"error": {"message": message, "type": kind, "param": None, "code": None}}, status
        )

    @app.get("/v1/models")
    def list_models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": name, "object": "model", "owned_by": "autorl"} for name in models],
        }

    # Sync handler on purpose: FastAPI runs it in a thread pool, so requests are served
    # concurrently.
    @app.post("/v1/chat/completions", response_model=None)
    def chat_completions(request: ChatRequest) -> Any:
        if request.model not in models:
            return error(
                404,
                f"The model '{request.model}' does not exist; served: {', '.join(models)}",
                "invalid_request_error",
            )
        if request.stream:
            return error(
                400, "stream=true is not supported by this server", "invalid_request_error"
            )
        messages: list[ChatMessage] = [
            {"role": m.role, "content": m.content} for m in request.messages
        ]
        reply = models[request.model](messages)
        prompt_tokens = sum(len(m["content"].split()) for m in messages)
        completion_tokens = len(reply.split())
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    return app


class LocalJudgeServer:
    """Serve judging models on ``127.0.0.1:<free port>`` inside a ``with`` block.

    Example:
        >>> with LocalJudgeServer({"echo": lambda messages: messages[-1]["content"]}) as server:
        ...     server.base_url.startswith("http://127.0.0.1:")
        True
    """

    def __init__(self, models: dict[str, JudgingModel], *, start_timeout_s: float = 30.0) -> None:
        """Remember what to serve; nothing starts before ``__enter__``."""
        self.models = models
        self.start_timeout_s = start_timeout_s
        self.base_url = ""
        self._server: ServerThread | None = None

    def __enter__(self) -> "LocalJudgeServer":
        """Bind a free loopback port, start uvicorn in a thread and wait until it accepts
        requests.
        """
        sock = bind_tcp(
            "127.0.0.1", 0
        )  # port 0: the kernel picks a free port, no race with other servers
        self._server = ServerThread(
            create_app(self.models),
            sock,
            name=f"local-judge-{sock.getsockname()[1]}",
            lifespan="off",
        )
        self._server.start(timeout=self.start_timeout_s)
        self.base_url = f"{self._server.url}/v1"
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server and wait for its thread."""
        if self._server is not None:
            self._server.stop(timeout=30)
