"""Parsing each CLI's JSON stream into the normalised trace, on output recorded from the real CLIs.

The samples in tests/fixtures/agent_streams/ were recorded from the pinned CLIs (Codex 0.169.0,
Claude Code 2.1.332, Gemini CLI 0.61.0, OpenCode 1.18.33
and OpenHands CLI 1.16.0) running against the replay LLM server with the same two-step script
(write code/train.py, run it). OpenHands prints console text between its JSON events and no
token usage.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from autorl.agents.cli import cli_agent_names
from autorl.agents.trace import TraceFollower, TraceParser, parse_file
from autorl.errors import ConfigError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agent_streams"
# (tool calls, trace-side tokens in, tokens out, console lines) as the recordings state them.
EXPECTED = {
    "codex": (2, 30544, 47, 0),
    "claude-code": (2, 37512, 58, 0),
    "gemini-cli": (2, 36920, 55, 0),
    "opencode": (2, 7431 + 7512 + 7582, 24 + 16 + 2, 0),
    "openhands": (2, 0, 0, 17),
}


@pytest.mark.parametrize("fmt", cli_agent_names())
def test_recorded_stream_parses_into_tool_calls_results_and_usage(fmt: str, tmp_path: Path) -> None:
    stats = parse_file(FIXTURES / f"{fmt}.jsonl", tmp_path / "trace.jsonl", fmt, fmt)
    events = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    calls = [e for e in events if e["kind"] == "tool_call"]
    results = [e for e in events if e["kind"] == "tool_result"]
    tool_calls, tokens_in, tokens_out, console_lines = EXPECTED[fmt]
    assert stats.tool_calls == len(calls) == tool_calls
    assert "code/train.py" in json.dumps(
        calls[0]["input"]
    ) and "python3 code/train.py" in json.dumps(calls[1]["input"])
    assert {r["call_id"] for r in results} == {c["call_id"] for c in calls}
    assert any("42" in r["output"] for r in results)
    assert (stats.tokens_in, stats.tokens_out) == (tokens_in, tokens_out)
    assert stats.messages >= 1 and stats.unparsed_lines == console_lines
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)) and all(
        e["agent"] == fmt for e in events
    )


def test_every_cli_adapter_brings_its_parser_and_an_unknown_agent_is_a_helpful_error() -> None:
    from autorl.agents.base import load_adapter
    from autorl.config import compose
    from autorl.registry import option_names

    adapters = {
        name: load_adapter(compose([f"agent={name}"]).agent) for name in option_names("agent")
    }
    streaming = {name for name, adapter in adapters.items() if adapter.stream_parser() is not None}
    assert streaming == set(cli_agent_names()) == set(EXPECTED)  # scripted and command have none
    with pytest.raises(ConfigError, match="unknown agent 'codx'. Did you mean: codex"):
        TraceParser("codx", "codex")
    with pytest.raises(ConfigError, match="agent 'scripted' writes no output stream"):
        TraceParser("scripted", "scripted")


def test_noise_and_malformed_events_are_counted_not_fatal() -> None:
    parser = TraceParser("codex", "codex")
    assert parser.line("Reading additional input from stdin...") == []
    assert parser.line("[1, 2]") == []
    broken = parser.line(json.dumps({"type": "item.completed", "item": "not an object"}))
    assert broken[0]["kind"] == "error" and "unparseable" in broken[0]["text"]
    assert parser.stats.unparsed_lines == 2


def test_codex_announces_a_running_command_once() -> None:
    parser = TraceParser("codex", "codex")
    item = {
        "id": "item_1",
        "type": "command_execution",
        "command": "sleep 100",
        "aggregated_output": "",
        "status": "in_progress",
    }
    started = parser.line(json.dumps({"type": "item.started", "item": item}))
    done = parser.line(
        json.dumps(
            {"type": "item.completed", "item": item | {"status": "completed", "exit_code": 0}}
        )
    )
    assert [e["kind"] for e in started] == ["tool_call"] and [e["kind"] for e in done] == [
        "tool_result"
    ]


def test_follower_tails_the_log_while_it_grows(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text("output of an earlier attempt\n")
    follower = TraceFollower(log, tmp_path / "trace.jsonl", "gemini-cli", "gemini-cli")
    follower.start()
    lines = (FIXTURES / "gemini-cli.jsonl").read_text().splitlines(keepends=True)

    def agent() -> None:
        with open(log, "a") as out:
            for line in lines:
                # Half a line first: the follower must wait for the rest.
                out.write(line[:10])
                out.flush()
                time.sleep(0.05)
                out.write(line[10:])
                out.flush()

    writer = threading.Thread(target=agent)
    writer.start()
    writer.join()
    stats = follower.stop()
    assert stats.tool_calls == 2 and stats.unparsed_lines == 0
    assert len((tmp_path / "trace.jsonl").read_text().splitlines()) == stats.events


def test_a_line_without_end_is_cut_and_the_lines_after_it_still_parse(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """An agent that prints far past the line cap without a newline: the follower's memory stays at
    about the cap (it never holds the whole line), the line counts as unparsed, and the stream's
    next events parse as before."""
    import autorl.agents.trace as trace

    monkeypatch.setattr(trace, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(trace, "_READ_BYTES", 4096)
    log = tmp_path / "agent.log"
    log.write_text("")
    follower = TraceFollower(log, tmp_path / "trace.jsonl", "gemini-cli", "gemini-cli")
    follower.start()
    with open(log, "a") as out:
        for _ in range(50):
            out.write("x" * 4096)  # 200 KB of one line
            out.flush()
        follower._drain(final=False)
        assert len(follower._pending) <= 1001
        out.write("\n" + (FIXTURES / "gemini-cli.jsonl").read_text())
    stats = follower.stop()
    assert stats.unparsed_lines == 1 and stats.tool_calls == 2


def _gemini(kind: str, **fields: object) -> str:
    return json.dumps({"type": kind, "timestamp": "2026-11-26T03:14:55.857Z", **fields})


def test_a_streamed_gemini_message_is_one_message(tmp_path: Path) -> None:
    """The Gemini CLI streams a reply as `delta` chunks; each reply is one message, however many
    chunks."""
    lines = [
        _gemini("init", session_id="s1", model="m"),
        _gemini("message", role="user", content="do the task"),
        *(
            _gemini("message", role="assistant", content=chunk, delta=True)
            for chunk in ("I will ", "train ", "first.")
        ),
        _gemini(
            "tool_use",
            tool_name="run_shell_command",
            tool_id="t1",
            parameters={"command": "python3 code/train.py"},
        ),
        _gemini("tool_result", tool_id="t1", status="success", output="42"),
        *(
            _gemini("message", role="assistant", content=chunk, delta=True)
            for chunk in ("All ", "done.")
        ),
    ]
    log = tmp_path / "agent.log"
    log.write_text("\n".join(lines) + "\n")  # no `result` event: the agent was stopped mid-reply
    stats = parse_file(log, tmp_path / "trace.jsonl", "gemini-cli", "gemini-cli")
    events = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    replies = [e for e in events if e["kind"] == "message" and e["role"] == "assistant"]
    assert [(r["text"], r["chunks"], r["raw_type"]) for r in replies] == [
        ("I will train first.", 3, "message"),
        ("All done.", 2, "message"),
    ]
    assert stats.messages == 2 and stats.events == len(events) == 6
    assert [e["kind"] for e in events] == [
        "session",
        "message",
        "message",
        "tool_call",
        "tool_result",
        "message",
    ]
    assert [e["seq"] for e in events] == list(range(1, 7))

    # The live follower writes the last reply when the agent is gone.
    live_log = tmp_path / "live.log"
    follower = TraceFollower(live_log, tmp_path / "live.jsonl", "gemini-cli", "gemini-cli")
    follower.start()
    live_log.write_text(log.read_text())
    assert follower.stop().messages == 2
    assert (tmp_path / "live.jsonl").read_text() == (tmp_path / "trace.jsonl").read_text()


def test_codex_warnings_are_warnings_not_errors(tmp_path: Path) -> None:
    """Codex prints a warning (model metadata not found) as an `error` item; only its error events
    are errors."""
    parse_file(FIXTURES / "codex.jsonl", tmp_path / "trace.jsonl", "codex", "codex")
    events = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    [warning] = [e for e in events if e["kind"] == "warning"]
    assert (
        "Model metadata for `local-model` not found" in warning["text"]
        and warning["raw_type"] == "item.completed"
    )
    assert not [e for e in events if e["kind"] == "error"]
    parser = TraceParser("codex", "codex")
    [failed] = parser.line(
        json.dumps({"type": "turn.failed", "error": {"message": "stream disconnected"}})
    )
    assert (failed["kind"], failed["text"]) == ("error", "stream disconnected")


def test_openhands_events_keep_their_type(tmp_path: Path) -> None:
    """OpenHands names an event's type by `kind`: it is the trace's raw_type."""
    parse_file(FIXTURES / "openhands.jsonl", tmp_path / "trace.jsonl", "openhands", "openhands")
    events = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    by_kind = {(e["kind"], e["raw_type"]) for e in events}
    assert ("tool_call", "ActionEvent") in by_kind and (
        "tool_result",
        "ObservationEvent",
    ) in by_kind
    assert ("message", "MessageEvent") in by_kind and all(e["raw_type"] for e in events)
    broken = TraceParser("openhands", "openhands").line(
        json.dumps({"kind": "ActionEvent", "action": "not an object"})
    )
    assert broken[0]["kind"] == "error" and "'ActionEvent'" in broken[0]["text"]
