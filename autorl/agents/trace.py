"""The agent's JSON output stream, parsed into the cell's normalised trace (``trace.jsonl``).

Each CLI prints its own event format on stdout (Codex ``--json``, Claude Code ``stream-json``,
Gemini CLI ``stream-json``, OpenCode ``--format json``, OpenHands ``--json``); the parsers in
:mod:`autorl.agents.streams` turn each event into zero or more normalised events:

``{"seq", "agent", "kind", "raw_type", ...}`` with ``kind`` one of ``session``, ``message``
(``role``, ``text``; a message streamed in chunks is one message), ``reasoning`` (``text``),
``tool_call`` (``tool``, ``call_id``, ``input``), ``tool_result`` (``call_id``, ``output``,
``status``), ``usage`` (``tokens_in``, ``tokens_out``, ``scope``: ``step`` to add up or ``total``
for a CLI's own running total), ``warning`` and ``error`` (``text``) and ``result`` (``status``).
``raw_type`` is the CLI's own name of the event (its ``type``, or OpenHands' ``kind``).

Lines that are not JSON objects (stderr noise shares ``agent.log``) are counted, not parsed;
a malformed event never stops the parse. The follower tails ``agent.log`` while the agent runs,
so the trace grows live and survives a killed agent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autorl.agents.base import agent_stream_parser
from autorl.agents.streams import StreamParser

_POLL_S = 1.0
# A line of the agent's stream longer than this is cut to it before parsing (a CLI's longest JSON
# event, a big tool output, stays far below): the follower runs outside the agent's cgroup, and an
# agent that prints gigabytes without a newline must not grow its memory.
MAX_LINE_BYTES = 4 << 20
# Read the log in pieces of this size, so one poll never holds more than a piece and a line.
_READ_BYTES = 8 << 20


@dataclass
class TraceStats:
    """Counts of what the trace holds (the trace-side token counts included)."""

    events: int = 0
    messages: int = 0
    tool_calls: int = 0
    step_in: int = 0
    step_out: int = 0
    total_in: int | None = None
    total_out: int | None = None
    unparsed_lines: int = 0

    @property
    def tokens_in(self) -> int:
        """Input tokens: the CLI's own total when it reports one, else the sum of its steps."""
        return self.total_in if self.total_in is not None else self.step_in

    @property
    def tokens_out(self) -> int:
        """Output tokens, like :attr:`tokens_in`."""
        return self.total_out if self.total_out is not None else self.step_out


class TraceParser:
    """Turns lines of one agent's output into normalised events, keeping :class:`TraceStats`.

    Args:
        stream: The agent's stream parser, or the name of a registered agent whose parser it is.
        agent: Agent name, written into every event.

    Raises:
        ConfigError: Unknown agent ("did you mean" and the known ones), or one without a stream.
    """

    def __init__(self, stream: str | StreamParser, agent: str) -> None:
        self.parse_event = agent_stream_parser(stream) if isinstance(stream, str) else stream
        self.agent = agent
        self.stats = TraceStats()

    def line(self, line: str) -> list[dict[str, Any]]:
        """The normalised events of one output line (none for noise)."""
        text = line.strip()
        if not text:
            return []
        try:
            event = json.loads(text)
        except json.JSONDecodeError:
            self.stats.unparsed_lines += 1
            return []
        if not isinstance(event, dict):
            self.stats.unparsed_lines += 1
            return []
        raw_type = (
            event["type"] if "type" in event else event.get("kind")
        )  # OpenHands names its events by `kind`
        try:
            produced = self.parse_event(event)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            produced = [{"kind": "error", "text": f"unparseable {raw_type!r} event: {error}"}]
        return self._emit(produced, raw_type)

    def finish(self) -> list[dict[str, Any]]:
        """The events the parser still held when the stream ended (a message still streaming)."""
        return self._emit(self.parse_event.flush(), None)

    def _emit(self, produced: list[dict[str, Any]], raw_type: Any) -> list[dict[str, Any]]:
        out = []
        for item in produced:
            self._count(item)
            # A parser that emits an event for an earlier raw event names its type itself.
            out.append({"seq": self.stats.events, "agent": self.agent, "raw_type": raw_type} | item)
        return out

    def _count(self, item: dict[str, Any]) -> None:
        stats = self.stats
        stats.events += 1
        kind = item["kind"]
        if kind == "message" and item.get("role") == "assistant":
            stats.messages += 1
        elif kind == "tool_call":
            stats.tool_calls += 1
        elif kind == "usage":
            if item.get("scope") == "total":
                stats.total_in, stats.total_out = int(item["tokens_in"]), int(item["tokens_out"])
            else:
                stats.step_in += int(item["tokens_in"])
                stats.step_out += int(item["tokens_out"])


def parse_file(
    log_path: Path, trace_path: Path, stream: str | StreamParser, agent: str
) -> TraceStats:
    """Parse a whole output file into ``trace_path`` (replacing it); returns the stats."""
    parser = TraceParser(stream, agent)
    with (
        open(log_path, encoding="utf-8", errors="replace") as src,
        open(trace_path, "w", encoding="utf-8") as out,
    ):
        for line in src:
            for event in parser.line(line):
                out.write(json.dumps(event) + "\n")
        for event in parser.finish():
            out.write(json.dumps(event) + "\n")
    return parser.stats


class TraceFollower:
    """Tails ``agent.log`` on a thread while the agent runs and appends to ``trace.jsonl``.

    ``on_events``, when given, also receives each poll's new events (on the follower's thread;
    it must return quickly: the live forwarder only queues them).
    """

    def __init__(
        self,
        log_path: Path,
        trace_path: Path,
        stream: str | StreamParser,
        agent: str,
        on_events: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> None:
        """Prepare; :meth:`start` begins tailing."""
        self.log_path = log_path
        self.trace_path = trace_path
        self.parser = TraceParser(stream, agent)
        self.on_events = on_events
        self._stop = threading.Event()
        self._offset = 0
        self._pending = b""
        self._thread = threading.Thread(target=self._run, name="agent-trace", daemon=True)

    def start(self) -> None:
        """Start tailing (the log may not exist yet; what an earlier attempt left in it is
        skipped)."""
        self.trace_path.write_text("")
        self._offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._thread.start()

    def stop(self) -> TraceStats:
        """Read what is left, stop, and return the stats."""
        self._stop.set()
        self._thread.join(timeout=30)
        self._drain(final=True)
        return self.parser.stats

    def _run(self) -> None:
        while not self._stop.wait(_POLL_S):
            self._drain(final=False)

    def _drain(self, final: bool) -> None:
        if not self.log_path.exists():
            return
        with open(self.log_path, "rb") as src, open(self.trace_path, "a", encoding="utf-8") as out:
            src.seek(self._offset)
            while data := src.read(_READ_BYTES):
                self._offset += len(data)
                self._parse(data.split(b"\n"), out)
            if final:
                self._parse([], out, final=True)
                self._write(self.parser.finish(), out)

    def _parse(self, pieces: list[bytes], out: Any, final: bool = False) -> None:
        """Parse the complete lines in ``pieces`` (the log's next bytes split at newlines)."""
        if pieces:
            pieces[0] = self._pending + pieces[0]
            # The last piece is a line still being written; at the end it is a line of its own.
            self._pending = pieces.pop()[
                : MAX_LINE_BYTES + 1
            ]  # past the cap: unparsed once it ends
        elif final:
            pieces, self._pending = [self._pending], b""
        events: list[dict[str, Any]] = []
        for raw in pieces:
            if len(raw) > MAX_LINE_BYTES:
                self.parser.stats.unparsed_lines += 1
                continue
            events += self.parser.line(raw.decode("utf-8", errors="replace"))
        self._write(events, out)

    def _write(self, events: list[dict[str, Any]], out: Any) -> None:
        """Append ``events`` to the trace and hand them to ``on_events``."""
        for event in events:
            out.write(json.dumps(event) + "\n")
        if events and self.on_events is not None:
            self.on_events(events)
