"""A fake LLM: a scripted server that speaks the real wire protocols, standing in for a paid driver
API.

The paid APIs (OpenAI, Anthropic, Google) cannot be reached from CI and would cost money, so tests
point a real agent CLI (through the cell's driver gateway, which forwards each call here with the
driver key) at this server instead. It is not a model: it replays a fixed script. It serves:

- ``POST /v1/chat/completions`` (OpenAI chat completions, JSON or SSE with tool_calls deltas),
- ``POST /v1/responses`` (OpenAI Responses, JSON or SSE ``response.*`` events),
- ``POST /v1/messages`` (Anthropic Messages, JSON or SSE ``message_*``/``content_block_*`` events),
- ``POST /v1beta/models/{model}:generateContent`` / ``:streamGenerateContent`` (Gemini, JSON or
SSE).

It replays a script of shell steps as tool calls in whatever shell tool the client advertises
(``exec_command`` for Codex, ``Bash`` for Claude Code, ``run_shell_command`` for the Gemini CLI,
``bash`` for OpenCode, ``terminal`` for OpenHands), filling the tool's own parameter schema. The
step to send is the number of tool calls already in the conversation, so the server is stateless
and a retried request gets the same answer. Requests without a shell tool (a CLI's side calls,
e.g. title generation) get a short text answer. After the last step it answers with the script's
final message. Every request is appended to ``log_path``.

Run standalone: ``python tests/helpers/replay_llm_server.py --script s.json --port 8000``.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

# Codex's exec_command returns after at most 30 s with "Process running with session ID N"; a real
# model then polls the session with write_stdin until the command exits, and so does the replay.
POLL_TOOL = "write_stdin"
_RUNNING = re.compile(r"Process running with session ID (\d+)")
SHELL_TOOLS = (
    "exec_command",
    "shell_command",
    "shell",
    "bash",
    "Bash",
    "run_shell_command",
    "execute_bash",
    "terminal",
)
_LONG_MS = 600_000


def _tool_specs(protocol: str, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Tool name → JSON schema of its parameters, from the request's tool list."""
    specs: dict[str, dict[str, Any]] = {}
    for tool in body.get("tools") or []:
        if protocol == "chat" and isinstance(tool.get("function"), dict):
            specs[tool["function"]["name"]] = tool["function"].get("parameters") or {}
        elif protocol == "responses" and tool.get("type") == "function":
            specs[tool["name"]] = tool.get("parameters") or {}
        elif protocol == "messages" and "name" in tool:
            specs[tool["name"]] = tool.get("input_schema") or {}
        elif protocol == "gemini":
            for declaration in tool.get("functionDeclarations") or []:
                specs[declaration["name"]] = (
                    declaration.get("parametersJsonSchema") or declaration.get("parameters") or {}
                )
    return specs


def shell_arguments(schema: dict[str, Any], command: str, step: int) -> dict[str, Any]:
    """Arguments for a shell tool with parameter ``schema`` that run ``command``.

    >>> shell_arguments(
    ...     {"properties": {"command": {"type": "array"}}, "required": ["command"]}, "ls", 0
    ... )
    {'command': ['bash', '-lc', 'ls']}
    >>> shell_arguments(
    ...     {"properties": {"cmd": {"type": "string"}, "yield_time_ms": {"type": "number"}}},
    ...     "ls",
    ...     0,
    ... )
    {'cmd': 'ls', 'yield_time_ms': 600000}
    """
    props = schema.get("properties") or {}
    key = next((k for k in ("cmd", "command") if k in props), "command")
    args: dict[str, Any] = {
        key: ["bash", "-lc", command] if (props.get(key) or {}).get("type") == "array" else command
    }
    for name in ("yield_time_ms", "timeout_ms", "timeout"):
        if name in props:
            args[name] = _LONG_MS
    if "description" in props:
        args["description"] = f"replay step {step + 1}"
    for name in schema.get("required") or []:
        if name not in args:
            prop = props.get(name) or {}
            kind = prop.get("type")
            if prop.get("enum"):
                args[name] = prop["enum"][0]
            else:
                args[name] = (
                    False
                    if kind == "boolean"
                    else 0
                    if kind in ("number", "integer")
                    else []
                    if kind == "array"
                    else "replay"
                )
    return args


def _previous_tool_calls(protocol: str, body: dict[str, Any]) -> int:
    """Script steps already sent: tool calls in the history, polls of a running command excluded."""
    if protocol == "chat":
        return sum(
            1
            for m in body.get("messages") or []
            if m.get("role") == "assistant"
            for call in m.get("tool_calls") or []
            if call.get("function", {}).get("name") != POLL_TOOL
        )
    if protocol == "responses":
        items = body.get("input") if isinstance(body.get("input"), list) else []
        return sum(
            1
            for item in items
            if isinstance(item, dict)
            and item.get("type") in ("function_call", "local_shell_call")
            and item.get("name") != POLL_TOOL
        )
    if protocol == "gemini":
        return sum(
            1
            for content in body.get("contents") or []
            if content.get("role") == "model"
            for part in content.get("parts") or []
            if "functionCall" in part
        )
    count = 0
    for message in body.get("messages") or []:
        if message.get("role") == "assistant" and isinstance(message.get("content"), list):
            count += sum(
                1
                for block in message["content"]
                if isinstance(block, dict) and block.get("type") == "tool_use"
            )
    return count


def _running_session(protocol: str, body: dict[str, Any]) -> int | None:
    """The session id when the last tool output says the command is still running (Responses
    API)."""
    items = (
        body.get("input") if protocol == "responses" and isinstance(body.get("input"), list) else []
    )
    if (
        not items
        or not isinstance(items[-1], dict)
        or items[-1].get("type") != "function_call_output"
    ):
        return None
    output = items[-1].get("output")
    match = _RUNNING.search(output if isinstance(output, str) else json.dumps(output))
    return int(match.group(1)) if match else None


def _sse(event: str | None, payload: dict[str, Any]) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(payload)}\n\n".encode()


class ReplayLLM:
    """The scripted conversation and its protocol encoders.

    Args:
        steps: Shell commands, sent one per turn as tool calls.
        final: The last assistant message, once every step ran.
        log_path: Where each request is appended as one JSON line (protocol, path, body).
        fail_first: Answer the first N requests with HTTP 503 (to exercise retries).
    """

    def __init__(
        self, steps: list[str], final: str, log_path: Path | None = None, fail_first: int = 0
    ) -> None:
        self.steps = steps
        self.final = final
        self.log_path = log_path
        self.fail_first = fail_first
        self.requests = 0
        self._lock = threading.Lock()

    def decide(self, protocol: str, body: dict[str, Any]) -> tuple[str, Any]:
        """``("tool", (name, arguments))`` or ``("text", text)`` for this request."""
        specs = _tool_specs(protocol, body)
        shell = next((name for name in SHELL_TOOLS if name in specs), None)
        if shell is None:
            return "text", "autorl replay"
        running = _running_session(protocol, body)
        if running is not None and POLL_TOOL in specs:
            return "tool", (
                POLL_TOOL,
                {"session_id": running, "chars": "", "yield_time_ms": 300_000},
            )
        index = _previous_tool_calls(protocol, body)
        if index < len(self.steps):
            return "tool", (shell, shell_arguments(specs[shell], self.steps[index], index))
        return "text", self.final

    def app(self) -> FastAPI:
        """The FastAPI app serving the three protocols."""
        app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

        async def handle(protocol: str, request: Request) -> Response:
            body = json.loads(await request.body())
            with self._lock:
                self.requests += 1
                number = self.requests
                if self.log_path is not None:
                    with open(self.log_path, "a") as log:
                        log.write(
                            json.dumps(
                                {
                                    "protocol": protocol,
                                    "path": request.url.path,
                                    "headers": dict(request.headers),
                                    "body": body,
                                }
                            )
                            + "\n"
                        )
            if number <= self.fail_first:
                return JSONResponse(
                    {"error": {"message": "replay: injected overload", "type": "server_error"}},
                    status_code=503,
                )
            kind, value = self.decide(protocol, body)
            tokens_in = max(1, len(json.dumps(body)) // 4)
            tokens_out = max(1, len(json.dumps(value)) // 4)
            encoder = {
                "chat": self._chat,
                "responses": self._responses,
                "messages": self._messages,
                "gemini": self._gemini,
            }[protocol]
            events = list(encoder(body, kind, value, tokens_in, tokens_out))
            if body.get("stream") or request.url.path.endswith(":streamGenerateContent"):
                return StreamingResponse(
                    iter([e for e in events if isinstance(e, bytes)]),
                    media_type="text/event-stream",
                )
            return JSONResponse(events[-1])

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            return await handle("chat", request)

        @app.post("/v1/responses")
        async def responses(request: Request) -> Response:
            return await handle("responses", request)

        @app.post("/v1/messages")
        async def messages(request: Request) -> Response:
            return await handle("messages", request)

        @app.post("/v1beta/models/{target}")
        async def gemini(target: str, request: Request) -> Response:
            return await handle("gemini", request)

        return app

    # Each encoder yields SSE bytes and returns (as the generator's last item) the JSON body.

    def _chat(
        self, body: dict[str, Any], kind: str, value: Any, tokens_in: int, tokens_out: int
    ) -> Iterator[Any]:
        ident, created, model = (
            f"chatcmpl-{uuid.uuid4().hex[:12]}",
            int(time.time()),
            body.get("model", "replay"),
        )
        usage = {
            "prompt_tokens": tokens_in,
            "completion_tokens": tokens_out,
            "total_tokens": tokens_in + tokens_out,
        }
        base = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model}
        if kind == "tool":
            name, args = value
            call = {
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
            yield _sse(
                None,
                base
                | {
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": None},
                            "finish_reason": None,
                        }
                    ]
                },
            )
            yield _sse(
                None,
                base
                | {
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"tool_calls": [call | {"index": 0}]},
                            "finish_reason": None,
                        }
                    ]
                },
            )
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": value}
            yield _sse(
                None,
                base
                | {
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": value},
                            "finish_reason": None,
                        }
                    ]
                },
            )
            finish = "stop"
        yield _sse(None, base | {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            yield _sse(None, base | {"choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"
        yield {
            "id": ident,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }

    def _responses(
        self, body: dict[str, Any], kind: str, value: Any, tokens_in: int, tokens_out: int
    ) -> Iterator[Any]:
        ident, model = f"resp_{uuid.uuid4().hex[:12]}", body.get("model", "replay")
        response: dict[str, Any] = {
            "id": ident,
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
            "model": model,
            "output": [],
        }
        seq = iter(range(1_000))

        def event(kind_: str, **payload: Any) -> bytes:
            return _sse(kind_, {"type": kind_, "sequence_number": next(seq), **payload})

        yield event("response.created", response=response)
        yield event("response.in_progress", response=response)
        if kind == "tool":
            name, args = value
            item = {
                "id": f"fc_{uuid.uuid4().hex[:12]}",
                "type": "function_call",
                "status": "in_progress",
                "call_id": f"call_{uuid.uuid4().hex[:12]}",
                "name": name,
                "arguments": "",
            }
            arguments = json.dumps(args)
            yield event("response.output_item.added", output_index=0, item=item)
            yield event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=0,
                delta=arguments,
            )
            yield event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=0,
                arguments=arguments,
            )
            done = item | {"status": "completed", "arguments": arguments}
        else:
            item = {
                "id": f"msg_{uuid.uuid4().hex[:12]}",
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            part = {"type": "output_text", "text": "", "annotations": []}
            yield event("response.output_item.added", output_index=0, item=item)
            at = {"item_id": item["id"], "output_index": 0, "content_index": 0}
            yield event("response.content_part.added", **at, part=part)
            yield event("response.output_text.delta", **at, delta=value)
            yield event("response.output_text.done", **at, text=value)
            yield event("response.content_part.done", **at, part=part | {"text": value})
            done = item | {"status": "completed", "content": [part | {"text": value}]}
        yield event("response.output_item.done", output_index=0, item=done)
        final = response | {
            "status": "completed",
            "output": [done],
            "usage": {
                "input_tokens": tokens_in,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": tokens_out,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": tokens_in + tokens_out,
            },
        }
        yield event("response.completed", response=final)
        yield final

    def _messages(
        self, body: dict[str, Any], kind: str, value: Any, tokens_in: int, tokens_out: int
    ) -> Iterator[Any]:
        ident, model = f"msg_{uuid.uuid4().hex[:12]}", body.get("model", "replay")
        message: dict[str, Any] = {
            "id": ident,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": tokens_in, "output_tokens": 1},
        }
        yield _sse("message_start", {"type": "message_start", "message": message})
        if kind == "tool":
            name, args = value
            block = {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex[:12]}",
                "name": name,
                "input": {},
            }
            yield _sse(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": block},
            )
            yield _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": json.dumps(args)},
                },
            )
            content, stop = [block | {"input": args}], "tool_use"
        else:
            yield _sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            yield _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": value},
                },
            )
            content, stop = [{"type": "text", "text": value}], "end_turn"
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        yield _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": tokens_out},
            },
        )
        yield _sse("message_stop", {"type": "message_stop"})
        yield message | {
            "content": content,
            "stop_reason": stop,
            "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out},
        }

    def _gemini(
        self, body: dict[str, Any], kind: str, value: Any, tokens_in: int, tokens_out: int
    ) -> Iterator[Any]:
        if kind == "tool":
            name, args = value
            part: dict[str, Any] = {"functionCall": {"name": name, "args": args}}
        else:
            part = {"text": value}
        chunk = {
            "candidates": [
                {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": {
                "promptTokenCount": tokens_in,
                "candidatesTokenCount": tokens_out,
                "totalTokenCount": tokens_in + tokens_out,
            },
            "modelVersion": "replay",
            "responseId": uuid.uuid4().hex[:12],
        }
        yield _sse(None, chunk)
        yield chunk


class ReplayServer:
    """Serves a :class:`ReplayLLM` with uvicorn on a free loopback port, on a background thread."""

    def __init__(self, llm: ReplayLLM, port: int = 0) -> None:
        """Bind now (port 0: any free port); :meth:`start` serves."""
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))
            self.port = probe.getsockname()[1]
        self.llm = llm
        self._server = uvicorn.Server(
            uvicorn.Config(llm.app(), host="127.0.0.1", port=self.port, log_level="warning")
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (with ``/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ReplayServer:
        """Start serving; returns once it accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("replay server did not start")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.should_exit = True
        self._thread.join(timeout=10)


def main() -> None:
    """Serve a script file ``{"steps": [...], "final": "..."}`` until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", type=Path, required=True)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--log", type=Path, default=None)
    args = parser.parse_args()
    script = json.loads(args.script.read_text())
    llm = ReplayLLM(script["steps"], script["final"], args.log)
    uvicorn.run(llm.app(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
