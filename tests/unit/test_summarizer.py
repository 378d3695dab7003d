"""The optional LLM summariser against a local stand-in of the OpenAI chat-completions API.

The stand-in replaces the paid driver APIs (unreachable here). It speaks the real protocol:
``POST /v1/chat/completions`` with a bearer key, OpenAI's request and response schemas and its
error envelope; the official ``openai`` client is used once to show that it parses the answers.
Its "narrative" is computed from the facts it receives, so the tests can see that they arrived.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from autorl.errors import ConfigError, PrerequisiteError
from autorl.grading.api import GradingServer
from autorl.records.store import RecordStore
from autorl.records.types import CellRecord, SubmissionRecord
from autorl.report.build import build_report
from autorl.report.summarizer import SYSTEM_PROMPT, load_driver

KEY = "sk-test-123"


def _error(status: int, message: str, code: str) -> JSONResponse:
    return JSONResponse(
        {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": code,
            }
        },
        status_code=status,
    )


def openai_standin(
    requests: list[dict[str, Any]], *, key: str | None, fail: bool = False
) -> FastAPI:
    """A minimal OpenAI-compatible chat-completions server."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        if key is not None and request.headers.get("authorization") != f"Bearer {key}":
            return _error(401, "Incorrect API key provided.", "invalid_api_key")
        body = await request.json()
        requests.append(body)
        if fail:
            return JSONResponse(
                {"error": {"message": "The server had an error", "type": "server_error"}},
                status_code=500,
            )
        messages = body.get("messages")
        if not isinstance(body.get("model"), str) or not isinstance(messages, list) or not messages:
            return _error(
                400, "'model' and a non-empty 'messages' are required.", "invalid_request"
            )
        if any(
            m.get("role") not in ("system", "user", "assistant", "developer", "tool")
            or "content" not in m
            for m in messages
        ):
            return _error(
                400, "Invalid 'messages': each needs a valid role and content.", "invalid_value"
            )
        text = messages[-1]["content"]
        facts = (
            json.loads(text.split("\n", 1)[1])
            if text.startswith("Facts of the run (JSON):")
            else {}
        )
        narrative = (
            "\n".join(
                f"- Iteration {e['iteration']}: {e['method']} scored {e['score']} "
                f"({e['failure_type'] or 'no failure'})."
                for e in facts.get("entries", [])
            )
            or "No facts given."
        )
        prompt_tokens = sum(len(str(m["content"]).split()) for m in messages)
        return JSONResponse(
            {
                "id": f"chatcmpl-{len(requests)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "system_fingerprint": None,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": narrative, "refusal": None},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": len(narrative.split()),
                    "total_tokens": prompt_tokens + len(narrative.split()),
                },
            }
        )

    return app


@pytest.fixture()
def server() -> Iterator[tuple[GradingServer, list[dict[str, Any]]]]:
    requests: list[dict[str, Any]] = []
    srv = GradingServer(openai_standin(requests, key=KEY))
    srv.start()
    yield srv, requests
    srv.stop()


@pytest.fixture()
def sweep_dir(tmp_path: Path) -> Path:
    with RecordStore(tmp_path / "records.sqlite") as store:
        store.upsert_cell(
            CellRecord(
                "sw",
                "cell-a",
                "scripted",
                "none",
                "gsm8k",
                1,
                "tiny",
                0,
                600,
                "completed",
                baseline=2.0,
                exit_class="exited",
                exit_code=0,
            )
        )
        store.upsert_submission(
            SubmissionRecord("cell-a", 1, "output/v1", "scored", score=5.0, submitted_at=1.0)
        )
        store.upsert_submission(
            SubmissionRecord("cell-a", 2, "output/v2", "copy_of_base", score=2.0, submitted_at=2.0)
        )
    return tmp_path


def test_summary_is_written_on_top_of_the_facts(
    server: tuple[GradingServer, list[dict[str, Any]]],
    sweep_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    srv, requests = server
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    index = build_report(sweep_dir, summarizer_driver="gpt-5", summarizer_base_url=srv.url + "/v1")
    (body,) = requests
    assert body["model"] == "gpt-5" and body["messages"][0] == {
        "role": "system",
        "content": SYSTEM_PROMPT,
    }
    assert '"cell_id": "cell-a"' in body["messages"][1]["content"]
    summary = (sweep_dir / "cells" / "cell-a" / "run_summary.md").read_text()
    assert "- Iteration 1: unknown scored 5.0 (no failure)." in summary
    assert "- Iteration 2: copy scored 2.0 (copy_model_fallback)." in summary
    assert "Those files hold the facts" in summary
    report = json.loads((sweep_dir / "cells" / "cell-a" / "run_report.json").read_text())
    assert report["entries"][1]["method"] == "copy"  # the facts stay, next to the narrative
    assert "LLM summary" in index.read_text()


def test_missing_key_and_unknown_driver_are_clear_errors(
    sweep_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(PrerequisiteError, match=r"\$OPENAI_API_KEY"):
        build_report(sweep_dir, summarizer_driver="gpt-5")
    with pytest.raises(ConfigError, match="Did you mean: gpt-5"):
        load_driver("gpt5", timeout_s=5)
    with pytest.raises(ConfigError, match="cannot summarise"):
        load_driver("none", timeout_s=5)
    assert not (sweep_dir / "report").exists()  # checked before anything is written


def test_the_summariser_calls_each_driver_at_its_chat_completions_route(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The route is the driver's protocols.chat, as for the judges: Anthropic's OpenAI-compatible
    # endpoint is {base_url}/chat/completions, Google's is under /openai.
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    claude = load_driver("claude-sonnet-4.5", timeout_s=5)
    assert claude.url == "https://api.anthropic.com/v1/chat/completions" and claude.api_key == KEY
    gemini = load_driver("gemini-2.5-flash", timeout_s=5)
    assert gemini.url == "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions"
    local = load_driver("local", base_url="http://127.0.0.1:9/v1/", model="m", timeout_s=5)
    assert (local.url, local.model, local.api_key) == (
        "http://127.0.0.1:9/v1/chat/completions",
        "m",
        None,
    )


def test_a_failing_server_leaves_the_report_and_a_note(sweep_dir: Path) -> None:
    requests: list[dict[str, Any]] = []
    srv = GradingServer(openai_standin(requests, key=None, fail=True))
    srv.start()
    try:
        build_report(
            sweep_dir,
            summarizer_driver="local",
            summarizer_base_url=srv.url + "/v1",
            summarizer_model="m",
        )
    finally:
        srv.stop()
    assert len(requests) == 1 and requests[0]["model"] == "m"
    assert not (sweep_dir / "cells" / "cell-a" / "run_summary.md").exists()
    report = json.loads((sweep_dir / "cells" / "cell-a" / "run_report.json").read_text())
    assert any("HTTP 500" in n for n in report["notes"])


def test_cli_summarizer_flags(
    server: tuple[GradingServer, list[dict[str, Any]]], sweep_dir: Path
) -> None:
    srv, requests = server
    env = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": KEY}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "autorl.report",
            str(sweep_dir),
            "--summarizer",
            "gpt-5",
            "--summarizer-base-url",
            srv.url + "/v1",
            "--summarizer-model",
            "gpt-5-mini",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert requests[-1]["model"] == "gpt-5-mini" and "report:" in done.stdout
    assert (sweep_dir / "cells" / "cell-a" / "run_summary.md").is_file()


def test_the_standin_speaks_the_protocol_of_the_official_client(
    server: tuple[GradingServer, list[dict[str, Any]]],
) -> None:
    import openai

    srv, _ = server
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key=KEY, max_retries=0)
    answer = client.chat.completions.create(
        model="gpt-5", messages=[{"role": "user", "content": "hello"}]
    )
    assert answer.choices[0].message.content == "No facts given." and answer.usage.total_tokens > 0
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(
            base_url=srv.url + "/v1", api_key="wrong", max_retries=0
        ).chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "hello"}])
