"""The real pinned CLIs, run against the replay LLM through the gateway: a resume keeps the
conversation, and the shell timeout each adapter sets is the one the CLI obeys."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from autorl.agents.base import LaunchContext, load_adapter
from autorl.agents.cli import find_binary
from autorl.agents.trace import TraceParser
from autorl.config import compose
from autorl.errors import ConfigError
from autorl.gateway.app import Gateway
from autorl.gateway.settings import GATEWAY_TOKEN_ENV, GATEWAY_URL_ENV, DriverSettings
from tests.helpers.cli_agent_cell import TOKEN
from tests.helpers.cli_agent_cell import cli_config as _cli
from tests.helpers.cli_agent_cell import workspace as _workspace
from tests.helpers.replay_llm_server import ReplayLLM, ReplayServer


def _real_cli(agent: str) -> str:
    """The pinned CLI installed by `make test-deps`; fails (not skips) without it."""
    cfg = _cli(agent)
    try:
        return find_binary(dataclasses.replace(cfg, binary=None))
    except ConfigError as error:
        pytest.fail(f"this test runs the real {agent} CLI (make test-deps installs it): {error}")


class _NoToolTimeout(ReplayLLM):
    """The replay LLM, but the shell calls it sends leave the timeout to the CLI's default."""

    def decide(self, protocol: str, body: dict[str, Any]) -> tuple[str, Any]:
        kind, value = super().decide(protocol, body)
        if kind == "tool":
            name, arguments = value
            value = (
                name,
                {k: v for k, v in arguments.items() if k not in ("timeout", "timeout_ms")},
            )
        return kind, value


def _run_real(
    agent: str,
    root: Path,
    replay: ReplayServer,
    continuation: str | None = None,
    budget_s: float = 900,
) -> str:
    """Run the real CLI once in ``root``'s cell (workspace and HOME kept between runs); its
    stdout."""
    server = replay.base_url.removesuffix("/v1")
    driver = "gemini-2.5-flash" if agent == "gemini-cli" else "local"
    cfg = compose(
        [
            f"agent={agent}",
            f"driver={driver}",
            f"driver.base_url={replay.base_url}",
            "driver.api_key_env=null",
            f"driver.protocols={{gemini: {server}/v1beta}}"
            if agent == "gemini-cli"
            else "driver.model=local-model",
        ]
    )
    agent_cfg = dataclasses.replace(cfg.agent, binary=_real_cli(agent))
    ws = root / "cell" / "workspace"
    if not ws.exists():
        _workspace(root)
    home = root / "cell" / "home"
    home.mkdir(exist_ok=True)
    gateway = Gateway(
        DriverSettings.from_config(cfg.driver),
        token=TOKEN,
        api_key=None,
        cell_id="c",
        sink=lambda _: None,
    )
    gateway.start()
    try:
        env = {
            "HOME": str(home),
            "PATH": os.environ["PATH"],
            GATEWAY_URL_ENV: gateway.url,
            GATEWAY_TOKEN_ENV: TOKEN,
        }
        ctx = LaunchContext(ws, agent_cfg, cfg.driver, env, root / "cell", budget_s=budget_s)
        launch = load_adapter(agent_cfg).launch(
            dataclasses.replace(ctx, continuation_prompt=continuation) if continuation else ctx
        )
        done = subprocess.run(
            launch.command,
            cwd=ws,
            env=launch.env,
            capture_output=True,
            text=True,
            timeout=240,
            stdin=subprocess.DEVNULL,
        )
    finally:
        gateway.stop()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _requests(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.mark.parametrize("agent", ["codex", "claude-code", "gemini-cli", "opencode"])
def test_a_real_cli_resumed_with_the_continuation_prompt_keeps_its_conversation(
    agent: str, tmp_path: Path
) -> None:
    """The resume flag each adapter uses picks up the session of the first run: the model sees the
    first run's tool call and output, then the continuation prompt."""
    from autorl.agents.reprompt import continuation_prompt

    log = tmp_path / "requests.jsonl"
    replay = ReplayServer(ReplayLLM(["echo first-run | tr a-z A-Z"], "Done.", log)).start()
    try:
        _run_real(agent, tmp_path, replay)
        first = len(_requests(log))
        assert any("FIRST-RUN" in json.dumps(r["body"]) for r in _requests(log)), (
            "the first run ran its step"
        )
        text = continuation_prompt(1830, 3600, 0)
        _run_real(agent, tmp_path, replay, continuation=text)
    finally:
        replay.stop()
    resumed = [
        json.dumps(r["body"])
        for r in _requests(log)[first:]
        if "(resume 1)" in json.dumps(r["body"])
    ]
    assert resumed, "the continuation prompt reached the model"
    # The same conversation: the first run's tool call and its output are already in the context of
    # the resumed run's first request (a new session would start from the continuation prompt
    # alone).
    assert all("echo first-run" in body and "FIRST-RUN" in body for body in resumed)


@pytest.mark.parametrize("agent", ["gemini-cli", "opencode"])
def test_a_real_cli_shell_timeout_is_the_cells_budget(agent: str, tmp_path: Path) -> None:
    """With a 3-second budget the CLI stops a quiet 20-second command: the adapter's setting is the
    one the pinned CLI reads (its default, 300 s or 2 minutes, would let the command finish)."""
    log = tmp_path / "requests.jsonl"
    replay = ReplayServer(_NoToolTimeout(["sleep 20; echo slept-through"], "Done.", log)).start()
    _workspace(tmp_path)
    try:
        out = _run_real(agent, tmp_path, replay, budget_s=3)
    finally:
        replay.stop()
    # No wall-clock bound here (a loaded CI machine makes CLI start-up slow): the tool result
    # itself says the command was stopped at the 3-second timeout and never printed its line.
    parser = TraceParser(agent, agent)
    events = [event for line in out.splitlines() for event in parser.line(line)]
    [result] = [e for e in events if e["kind"] == "tool_result"]
    # Gemini CLI: "cancelled because it exceeded the timeout of 0.1 minutes without output";
    # OpenCode: "terminated command after exceeding timeout 3000 ms".
    assert "slept-through" not in result["output"] and re.search(
        r"timeout of 0\.1 minutes|timeout 3000 ms", result["output"]
    )
