"""A sixth CLI agent is one adapter file, one YAML file and one recorded stream.

tests/fixtures/plugin_cli/ is a plugin folder holding only ``sixth_cli_agent.py`` (the adapter and
its stream parser) and ``conf/agent/sixth-cli.yaml``; its recorded output is
tests/fixtures/agent_streams/sixth-cli.jsonl. Once the folder is active the agent is registered,
composes with the CLI base's fields, launches like the built-in CLIs, its stream is parsed by its
own parser, and the lists derived from the registry (``autorl.ls agents --names --cli``, the
Makefile's ``TEST_AGENTS``) include it, with nothing of autorl changed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from autorl.agent_schema import CliAgentConfig
from autorl.agents.base import AGENTS, LaunchContext, agent_stream_parser, load_adapter
from autorl.agents.cli import cli_agent_names
from autorl.agents.trace import parse_file
from autorl.config import compose
from autorl.errors import ConfigError
from autorl.gateway.settings import GATEWAY_TOKEN_ENV, GATEWAY_URL_ENV
from autorl.plugins import PLUGIN_PATH_ENV, activate

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
BUILT_IN = ("claude-code", "codex", "gemini-cli", "opencode", "openhands")


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The fixture plugin copied to a folder of its own and active in this process."""
    folder = tmp_path / "plugin"
    shutil.copytree(FIXTURES / "plugin_cli", folder, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.delenv(PLUGIN_PATH_ENV, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))  # activate() appends the folder
    activate([folder])
    yield folder
    sys.modules.pop("sixth_cli_agent", None)


def test_without_the_plugin_only_the_built_in_clis_are_registered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(PLUGIN_PATH_ENV, raising=False)
    assert "sixth-cli" not in AGENTS and tuple(cli_agent_names()) == BUILT_IN


def test_a_plugin_cli_is_registered_and_composes_with_the_cli_base(plugin: Path) -> None:
    assert "sixth-cli" in AGENTS and cli_agent_names() == sorted([*BUILT_IN, "sixth-cli"])
    agent = compose(["agent=sixth-cli", "driver=gpt-5"]).agent
    assert type(agent) is CliAgentConfig and agent.adapter == "sixth_cli_agent:SixthCliAgent"
    # The fields it does not give come from conf/agent/_cli_base.yaml and _base.yaml.
    assert agent.needs_driver and agent.mode == "free" and agent.tool_timeout_s is None
    assert (agent.reprompt.max, agent.reprompt.min_remaining_s) == (0, 1800)
    with pytest.raises(ConfigError, match="unknown agent 'sixth-clii'. Did you mean: sixth-cli"):
        AGENTS.get("sixth-clii")


def test_a_plugin_cli_launches_like_the_built_in_ones(plugin: Path, tmp_path: Path) -> None:
    cfg = compose(["agent=sixth-cli", "driver=gpt-5"])
    binary = tmp_path / "bin" / "sixth"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    assert isinstance(cfg.agent, CliAgentConfig)
    agent_cfg = dataclasses.replace(cfg.agent, binary=str(binary))
    workspace = tmp_path / "cell" / "workspace"
    (workspace / "data").mkdir(parents=True)
    (workspace / "description.md").write_text("# Task\nTrain it.\n")
    (workspace / "instructions.md").write_text("# Instructions\nSubmit it.\n")
    home = tmp_path / "cell" / "home"
    home.mkdir()
    env = {
        "HOME": str(home),
        "PATH": os.environ["PATH"],
        "OPENAI_API_KEY": "sk-real",
        GATEWAY_URL_ENV: "http://127.0.0.1:5555",
        GATEWAY_TOKEN_ENV: "gw",
    }
    ctx = LaunchContext(workspace, agent_cfg, cfg.driver, env, tmp_path / "cell", budget_s=600)
    launch = load_adapter(agent_cfg).launch(ctx)
    assert (
        launch.command[:3] == [str(binary), "run", "--jsonl"] and "Train it." in launch.command[-1]
    )
    assert (
        launch.env["SIXTH_BASE_URL"] == "http://127.0.0.1:5555/v1"
        and launch.env["SIXTH_API_KEY"] == "gw"
    )
    assert launch.env["SIXTH_SHELL_TIMEOUT_S"] == "600" and "OPENAI_API_KEY" not in launch.env
    assert (home / ".sixth").is_dir() and launch.read_only == (binary.parent.parent,)


def test_a_plugin_clis_recorded_stream_is_parsed_by_its_own_parser(
    plugin: Path, tmp_path: Path
) -> None:
    assert type(agent_stream_parser("sixth-cli")).__name__ == "SixthStream"
    trace = tmp_path / "trace.jsonl"
    stats = parse_file(
        FIXTURES / "agent_streams" / "sixth-cli.jsonl", trace, "sixth-cli", "sixth-cli"
    )
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    calls = [e for e in events if e["kind"] == "tool_call"]
    results = [e for e in events if e["kind"] == "tool_result"]
    assert (
        stats.tool_calls == len(calls) == 2
        and "python3 code/train.py" in calls[1]["input"]["command"]
    )
    assert {r["call_id"] for r in results} == {"c1", "c2"} and "42" in results[1]["output"]
    assert (stats.tokens_in, stats.tokens_out) == (812 + 901, 31 + 12)
    assert stats.messages == 2 and stats.unparsed_lines == 1  # the CLI's console line
    assert all(e["agent"] == "sixth-cli" for e in events)


def test_the_derived_cli_lists_include_a_plugin_cli(plugin: Path) -> None:
    env = {**os.environ, PLUGIN_PATH_ENV: str(plugin)}
    listed = subprocess.run(
        [sys.executable, "-m", "autorl.ls", "agents", "--names", "--cli"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert listed == sorted([*BUILT_IN, "sixth-cli"])
    made = subprocess.run(
        ["make", "-s", "--no-print-directory", "list-test-agents"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert made == listed
