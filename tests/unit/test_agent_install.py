"""Agent CLI installs: one folder per agent, so installing a second CLI keeps the first.

The real two-CLI install (``python -m autorl.agents.install codex gemini-cli``) downloads about
500 MB from the npm registry, so here a stand-in ``npm`` on ``PATH`` does what npm does to a prefix:
it installs the named package and prunes every package the prefix's ``package.json`` does not list
(what ``--no-save`` into one shared prefix did to the earlier CLI). The five real installs are
exercised by ``make test-deps`` and tests/integration/test_real_cli.py. The interpreter of a pip
CLI's venv is resolved against real interpreters (this one, under pyenv- and uv-style folders).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autorl.agent_schema import CliAgentConfig, InstallManager
from autorl.agents import install
from autorl.agents.cli import (
    cli_read_only,
    find_binary,
    install_commands,
    install_dir,
    install_paths,
    installed_path,
    installed_version,
    python_candidates,
    resolve_python,
)
from autorl.config import compose
from autorl.errors import ConfigError
from autorl.registry import option_names

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
    configs = {
        name: dataclasses.replace(cfg, agents_dir=str(tmp_path))
        for name, cfg in _installable().items()
    }
    assert {"codex", "gemini-cli", "openhands"} <= set(configs)
    folders = {name: install_dir(cfg) for name, cfg in configs.items()}
    assert folders == {name: tmp_path / name for name in configs}  # distinct, named after the agent
    for name, cfg in configs.items():
        assert installed_path(cfg).is_relative_to(folders[name])
        commands = install_commands(cfg)
        if cfg.install.manager == InstallManager.npm:
            [command] = commands
            assert (
                command[command.index("--prefix") + 1] == str(folders[name])
                and "--no-save" not in command
            )
        else:  # pip: a venv of its own, filled by uv
            python = commands[1][commands[1].index("--python") + 1]
            assert commands[0][-1] == str(folders[name]) and python == str(
                folders[name] / "bin" / "python"
            )


def test_installing_a_second_cli_keeps_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    configs = {name: cfg for name, cfg in _installable().items() if name in ("codex", "gemini-cli")}
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir()
    (fake_bin / "npm").write_text(f"#!{sys.executable}\n{FAKE_NPM}")
    (fake_bin / "npm").chmod(0o755)
    log = tmp_path / "npm.log"
    monkeypatch.setenv("PATH", f"{fake_bin}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_NPM_LOG", str(log))
    monkeypatch.setenv(
        "FAKE_NPM_BINS", json.dumps({c.install.package: c.install.bin for c in configs.values()})
    )
    monkeypatch.setenv("AUTORL_AGENTS_DIR", str(tmp_path / "agents"))

    assert install.main(["codex"]) == 0
    assert install.main(["codex", "gemini-cli"]) == 0
    for name, cfg in configs.items():
        assert installed_version(cfg) == cfg.install.version, name
        assert find_binary(cfg) == str(
            tmp_path / "agents" / name / "node_modules" / ".bin" / cfg.install.bin
        )
    assert len(log.read_text().splitlines()) == 2  # codex was already installed the second time
    assert "codex 0.169.0: already installed" in capsys.readouterr().out

    assert install.main(["codex", "--force"]) == 0  # reinstalls, and gemini-cli stays
    assert (
        len(log.read_text().splitlines()) == 3
        and installed_version(configs["gemini-cli"]) == "0.61.0"
    )


def test_the_old_shared_prefix_would_lose_the_first_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stand-in npm reproduces the bug that one folder per agent fixes."""
    fake = tmp_path / "npm"
    fake.write_text(f"#!{sys.executable}\n{FAKE_NPM}")
    fake.chmod(0o755)
    monkeypatch.setenv("FAKE_NPM_LOG", str(tmp_path / "npm.log"))
    monkeypatch.setenv(
        "FAKE_NPM_BINS", json.dumps({"@openai/codex": "codex", "@google/gemini-cli": "gemini"})
    )
    shared = tmp_path / "shared"
    for spec in ("@openai/codex@0.169.0", "@google/gemini-cli@0.61.0"):
        subprocess.run(
            [str(fake), "install", "--prefix", str(shared), "--no-save", spec], check=True
        )
    assert not (shared / "node_modules" / ".bin" / "codex").exists()
    assert (shared / "node_modules" / ".bin" / "gemini").exists()


# ---- the interpreter of a pip CLI's venv (install.python) ----------------------------------------

VERSION = f"{sys.version_info[0]}.{sys.version_info[1]}"
SPEC = f"python{VERSION}"
# What pyenv puts on PATH for every installed version: a shim that fails unless that version is
# selected.
PYENV_SHIM = '#!/bin/sh\necho "pyenv: $(basename $0): command not found" >&2\nexit 127\n'


def _pip_cli(python: str) -> CliAgentConfig:
    cfg = _installable()["openhands"]
    return dataclasses.replace(cfg, install=dataclasses.replace(cfg.install, python=python))


def _executable(path: Path, text: str | None = None, target: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if target is not None:
        path.symlink_to(target)
    else:
        path.write_text(text or "")
        path.chmod(0o755)
    return path


def _isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, shim: bool = True) -> Path:
    """PATH with only a failing pyenv-style shim for SPEC; HOME and PYENV_ROOT empty; returns the
    pyenv root."""
    bin_dir = tmp_path / "path-bin"
    bin_dir.mkdir()
    if shim:
        _executable(bin_dir / SPEC, PYENV_SHIM)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = tmp_path / "pyenv"
    monkeypatch.setenv("PYENV_ROOT", str(root))
    return root


def test_a_failing_pyenv_shim_on_path_falls_back_to_the_newest_working_pyenv_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _isolate(monkeypatch, tmp_path)
    good = _executable(root / "versions" / f"{VERSION}.1" / "bin" / SPEC, target=sys.executable)
    _executable(
        root / "versions" / f"{VERSION}.10" / "bin" / SPEC, "#!/bin/sh\nexit 1\n"
    )  # newest, but broken
    _executable(
        root / "versions" / f"{VERSION}.2t" / "bin" / SPEC, target=sys.executable
    )  # free-threaded: not chosen
    _executable(
        root / "versions" / "2.7.18" / "bin" / SPEC, target=sys.executable
    )  # another version's folder
    assert [p.parent.parent.name for p in python_candidates(SPEC)] == [
        f"{VERSION}.10",
        f"{VERSION}.1",
    ]
    assert resolve_python(_pip_cli(SPEC)) == str(good)
    [venv, _] = install_commands(_pip_cli(SPEC), str(good))
    assert venv[:3] == [str(good), "-m", "venv"]


def test_uv_managed_pythons_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _isolate(monkeypatch, tmp_path)
    uv = tmp_path / "home" / ".local" / "share" / "uv" / "python"
    good = _executable(
        uv / f"cpython-{VERSION}.4-linux-x86_64-gnu" / "bin" / SPEC, target=sys.executable
    )
    assert resolve_python(_pip_cli(SPEC)) == str(good)


def test_a_working_interpreter_on_path_comes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _isolate(monkeypatch, tmp_path, shim=False)
    on_path = _executable(tmp_path / "path-bin" / SPEC, target=sys.executable)
    _executable(root / "versions" / f"{VERSION}.1" / "bin" / SPEC, target=sys.executable)
    assert resolve_python(_pip_cli(SPEC)) == str(on_path)


def test_an_interpreter_of_another_version_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _isolate(monkeypatch, tmp_path, shim=False)
    # A python3.99 that runs, but is this Python: named for a version it is not.
    _executable(tmp_path / "path-bin" / "python3.99", target=sys.executable)
    with pytest.raises(ConfigError, match=rf"python3.99 \(is Python {VERSION}\)"):
        resolve_python(_pip_cli("python3.99"))


def test_no_interpreter_names_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _isolate(monkeypatch, tmp_path)
    monkeypatch.setenv("AUTORL_AGENTS_DIR", str(tmp_path / "agents"))
    with pytest.raises(ConfigError) as error:
        resolve_python(_pip_cli(SPEC))
    message = str(error.value)
    assert f"{tmp_path / 'path-bin' / SPEC} (does not run)" in message
    assert f"Install Python {VERSION}" in message and f"pyenv install {VERSION}" in message
    assert "python -m autorl.agents.install openhands --python" in message
    # The install command stops with that message, before making anything.
    assert install.main(["openhands", "--python", str(tmp_path / "nowhere" / "python3.12")]) == 2
    assert "(does not run)" in capsys.readouterr().err and not (tmp_path / "agents").exists()


def test_a_sealed_cell_binds_the_venv_and_its_base_interpreter(tmp_path: Path) -> None:
    cfg = dataclasses.replace(_pip_cli(SPEC), agents_dir=str(tmp_path))
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(install_dir(cfg))], check=True
    )
    assert install_paths(cfg) == [tmp_path / "openhands", Path(sys.base_prefix).resolve()]
    binary = _executable(installed_path(cfg), "#!/bin/sh\n")
    assert cli_read_only(cfg, str(binary)) == tuple(
        install_paths(cfg)
    )  # what the CLI adapters bind
    npm = dataclasses.replace(_installable()["codex"], agents_dir=str(tmp_path))
    assert install_paths(npm) == [tmp_path / "codex"]
    (tmp_path / "openhands" / "pyvenv.cfg").unlink()
    with pytest.raises(ConfigError, match="pyvenv.cfg is unreadable.*install openhands --force"):
        install_paths(cfg)
