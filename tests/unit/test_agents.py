"""The CLI adapters: command lines, per-cell config files, environment, prompt modes, installs."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from autorl.agent_schema import CliAgentConfig
from autorl.agents.base import LaunchContext, load_adapter
from autorl.agents.cli import cli_agent_names, find_binary, install_commands
from autorl.agents.prompt import MODES, build_prompt
from autorl.config import compose, plan_sweep
from autorl.errors import ConfigError
from autorl.gateway.settings import GATEWAY_TOKEN_ENV, GATEWAY_URL_ENV
from autorl.registry import option_names
from tests.helpers.cli_agent_cell import TOKEN
from tests.helpers.cli_agent_cell import cli_config as _cli
from tests.helpers.cli_agent_cell import workspace as _workspace

# Every registered CLI agent: a new conf/agent/<name>.yaml is tested here with no list to extend.
CLI_AGENTS = tuple(cli_agent_names())
GATEWAY = "http://127.0.0.1:5555"


def _fake_cli(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _launch(
    agent: str, tmp_path: Path, driver: str = "gpt-5", **agent_overrides: Any
) -> tuple[Any, Path, Path]:
    cfg = compose([f"agent={agent}", f"driver={driver}"])
    assert isinstance(cfg.agent, CliAgentConfig)
    binary = _fake_cli(tmp_path / "bin" / cfg.agent.install.bin)
    agent_cfg = dataclasses.replace(cfg.agent, binary=str(binary), **agent_overrides)
    ws = _workspace(tmp_path)
    home = tmp_path / "cell" / "home"
    home.mkdir()
    env = {
        "HOME": str(home),
        "PATH": os.environ["PATH"],
        "OPENAI_API_KEY": "sk-real",
        "ANTHROPIC_API_KEY": "sk-ant",
        GATEWAY_URL_ENV: GATEWAY,
        GATEWAY_TOKEN_ENV: TOKEN,
        "GRADING_TOKEN": "g",
    }
    ctx = LaunchContext(ws, agent_cfg, cfg.driver, env, tmp_path / "cell", budget_s=900)
    launch = load_adapter(agent_cfg).launch(ctx)
    return launch, ws, home


def test_registry_lists_the_five_clis_and_scripted() -> None:
    assert set(option_names("agent")) >= {*CLI_AGENTS, "scripted"}
    assert {
        "gpt-5",
        "gpt-5.4",
        "gpt-5.2",
        "gpt-4o",
        "claude-opus-4.6",
        "claude-sonnet-4.5",
        "gemini-2.5-flash",
        "local",
        "none",
    } <= set(option_names("driver"))


@pytest.mark.parametrize("agent", CLI_AGENTS)
def test_every_cli_gets_the_prompt_its_gateway_and_no_provider_key(
    agent: str, tmp_path: Path
) -> None:
    launch, ws, home = _launch(
        agent, tmp_path, driver="claude-sonnet-4.5" if agent == "claude-code" else "gpt-5"
    )
    assert launch.command[0].endswith(_cli(agent).install.bin)
    prompt = launch.command[-1]
    assert (
        "Solve grade-school math." in prompt
        and "Submit to the grading API." in prompt
        and "900 seconds" in prompt
    )
    assert (tmp_path / "cell" / "prompt.md").read_text() == prompt
    assert "OPENAI_API_KEY" not in launch.env
    assert "sk-real" not in json.dumps(launch.env) and "sk-ant" not in json.dumps(launch.env)
    assert launch.env["HOME"] == str(home) and launch.env["GRADING_TOKEN"] == "g"
    # Every config file the CLI gets is inside the cell's HOME.
    written = [p for p in home.rglob("*") if p.is_file()]
    assert all(str(p).startswith(str(home)) for p in written)
    assert not any(
        p.is_file()
        for p in ws.rglob("*")
        if p.parent == ws and p.name not in ("description.md", "instructions.md", "run_meta.json")
    )


def test_codex_provider_points_at_the_gateway(tmp_path: Path) -> None:
    launch, ws, home = _launch("codex", tmp_path)
    config = tomllib.loads((home / ".codex" / "config.toml").read_text())
    provider = config["model_providers"][config["model_provider"]]
    assert provider["base_url"] == f"{GATEWAY}/v1" and provider["wire_api"] == "responses"
    assert launch.env[provider["env_key"]] == TOKEN and launch.env["CODEX_HOME"] == str(
        home / ".codex"
    )
    assert config["web_search"] == "disabled" and config["model"] == "gpt-5"
    assert (
        launch.command[1:4] == ["exec", "--json", "--skip-git-repo-check"]
        and str(ws) in launch.command
    )


def test_claude_code_env(tmp_path: Path) -> None:
    launch, _, home = _launch("claude-code", tmp_path, driver="claude-sonnet-4.5")
    env = launch.env
    assert env["ANTHROPIC_BASE_URL"] == GATEWAY and env["ANTHROPIC_API_KEY"] == TOKEN
    assert env["ANTHROPIC_SMALL_FAST_MODEL"] == env["ANTHROPIC_MODEL"] == "claude-sonnet-4-5"
    assert (
        env["CLAUDE_CONFIG_DIR"] == str(home / ".claude") and env["BASH_MAX_TIMEOUT_MS"] == "900000"
    )
    assert (
        launch.command[3:5] == ["--output-format", "stream-json"]
        and "--dangerously-skip-permissions" in launch.command
    )


def test_gemini_cli_settings(tmp_path: Path) -> None:
    launch, _, home = _launch("gemini-cli", tmp_path, driver="gemini-2.5-flash")
    settings = json.loads((home / ".gemini" / "settings.json").read_text())
    assert (
        settings["security"]["auth"]["selectedType"] == "gemini-api-key"
        and settings["telemetry"]["enabled"] is False
    )
    assert launch.env["GOOGLE_GEMINI_BASE_URL"] == GATEWAY and launch.env["GEMINI_API_KEY"] == TOKEN
    assert launch.command[-2] == "--prompt" and launch.command[4:6] == [
        "--output-format",
        "stream-json",
    ]


def test_opencode_config(tmp_path: Path) -> None:
    launch, _, home = _launch("opencode", tmp_path)
    config = json.loads((home / ".config" / "opencode" / "opencode.json").read_text())
    provider = config["provider"]["autorl"]
    assert provider["options"] == {
        "baseURL": f"{GATEWAY}/v1",
        "apiKey": f"{{env:{GATEWAY_TOKEN_ENV}}}",
    }
    assert config["model"] == "autorl/gpt-5" and config["permission"]["bash"] == "allow"
    assert launch.env["XDG_CONFIG_HOME"] == str(home / ".config") and launch.command[1:4] == [
        "run",
        "--format",
        "json",
    ]


def test_openhands_env(tmp_path: Path) -> None:
    launch, _, _ = _launch("openhands", tmp_path)
    assert (
        launch.env["LLM_MODEL"] == "openai/gpt-5" and launch.env["LLM_BASE_URL"] == f"{GATEWAY}/v1"
    )
    assert launch.env["LLM_API_KEY"] == TOKEN and launch.command[1:4] == [
        "--headless",
        "--json",
        "--override-with-envs",
    ]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_modes_are_prompt_variants(mode: str, tmp_path: Path) -> None:
    prompt = build_prompt(_workspace(tmp_path), mode, 900)
    assert MODES[mode] in prompt and all(
        MODES[other] not in prompt for other in MODES if other != mode
    )
    assert '"question": "1+1?"' in prompt  # a look at the training data


def test_unknown_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="agent.mode must be one of"):
        build_prompt(_workspace(tmp_path), "rl_only", 900)


def test_missing_cli_error_says_how_to_install(tmp_path: Path) -> None:
    cfg = dataclasses.replace(_cli("codex"), agents_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="python -m autorl.agents.install codex") as error:
        find_binary(
            dataclasses.replace(
                cfg, install=dataclasses.replace(cfg.install, bin="no-such-codex-binary")
            )
        )
    assert "@openai/codex@0.169.0" in str(error.value)
    installed = _fake_cli(tmp_path / "codex" / "node_modules" / ".bin" / "codex")
    assert find_binary(cfg) == str(installed)


def test_install_commands_are_pinned_and_make_test_installs_the_e2e_cli() -> None:
    pip = install_commands(_cli("openhands"))
    assert pip[-1][-1] == "openhands==1.16.0" and pip[0][0] == "python3.12"
    npm = install_commands(_cli("codex"))
    assert npm[-1][-1] == "@openai/codex@0.169.0"
    repo = Path(__file__).resolve().parents[2]
    # `make test` installs the CLIs that tests/integration/test_real_cli.py runs (every registered
    # CLI agent); CI only runs `make test`.
    listed = subprocess.run(
        ["make", "-s", "--no-print-directory", "list-test-agents"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert listed == cli_agent_names() and "codex" in listed
    ci = (repo / ".ci" / "run").read_text()
    assert "make test" in ci and not any(
        tool in ci for tool in ("npm ", "apt-get", "agents.install")
    )


def test_an_agent_that_needs_a_driver_refuses_driver_none() -> None:
    with pytest.raises(ConfigError, match="needs a driver LLM, but driver=none"):
        plan_sweep(["agent=codex", "driver=none"])
    with pytest.raises(ConfigError, match="gemini API"):
        plan_sweep(["agent=gemini-cli", "driver=gpt-5"])
    assert (
        len(plan_sweep(["agent=claude-code", "driver=gpt-5"]).cells) == 1
    )  # translated by the gateway


def test_dry_run_without_key_prints_cells_and_real_run_stops(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from autorl import sweep

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert sweep.main(["agent=opencode", "driver=gpt-5", "task=all", "dry_run=true"]) == 0
    out = capsys.readouterr().out
    assert out.count("opencode") >= len(option_names("task")) and "OPENAI_API_KEY" in out
    assert (
        sweep.main(["agent=opencode", "driver=gpt-5", "task=all", "out_dir=/nonexistent/never"])
        == 2
    )
    assert "OPENAI_API_KEY" in capsys.readouterr().err
    assert not Path("/nonexistent/never").exists()


def test_command_agent_copies_its_files_into_home_and_runs_its_command_there(
    tmp_path: Path,
) -> None:
    import subprocess

    script = tmp_path / "host" / "hello.py"
    script.parent.mkdir()
    script.write_text("import os, sys\nprint(os.getcwd(), sys.argv[1])\n")
    cfg = compose(
        [
            "agent=command",
            "agent.command=[python3,-I,'{home}/hello.py','{workspace}']",
            f"agent.files=[{script}]",
        ]
    )
    ws, home = _workspace(tmp_path), tmp_path / "cell" / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}
    launch = load_adapter(cfg.agent).launch(LaunchContext(ws, cfg.agent, cfg.driver, env))
    assert launch.command == ["python3", "-I", str(home / "hello.py"), str(ws)] and launch.env[
        "HOME"
    ] == str(home)
    assert stat.S_IMODE((home / "hello.py").stat().st_mode) == 0o644
    ran = subprocess.run(
        launch.command, cwd=ws, env=launch.env, capture_output=True, text=True, check=True
    )
    assert ran.stdout.split() == [str(ws), str(ws)]

    bad = {
        "agent.command=[]": "agent.command is empty",
        "agent.files=[rel.py]": "not an absolute path",
        f"agent.files=[{tmp_path}/missing.py]": "missing.py is not an existing file",
    }
    for override, message in bad.items():
        cfg = compose(["agent=command", "agent.command=[true]", override])
        with pytest.raises(ConfigError, match=message):
            load_adapter(cfg.agent).launch(
                LaunchContext(ws, cfg.agent, cfg.driver, {"HOME": str(home)})
            )


def test_shell_tools_may_run_for_the_whole_budget(tmp_path: Path) -> None:
    """OpenCode's shell tool stops a command after 2 minutes and Gemini CLI's after 300 s without
    output, unless told otherwise: both get the cell's budget (the launch context's, 900 here)."""
    launch, _, home = _launch("gemini-cli", tmp_path / "gemini", driver="gemini-2.5-flash")
    settings = json.loads((home / ".gemini" / "settings.json").read_text())
    assert settings["tools"]["shell"]["inactivityTimeout"] == 900
    launch, ws, _ = _launch("opencode", tmp_path / "opencode")
    assert launch.env["OPENCODE_EXPERIMENTAL_BASH_DEFAULT_TIMEOUT_MS"] == "900000"
    from autorl.agents.prompt import tool_timeout_s

    assert tool_timeout_s(None) == 12 * 3600  # no budget known: the paper's 12 hours


@pytest.mark.parametrize("agent", ["claude-code", "gemini-cli", "opencode"])
def test_agent_tool_timeout_s_is_the_one_setting_every_cli_reads(
    agent: str, tmp_path: Path
) -> None:
    """``agent.tool_timeout_s`` overrides the budget in the launch context, whatever the CLI."""
    driver = {"claude-code": "claude-sonnet-4.5", "gemini-cli": "gemini-2.5-flash"}.get(
        agent, "gpt-5"
    )
    launch, _, home = _launch(agent, tmp_path, driver=driver, tool_timeout_s=61.5)
    if agent == "gemini-cli":
        settings = json.loads((home / ".gemini" / "settings.json").read_text())
        assert settings["tools"]["shell"]["inactivityTimeout"] == 62
    else:
        assert {v for k, v in launch.env.items() if "TIMEOUT_MS" in k} == {"62000"}


@pytest.mark.parametrize("agent", ["gemini-cli", "opencode"])
def test_a_resume_never_reads_the_agents_run_meta(agent: str, tmp_path: Path) -> None:
    """By a resume the agent has had the workspace for hours: a FIFO (which would block a reader
    forever) in place of run_meta.json changes nothing of the relaunch; the budget is the
    config's."""
    driver = "gemini-2.5-flash" if agent == "gemini-cli" else "gpt-5"
    first, ws, home = _launch(agent, tmp_path, driver=driver)
    (ws / "run_meta.json").unlink()
    os.mkfifo(ws / "run_meta.json")
    cfg = compose([f"agent={agent}", f"driver={driver}"])
    agent_cfg = dataclasses.replace(cfg.agent, binary=first.command[0])
    ctx = LaunchContext(
        ws,
        agent_cfg,
        cfg.driver,
        {
            "HOME": str(home),
            "PATH": os.environ["PATH"],
            GATEWAY_URL_ENV: GATEWAY,
            GATEWAY_TOKEN_ENV: TOKEN,
        },
        tmp_path / "cell",
        budget_s=900,
        continuation_prompt="go on",
        resume_index=1,
    )
    again = load_adapter(agent_cfg).launch(ctx)
    timeouts = {k: v for k, v in first.env.items() if "TIMEOUT" in k}
    assert {k: again.env[k] for k in timeouts} == timeouts
    if agent == "gemini-cli":
        assert (
            json.loads((home / ".gemini" / "settings.json").read_text())["tools"]["shell"][
                "inactivityTimeout"
            ]
            == 900
        )


@pytest.mark.parametrize("agent", CLI_AGENTS)
def test_a_relaunch_writes_its_config_into_home_never_through_the_agents_links(
    agent: str, tmp_path: Path
) -> None:
    """The agent may replace each config folder the adapter made in HOME by a link to a folder
    outside (here holding a copy of the config): the relaunch writes into HOME again, the folder
    the links led to keeps its files untouched."""
    driver = "gemini-2.5-flash" if agent == "gemini-cli" else "gpt-5"
    first, ws, home = _launch(agent, tmp_path, driver=driver)
    outside = tmp_path / "outside"
    outside.mkdir()
    for entry in list(home.iterdir()):
        entry.rename(outside / entry.name)
        (home / entry.name).symlink_to(outside / entry.name, target_is_directory=True)
        for file in (outside / entry.name).rglob("*"):
            if file.is_file():  # a file link inside the moved folder, too
                file.write_text("victim")
    before = {f: f.read_text() for f in outside.rglob("*") if f.is_file()}
    cfg = compose([f"agent={agent}", f"driver={driver}"])
    agent_cfg = dataclasses.replace(cfg.agent, binary=first.command[0])
    env = {
        "HOME": str(home),
        "PATH": os.environ["PATH"],
        GATEWAY_URL_ENV: GATEWAY,
        GATEWAY_TOKEN_ENV: TOKEN,
    }
    load_adapter(agent_cfg).launch(
        LaunchContext(
            ws,
            agent_cfg,
            cfg.driver,
            env,
            tmp_path / "cell",
            budget_s=900,
            continuation_prompt="go on",
            resume_index=1,
        )
    )
    assert {f: f.read_text() for f in outside.rglob("*") if f.is_file()} == before
    assert all(not entry.is_symlink() for entry in home.rglob("*"))


RESUME_FLAGS = {
    "claude-code": ["--continue"],
    "codex": ["exec", "resume", "--last"],
    "gemini-cli": ["--resume", "latest"],
    "opencode": ["run", "--format", "json", "--continue"],
    "openhands": ["--resume", "--last"],
}


@pytest.mark.parametrize("agent", CLI_AGENTS)
def test_a_resumed_cli_continues_its_last_session_with_the_continuation_prompt(
    agent: str, tmp_path: Path
) -> None:
    from autorl.agents.reprompt import continuation_prompt

    driver = {"claude-code": "claude-sonnet-4.5", "gemini-cli": "gemini-2.5-flash"}.get(
        agent, "gpt-5"
    )
    first, ws, home = _launch(agent, tmp_path, driver=driver)
    flags = RESUME_FLAGS[agent]
    assert not any(first.command[i : i + len(flags)] == flags for i in range(len(first.command)))
    cfg = compose([f"agent={agent}", f"driver={driver}"])
    agent_cfg = dataclasses.replace(cfg.agent, binary=first.command[0])
    text = continuation_prompt(1830, 3600, 0)
    env = {
        "HOME": str(home),
        "PATH": os.environ["PATH"],
        GATEWAY_URL_ENV: GATEWAY,
        GATEWAY_TOKEN_ENV: TOKEN,
    }
    resumed = load_adapter(agent_cfg).launch(
        LaunchContext(ws, agent_cfg, cfg.driver, env, tmp_path / "cell", continuation_prompt=text)
    )
    assert any(resumed.command[i : i + len(flags)] == flags for i in range(len(resumed.command))), (
        resumed.command
    )
    assert resumed.command[-1] == text and first.command[-1] not in resumed.command
    assert resumed.env["HOME"] == first.env["HOME"] == str(home)  # where the CLI keeps its sessions
