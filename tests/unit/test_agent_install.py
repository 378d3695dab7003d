"""Agent CLI installs: one folder per agent, so installing a second CLI keeps the first.

The real two-CLI install (``python -m autorl.agents.install codex gemini-cli``) downloads about
500 MB from the npm registry, so here a stand-in ``npm`` on ``PATH`` does what npm does to a prefix:
it installs the named package and prunes every package the prefix's ``package.json`` does not list
(what ``--no-save`` into one shared prefix did to the earlier CLI). The real Codex install is
exercised by ``make test`` and tests/integration/test_real_cli.py.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autorl.agents import install
from autorl.agents.cli import find_binary, install_commands, install_dir, installed_path, installed_version
from autorl.config import compose
from autorl.registry import option_names
from autorl.schema import CliAgentConfig, InstallManager

FAKE_NPM = """\
import json, os, shutil, sys
from pathlib import Path

args = sys.argv[1:]
with open(os.environ["FAKE_NPM_LOG"], "a") as log:
    log.write(" ".join(args) + "\\n")
prefix = Path(args[args.index("--prefix") + 1])
package, version = args[-1].rsplit("@", 1)
manifest = prefix / "package.json"
listed = json.loads(manifest.read_text())["dependencies"] if manifest.exists() else {}
if "--no-save" not in args:
    listed[package] = version
    prefix.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"dependencies": listed}))
modules = prefix / "node_modules"
bins = json.loads(os.environ["FAKE_NPM_BINS"])
for installed in list(modules.glob("*/package.json")) + list(modules.glob("@*/*/package.json")):
    name = json.loads(installed.read_text())["name"]
    if name not in listed and name != package:  # npm prunes what package.json does not list
        shutil.rmtree(installed.parent)
        (modules / ".bin" / bins[name]).unlink()
(modules / package).mkdir(parents=True, exist_ok=True)
(modules / package / "package.json").write_text(json.dumps({"name": package, "version": version}))
(modules / ".bin").mkdir(exist_ok=True)
binary = modules / ".bin" / bins[package]
binary.write_text("#!/bin/sh\\necho " + package + " " + version + "\\n")
binary.chmod(0o755)
"""


def _installable() -> dict[str, CliAgentConfig]:
    configs = {name: compose([f"agent={name}"]).agent for name in option_names("agent")}
    return {name: cfg for name, cfg in configs.items() if isinstance(cfg, CliAgentConfig)}


def test_each_cli_has_an_install_folder_of_its_own(tmp_path: Path) -> None:
    configs = {name: dataclasses.replace(cfg, agents_dir=str(tmp_path)) for name, cfg in _installable().items()}
    assert {"codex", "gemini-cli", "openhands"} <= set(configs)
    folders = {name: install_dir(cfg) for name, cfg in configs.items()}
    assert folders == {name: tmp_path / name for name in configs}  # distinct, named after the agent
    for name, cfg in configs.items():
        assert installed_path(cfg).is_relative_to(folders[name])
        commands = install_commands(cfg)
        if cfg.install.manager == InstallManager.npm:
            [command] = commands
            assert command[command.index("--prefix") + 1] == str(folders[name]) and "--no-save" not in command
        else:  # pip: a venv of its own
            assert commands[0][-1] == str(folders[name]) and commands[1][0] == str(folders[name] / "bin" / "python")


def test_installing_a_second_cli_keeps_the_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    configs = {name: cfg for name, cfg in _installable().items() if name in ("codex", "gemini-cli")}
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir()
    (fake_bin / "npm").write_text(f"#!{sys.executable}\n{FAKE_NPM}")
    (fake_bin / "npm").chmod(0o755)
    log = tmp_path / "npm.log"
    monkeypatch.setenv("PATH", f"{fake_bin}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_NPM_LOG", str(log))
    monkeypatch.setenv("FAKE_NPM_BINS", json.dumps({c.install.package: c.install.bin for c in configs.values()}))
    monkeypatch.setenv("AUTORL_AGENTS_DIR", str(tmp_path / "agents"))

    assert install.main(["codex"]) == 0
    assert install.main(["codex", "gemini-cli"]) == 0
    for name, cfg in configs.items():
        assert installed_version(cfg) == cfg.install.version, name
        assert find_binary(cfg) == str(tmp_path / "agents" / name / "node_modules" / ".bin" / cfg.install.bin)
    assert len(log.read_text().splitlines()) == 2  # codex was already installed the second time
    assert "codex 0.169.0: already installed" in capsys.readouterr().out

    assert install.main(["codex", "--force"]) == 0  # reinstalls, and gemini-cli stays
    assert len(log.read_text().splitlines()) == 3 and installed_version(configs["gemini-cli"]) == "0.61.0"


def test_the_old_shared_prefix_would_lose_the_first_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in npm reproduces the bug that one folder per agent fixes."""
    fake = tmp_path / "npm"
    fake.write_text(f"#!{sys.executable}\n{FAKE_NPM}")
    fake.chmod(0o755)
    monkeypatch.setenv("FAKE_NPM_LOG", str(tmp_path / "npm.log"))
    monkeypatch.setenv("FAKE_NPM_BINS", json.dumps({"@openai/codex": "codex", "@google/gemini-cli": "gemini"}))
    shared = tmp_path / "shared"
    for spec in ("@openai/codex@0.169.0", "@google/gemini-cli@0.61.0"):
        subprocess.run([str(fake), "install", "--prefix", str(shared), "--no-save", spec], check=True)
    assert not (shared / "node_modules" / ".bin" / "codex").exists()
    assert (shared / "node_modules" / ".bin" / "gemini").exists()
