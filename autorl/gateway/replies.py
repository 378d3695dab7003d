"""What the gateway sends back: errors in each protocol's own shape, and streamed answers whose
end is always seen (so every call is recorded and its budget reservation released)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send


def error_response(protocol: str, status: int, message: str) -> JSONResponse:
    """An error in the shape the protocol's clients parse, so the CLI shows the message."""
    if protocol == "messages":
        kind = {401: "authentication_error", 413: "request_too_large", 429: "rate_limit_error"}.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        return JSONResponse(
            {"type": "error", "error": {"type": kind, "message": message}}, status_code=status
        )
    if protocol == "gemini":
        code = {401: "UNAUTHENTICATED", 429: "RESOURCE_EXHAUSTED"}.get(
            status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT"
        )
        return JSONResponse(
            {"error": {"code": status, "message": message, "status": code}}, status_code=status
        )
    kind = {401: "invalid_api_key", 429: "insufficient_quota"}.get(
        status, "server_error" if status >= 500 else "invalid_request_error"
    )
    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": kind}}, status_code=status
    )


class Relay(StreamingResponse):
    """A streamed answer whose ``finish`` runs once the stream is over, whether it was sent to
    the end, the client went away or the body iterator never started (so the call is always
    recorded and its reservation released); ``finish`` must be idempotent."""

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        finish: Callable[[], Awaitable[None]],
        *,
        status_code: int = 200,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            chunks, status_code=status_code, headers=headers, media_type="text/event-stream"
        )
        self._chunks = chunks
        self._finish = finish

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            # Shielded: a disconnect cancels the response's task; the record must still be written.
            with anyio.CancelScope(shield=True):
                aclose = getattr(self._chunks, "aclose", None)
                if aclose is not None:
                    with contextlib.suppress(Exception):
                        await aclose()
                await self._finish()
