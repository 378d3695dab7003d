"""Parsers of each CLI's JSON event stream into normalised trace events (see autorl.agents.trace).

One class per format; an instance keeps what it needs across events (e.g. which tool calls were
already announced). A CLI adapter names its parser (``CLIAgent.parser``): a plugin's CLI brings a
parser of its own the same way. Formats are those of the pinned CLI versions; samples recorded
from the real CLIs are in tests/fixtures/agent_streams/<agent>.jsonl.
"""

from __future__ import annotations

import json
from typing import Any

_MAX_TEXT = 4000

Event = dict[str, Any]


def _clip(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return (
        text
        if len(text) <= _MAX_TEXT
        else text[:_MAX_TEXT] + f"... [{len(text) - _MAX_TEXT} more chars]"
    )


def _n(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


class StreamParser:
    """Base of the parsers: called once per JSON event; :meth:`flush` when the stream ends."""

    def __call__(self, event: Event) -> list[Event]:
        """The normalised events of one JSON event of the stream."""
        raise NotImplementedError

    def flush(self) -> list[Event]:
        """What the parser still holds once the stream has ended (a message still streaming)."""
        return []


class CodexStream(StreamParser):
    """``codex exec --json``: thread/turn/item events; usage per turn on ``turn.completed``."""

    _TOOLS = {
        "command_execution": "shell",
        "mcp_tool_call": "mcp",
        "web_search": "web_search",
        "file_change": "apply_patch",
    }

    def __init__(self) -> None:
        self.announced: set[str] = set()

    def _call(self, item: Event) -> Event:
        kind = item["type"]
        if kind == "command_execution":
            tool_input: Any = {"command": item.get("command")}
        elif kind == "mcp_tool_call":
            tool_input = {
                "server": item.get("server"),
                "tool": item.get("tool"),
                "arguments": item.get("arguments"),
            }
        elif kind == "web_search":
            tool_input = {"query": item.get("query")}
        else:
            tool_input = {"changes": item.get("changes")}
        self.announced.add(item["id"])
        return {
            "kind": "tool_call",
            "tool": self._TOOLS[kind],
            "call_id": item["id"],
            "input": tool_input,
        }

    def __call__(self, event: Event) -> list[Event]:
        kind = event["type"]
        if kind == "thread.started":
            return [{"kind": "session", "session_id": event.get("thread_id")}]
        if kind == "turn.completed":
            usage = event.get("usage") or {}
            return [
                {
                    "kind": "usage",
                    "scope": "step",
                    "tokens_in": _n(usage.get("input_tokens")),
                    "tokens_out": _n(usage.get("output_tokens")),
                    "cached_in": _n(usage.get("cached_input_tokens")),
                }
            ]
        if kind in ("turn.failed", "error"):
            message = (
                (event.get("error") or {}).get("message")
                if kind == "turn.failed"
                else event.get("message")
            )
            return [{"kind": "error", "text": _clip(message)}]
        if kind not in ("item.started", "item.completed"):
            return []
        item = event["item"]
        item_type = item.get("type")
        if item_type in self._TOOLS:
            out = [] if item["id"] in self.announced else [self._call(item)]
            if kind == "item.completed":
                output = (
                    item.get("aggregated_output")
                    if item_type == "command_execution"
                    else item.get("result") or item.get("changes")
                )
                out.append(
                    {
                        "kind": "tool_result",
                        "call_id": item["id"],
                        "status": item.get("status"),
                        "exit_code": item.get("exit_code"),
                        "output": _clip(output or ""),
                    }
                )
            return out
        if kind != "item.completed":
            return []
        if item_type == "agent_message":
            return [{"kind": "message", "role": "assistant", "text": _clip(item.get("text", ""))}]
        if item_type == "reasoning":
            return [{"kind": "reasoning", "text": _clip(item.get("text", ""))}]
        if item_type == "error":
            # Codex prints its warnings as error items (exec's JSONL maps EventMsg::Warning to an
            # ErrorItem, e.g. "Model metadata for `m` not found"); its errors are the top-level
            # `error` and `turn.failed` events above.
            return [{"kind": "warning", "text": _clip(item.get("message", ""))}]
        return []


class ClaudeCodeStream(StreamParser):
    """``claude --print --output-format stream-json``: system/assistant/user/result messages.

    An assistant event snapshots its message while it streams (output tokens still partial), so
    per-message usage counts input once per message id; the final ``result`` event carries the
    run's total, which then wins.
    """

    def __init__(self) -> None:
        self.seen_messages: set[str] = set()

    def __call__(self, event: Event) -> list[Event]:
        kind = event["type"]
        if kind == "system" and event.get("subtype") == "init":
            return [
                {
                    "kind": "session",
                    "session_id": event.get("session_id"),
                    "model": event.get("model"),
                }
            ]
        if kind == "result":
            usage = event.get("usage") or {}
            tokens_in = (
                _n(usage.get("input_tokens"))
                + _n(usage.get("cache_read_input_tokens"))
                + _n(usage.get("cache_creation_input_tokens"))
            )
            return [
                {
                    "kind": "usage",
                    "scope": "total",
                    "tokens_in": tokens_in,
                    "tokens_out": _n(usage.get("output_tokens")),
                    "cost_usd_cli": event.get("total_cost_usd"),
                },
                {
                    "kind": "result",
                    "status": event.get("subtype"),
                    "is_error": bool(event.get("is_error")),
                    "text": _clip(event.get("result") or ""),
                    "turns": event.get("num_turns"),
                },
            ]
        message = event.get("message") or {}
        out: list[Event] = []
        for block in (
            message.get("content") or [] if isinstance(message.get("content"), list) else []
        ):
            block_type = block.get("type")
            if kind == "assistant" and block_type == "text":
                out.append(
                    {"kind": "message", "role": "assistant", "text": _clip(block.get("text", ""))}
                )
            elif kind == "assistant" and block_type == "thinking":
                out.append({"kind": "reasoning", "text": _clip(block.get("thinking", ""))})
            elif kind == "assistant" and block_type == "tool_use":
                out.append(
                    {
                        "kind": "tool_call",
                        "tool": block.get("name"),
                        "call_id": block.get("id"),
                        "input": block.get("input"),
                    }
                )
            elif kind == "user" and block_type == "tool_result":
                out.append(
                    {
                        "kind": "tool_result",
                        "call_id": block.get("tool_use_id"),
                        "status": "error" if block.get("is_error") else "success",
                        "output": _clip(block.get("content") or ""),
                    }
                )
        if kind == "assistant" and message.get("id") and message["id"] not in self.seen_messages:
            self.seen_messages.add(message["id"])
            usage = message.get("usage") or {}
            tokens_in = (
                _n(usage.get("input_tokens"))
                + _n(usage.get("cache_read_input_tokens"))
                + _n(usage.get("cache_creation_input_tokens"))
            )
            out.append(
                {
                    "kind": "usage",
                    "scope": "step",
                    "tokens_in": tokens_in,
                    "tokens_out": _n(usage.get("output_tokens")),
                }
            )
        return out


class GeminiStream(StreamParser):
    """``gemini --output-format stream-json``: init/message/tool_use/tool_result/error/result.

    The assistant's reply streams as ``message`` events with ``delta: true``, one per chunk, until
    another event comes: the chunks are joined into one message, written when the next event (or
    the end of the stream) shows it is complete.
    """

    def __init__(self) -> None:
        self.pending: Event | None = None  # the streaming message: its role, chunks and their count

    def flush(self) -> list[Event]:
        """The streaming message, now complete (nothing if none is streaming)."""
        if self.pending is None:
            return []
        pending, self.pending = self.pending, None
        return [
            {
                "kind": "message",
                "role": pending["role"],
                "text": _clip("".join(pending["chunks"])),
                "chunks": len(pending["chunks"]),
                "raw_type": "message",
            }
        ]

    def __call__(self, event: Event) -> list[Event]:
        kind = event["type"]
        content = event.get("content", "")
        if kind == "message" and event.get("delta") and isinstance(content, str):
            if self.pending is not None and self.pending["role"] == event.get("role"):
                self.pending["chunks"].append(content)
                return []
            done = self.flush()
            self.pending = {"role": event.get("role"), "chunks": [content]}
            return done
        return self.flush() + self._event(kind, event)

    @staticmethod
    def _event(kind: str, event: Event) -> list[Event]:
        if kind == "init":
            return [
                {
                    "kind": "session",
                    "session_id": event.get("session_id"),
                    "model": event.get("model"),
                }
            ]
        if kind == "message":
            return [
                {
                    "kind": "message",
                    "role": event.get("role"),
                    "text": _clip(event.get("content", "")),
                }
            ]
        if kind == "tool_use":
            return [
                {
                    "kind": "tool_call",
                    "tool": event.get("tool_name"),
                    "call_id": event.get("tool_id"),
                    "input": event.get("parameters"),
                }
            ]
        if kind == "tool_result":
            output = (
                event.get("output")
                if event.get("output") is not None
                else (event.get("error") or {}).get("message", "")
            )
            return [
                {
                    "kind": "tool_result",
                    "call_id": event.get("tool_id"),
                    "status": event.get("status"),
                    "output": _clip(output),
                }
            ]
        if kind == "error":
            return [{"kind": "error", "text": _clip(event.get("message", ""))}]
        if kind == "result":
            stats = event.get("stats") or {}
            return [
                {
                    "kind": "usage",
                    "scope": "total",
                    "tokens_in": _n(stats.get("input_tokens")),
                    "tokens_out": _n(stats.get("output_tokens")),
                },
                {
                    "kind": "result",
                    "status": event.get("status"),
                    "tool_calls": stats.get("tool_calls"),
                },
            ]
        return []


class OpenCodeStream(StreamParser):
    """``opencode run --format json``: step_start/text/reasoning/tool_use/step_finish/error
    parts."""

    def __call__(self, event: Event) -> list[Event]:
        kind = event["type"]
        part = event.get("part") or {}
        if kind == "text":
            return [{"kind": "message", "role": "assistant", "text": _clip(part.get("text", ""))}]
        if kind == "reasoning":
            return [{"kind": "reasoning", "text": _clip(part.get("text", ""))}]
        if kind == "tool_use":
            state = part.get("state") or {}
            call = {
                "kind": "tool_call",
                "tool": part.get("tool"),
                "call_id": part.get("callID"),
                "input": state.get("input"),
            }
            if state.get("status") not in ("completed", "error"):
                return [call]
            output = (
                state.get("output") if state.get("status") == "completed" else state.get("error")
            )
            return [
                call,
                {
                    "kind": "tool_result",
                    "call_id": part.get("callID"),
                    "status": state.get("status"),
                    "exit_code": (state.get("metadata") or {}).get("exit"),
                    "output": _clip(output or ""),
                },
            ]
        if kind == "step_finish":
            tokens = part.get("tokens") or {}
            cache = tokens.get("cache") or {}
            return [
                {
                    "kind": "usage",
                    "scope": "step",
                    "tokens_in": _n(tokens.get("input"))
                    + _n(cache.get("read"))
                    + _n(cache.get("write")),
                    "tokens_out": _n(tokens.get("output")) + _n(tokens.get("reasoning")),
                    "cached_in": _n(cache.get("read")),
                }
            ]
        if kind == "error":
            error = event.get("error") or {}
            return [
                {
                    "kind": "error",
                    "text": _clip(
                        (error.get("data") or {}).get("message") or error.get("name") or error
                    ),
                }
            ]
        return []


class OpenHandsStream(StreamParser):
    """``openhands --headless --json``: OpenHands SDK events (``kind`` ActionEvent,
    ObservationEvent, MessageEvent, AgentErrorEvent, ...) between lines of console text. The 1.16
    stream carries no token usage (the gateway's count is the one to use); accumulated LLM metrics
    are read where an event has them."""

    def __call__(self, event: Event) -> list[Event]:
        kind = event.get("kind") or event.get("type")
        if kind == "ActionEvent":
            action = event.get("action") or {}
            out: list[Event] = []
            if event.get("thought"):
                thought = event["thought"]
                text = (
                    " ".join(t.get("text", "") for t in thought)
                    if isinstance(thought, list)
                    else str(thought)
                )
                if text.strip():
                    out.append({"kind": "reasoning", "text": _clip(text)})
            arguments = {k: v for k, v in action.items() if k != "kind"}
            if not action:  # the arguments failed validation: keep what the model sent
                raw = (event.get("tool_call") or {}).get("arguments") or "{}"
                arguments = json.loads(raw) if isinstance(raw, str) else raw
            out.append(
                {
                    "kind": "tool_call",
                    "tool": event.get("tool_name") or action.get("kind"),
                    "call_id": event.get("tool_call_id") or event.get("id"),
                    "input": arguments,
                }
            )
            return out + self._usage(event)
        if kind == "ObservationEvent":
            observation = event.get("observation") or {}
            content = observation.get("content")
            output = (
                " ".join(c.get("text", "") for c in content)
                if isinstance(content, list)
                else content
            )
            return [
                {
                    "kind": "tool_result",
                    "call_id": event.get("tool_call_id"),
                    "tool": event.get("tool_name"),
                    "status": "error" if observation.get("is_error") else "success",
                    "exit_code": observation.get("exit_code"),
                    "output": _clip(output or ""),
                }
            ]
        if kind == "MessageEvent":
            message = event.get("llm_message") or {}
            content = message.get("content")
            text = (
                " ".join(c.get("text", "") for c in content)
                if isinstance(content, list)
                else str(content or "")
            )
            role = message.get("role") or event.get("source")
            return [{"kind": "message", "role": role, "text": _clip(text)}] + self._usage(event)
        if kind in ("AgentErrorEvent", "ConversationErrorEvent"):
            return [
                {"kind": "error", "text": _clip(event.get("error") or event.get("detail") or "")}
            ]
        return []

    @staticmethod
    def _usage(event: Event) -> list[Event]:
        metrics = event.get("metrics") or (event.get("llm_response") or {}).get("metrics") or {}
        usage = metrics.get("accumulated_token_usage") or {}
        if not usage:
            return []
        tokens_in = (
            _n(usage.get("prompt_tokens"))
            + _n(usage.get("cache_read_tokens"))
            + _n(usage.get("cache_write_tokens"))
        )
        return [
            {
                "kind": "usage",
                "scope": "total",
                "tokens_in": tokens_in,
                "tokens_out": _n(usage.get("completion_tokens")),
            }
        ]
