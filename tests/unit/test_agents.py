"""The five CLI adapters: command lines, per-cell config files, environment, prompt modes, installs."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

import pytest

from autorl.agents.base import LaunchContext, load_adapter
from autorl.agents.cli import find_binary, install_commands
from autorl.agents.prompt import MODES, build_prompt
from autorl.config import compose, plan_sweep
from autorl.errors import ConfigError
from autorl.gateway.settings import GATEWAY_TOKEN_ENV, GATEWAY_URL_ENV
from autorl.registry import option_names
from autorl.schema import CliAgentConfig

CLI_AGENTS = ("claude-code", "codex", "gemini-cli", "opencode", "openhands")
GATEWAY = "http://127.0.0.1:5555"
TOKEN = "gw-token"


def _fake_cli(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _workspace(root: Path) -> Path:
    ws = root / "cell" / "workspace"
    (ws / "data").mkdir(parents=True)
    (ws / "code").mkdir()
    (ws / "data" / "train.jsonl").write_text('{"question": "1+1?", "answer": "#### 2"}\n' * 5)
    (ws / "description.md").write_text("# GSM8K\nSolve grade-school math.\n")
    (ws / "instructions.md").write_text("# Instructions\nSubmit to the grading API.\n")
    (ws / "run_meta.json").write_text(json.dumps({"timeout_s": 900}))
    return ws


def _cli(agent: str) -> CliAgentConfig:
    """The composed config of a CLI agent."""
    cfg = compose([f"agent={agent}"]).agent
    assert isinstance(cfg, CliAgentConfig)
    return cfg


def _launch(agent: str, tmp_path: Path, driver: str = "gpt-5", **agent_overrides: Any) -> tuple[Any, Path, Path]:
    cfg = compose([f"agent={agent}", f"driver={driver}"])
    assert isinstance(cfg.agent, CliAgentConfig)
    binary = _fake_cli(tmp_path / "bin" / cfg.agent.install.bin)
    agent_cfg = dataclasses.replace(cfg.agent, binary=str(binary), **agent_overrides)
    ws = _workspace(tmp_path)
    home = tmp_path / "cell" / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": os.environ["PATH"], "OPENAI_API_KEY": "sk-real", "ANTHROPIC_API_KEY": "sk-ant",
           GATEWAY_URL_ENV: GATEWAY, GATEWAY_TOKEN_ENV: TOKEN, "GRADING_TOKEN": "g"}
    launch = load_adapter(agent_cfg).launch(LaunchContext(ws, agent_cfg, cfg.driver, env, tmp_path / "cell"))
    return launch, ws, home


def test_registry_lists_the_five_clis_and_scripted() -> None:
    assert set(option_names("agent")) >= {*CLI_AGENTS, "scripted"}
    assert {"gpt-5", "gpt-5.4", "gpt-5.2", "gpt-4o", "claude-opus-4.6", "claude-sonnet-4.5", "gemini-2.5-flash", "local", "none"} <= set(option_names("driver"))


@pytest.mark.parametrize("agent", CLI_AGENTS)
def test_every_cli_gets_the_prompt_its_gateway_and_no_provider_key(agent: str, tmp_path: Path) -> None:
    launch, ws, home = _launch(agent, tmp_path, driver="claude-sonnet-4.5" if agent == "claude-code" else "gpt-5")
    assert launch.command[0].endswith(_cli(agent).install.bin)
    prompt = launch.command[-1]
    assert "Solve grade-school math." in prompt and "Submit to the grading API." in prompt and "900 seconds" in prompt
    assert (tmp_path / "cell" / "prompt.md").read_text() == prompt
    assert "OPENAI_API_KEY" not in launch.env
    assert "sk-real" not in json.dumps(launch.env) and "sk-ant" not in json.dumps(launch.env)
    assert launch.env["HOME"] == str(home) and launch.env["GRADING_TOKEN"] == "g"
    # Every config file the CLI gets is inside the cell's HOME.
    written = [p for p in home.rglob("*") if p.is_file()]
    assert all(str(p).startswith(str(home)) for p in written)
    assert not any(p.is_file() for p in ws.rglob("*") if p.parent == ws and p.name not in ("description.md", "instructions.md", "run_meta.json"))


def test_codex_provider_points_at_the_gateway(tmp_path: Path) -> None:
    launch, ws, home = _launch("codex", tmp_path)
    config = tomllib.loads((home / ".codex" / "config.toml").read_text())
    provider = config["model_providers"][config["model_provider"]]
    assert provider["base_url"] == f"{GATEWAY}/v1" and provider["wire_api"] == "responses"
    assert launch.env[provider["env_key"]] == TOKEN and launch.env["CODEX_HOME"] == str(home / ".codex")
    assert config["web_search"] == "disabled" and config["model"] == "gpt-5"
    assert launch.command[1:4] == ["exec", "--json", "--skip-git-repo-check"] and str(ws) in launch.command


def test_claude_code_env(tmp_path: Path) -> None:
    launch, _, home = _launch("claude-code", tmp_path, driver="claude-sonnet-4.5")
    env = launch.env
    assert env["ANTHROPIC_BASE_URL"] == GATEWAY and env["ANTHROPIC_API_KEY"] == TOKEN
    assert env["ANTHROPIC_SMALL_FAST_MODEL"] == env["ANTHROPIC_MODEL"] == "claude-sonnet-4-5"
    assert env["CLAUDE_CONFIG_DIR"] == str(home / ".claude") and env["BASH_MAX_TIMEOUT_MS"] == "43200000"
    assert ["--output-format", "stream-json"] == launch.command[3:5] and "--dangerously-skip-permissions" in launch.command


def test_gemini_cli_settings(tmp_path: Path) -> None:
    launch, _, home = _launch("gemini-cli", tmp_path, driver="gemini-2.5-flash")
    settings = json.loads((home / ".gemini" / "settings.json").read_text())
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key" and settings["telemetry"]["enabled"] is False
    assert launch.env["GOOGLE_GEMINI_BASE_URL"] == GATEWAY and launch.env["GEMINI_API_KEY"] == TOKEN
    assert launch.command[-2] == "--prompt" and ["--output-format", "stream-json"] == launch.command[4:6]


def test_opencode_config(tmp_path: Path) -> None:
    launch, _, home = _launch("opencode", tmp_path)
    config = json.loads((home / ".config" / "opencode" / "opencode.json").read_text())
    provider = config["provider"]["autorl"]
    assert provider["options"] == {"baseURL": f"{GATEWAY}/v1", "apiKey": f"{{env:{GATEWAY_TOKEN_ENV}}}"}
    assert config["model"] == "autorl/gpt-5" and config["permission"]["bash"] == "allow"
    assert launch.env["XDG_CONFIG_HOME"] == str(home / ".config") and launch.command[1:4] == ["run", "--format", "json"]


def test_openhands_env(tmp_path: Path) -> None:
    launch, _, _ = _launch("openhands", tmp_path)
    assert launch.env["LLM_MODEL"] == "openai/gpt-5" and launch.env["LLM_BASE_URL"] == f"{GATEWAY}/v1"
    assert launch.env["LLM_API_KEY"] == TOKEN and launch.command[1:4] == ["--headless", "--json", "--override-with-envs"]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_modes_are_prompt_variants(mode: str, tmp_path: Path) -> None:
    prompt = build_prompt(_workspace(tmp_path), mode)
    assert MODES[mode] in prompt and all(MODES[other] not in prompt for other in MODES if other != mode)
    assert '"question": "1+1?"' in prompt  # a look at the training data


def test_unknown_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="agent.mode must be one of"):
        build_prompt(_workspace(tmp_path), "rl_only")


def test_missing_cli_error_says_how_to_install(tmp_path: Path) -> None:
    cfg = dataclasses.replace(_cli("codex"), agents_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="python -m autorl.agents.install codex") as error:
        find_binary(dataclasses.replace(cfg, install=dataclasses.replace(cfg.install, bin="no-such-codex-binary")))
    assert "@openai/codex@0.169.0" in str(error.value)
    installed = _fake_cli(tmp_path / "codex" / "node_modules" / ".bin" / "codex")
    assert find_binary(cfg) == str(installed)


def test_install_commands_are_pinned_and_make_test_installs_the_e2e_cli() -> None:
    pip = install_commands(_cli("openhands"))
    assert pip[-1][-1] == "openhands==1.16.0" and pip[0][0] == "python3.12"
    npm = install_commands(_cli("codex"))
    assert npm[-1][-1] == "@openai/codex@0.169.0"
    repo = Path(__file__).resolve().parents[2]
    # `make test` installs the CLI that tests/integration/test_real_cli.py runs; CI only runs `make test`.
    [test_agents] = [line.split(":=")[1].split() for line in (repo / "Makefile").read_text().splitlines() if line.startswith("TEST_AGENTS")]
    assert "codex" in test_agents
    ci = (repo / ".ci" / "run").read_text()
    assert "make test" in ci and not any(tool in ci for tool in ("npm ", "apt-get", "agents.install"))


def test_an_agent_that_needs_a_driver_refuses_driver_none() -> None:
    with pytest.raises(ConfigError, match="needs a driver LLM, but driver=none"):
        plan_sweep(["agent=codex", "driver=none"])
    with pytest.raises(ConfigError, match="gemini API"):
        plan_sweep(["agent=gemini-cli", "driver=gpt-5"])
    assert len(plan_sweep(["agent=claude-code", "driver=gpt-5"]).cells) == 1  # translated by the gateway


def test_dry_run_without_key_prints_cells_and_real_run_stops(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from autorl import sweep

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert sweep.main(["agent=opencode", "driver=gpt-5", "task=all", "dry_run=true"]) == 0
    out = capsys.readouterr().out
    assert out.count("opencode") >= len(option_names("task")) and "OPENAI_API_KEY" in out
    assert sweep.main(["agent=opencode", "driver=gpt-5", "task=all", "out_dir=/nonexistent/never"]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err
    assert not Path("/nonexistent/never").exists()
