"""Engines (and every other plugin kind) are added by a plugin folder as agents are: one YAML file
in its ``conf/<group>/`` naming the class, and the Python module beside it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from autorl.engine import ENGINES, resolve_engine
from autorl.errors import ConfigError
from autorl.plugins import PLUGIN_PATH_ENV, activate
from autorl.registry import OptionRegistry

ENGINE_MODULE = '''"""An engine that answers every prompt with the prompt's length."""

from pathlib import Path


class LengthEngine:
    def __init__(self, model_dir: Path, *, batch_size: int, base_dir: Path | None = None,
                 device: str | None = None, suffix: str = "") -> None:
        self.suffix = suffix

    def generate_text(self, prompts, *, max_new_tokens, stop=None):
        return [f"{len(p)}{self.suffix}" for p in prompts]

    def generate_chat(self, conversations, *, max_new_tokens, stop=None):
        return [str(len(c)) for c in conversations]

    def swap(self, model_dir, *, base_dir=None):
        return True

    def close(self):
        pass
'''
ENGINE_YAML = """defaults:
  - _schema
  - _self_

name: length
implementation: my_length_engine:LengthEngine
description: "Answers with each prompt's length"
options:
  suffix: "!"
"""


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A plugin folder with one engine, active in this process."""
    folder = tmp_path / "plugin"
    (folder / "conf" / "engine").mkdir(parents=True)
    (folder / "conf" / "engine" / "length.yaml").write_text(ENGINE_YAML)
    (folder / "my_length_engine.py").write_text(ENGINE_MODULE)
    monkeypatch.delenv(PLUGIN_PATH_ENV, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    activate([folder])
    yield folder
    sys.modules.pop("my_length_engine", None)


def test_the_built_in_engines_come_from_their_yaml_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PLUGIN_PATH_ENV, raising=False)
    assert ENGINES.names() == ["hf", "vllm"] and ENGINES.target("hf") == "autorl.engine.hf:HFEngine"
    with pytest.raises(ConfigError, match="unknown engine 'hff'. Did you mean: hf"):
        resolve_engine("hff")


def test_a_plugin_engine_is_one_yaml_file_and_its_module(plugin: Path) -> None:
    assert "length" in ENGINES and resolve_engine("length") == "length"
    engine = ENGINES.get("length")(plugin, batch_size=1, base_dir=None, suffix="!")
    assert engine.generate_text(["abc", "de"], max_new_tokens=1) == ["3!", "2!"] and engine.swap(
        plugin
    )


def test_a_plugin_engine_is_a_valid_grader_engine(plugin: Path) -> None:
    from autorl.config import compose

    compose(["grader.engine=length"]).grader.check()
    with pytest.raises(ConfigError, match="Did you mean: length"):
        compose(["grader.engine=lenght"]).grader.check()


def test_an_entry_registered_in_code_survives_a_new_plugin(
    plugin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry: OptionRegistry[object] = OptionRegistry(
        "engine", "engine", "implementation", {"x": "json:dumps"}
    )
    registry.register("y", "json:loads")
    assert registry.names() == ["hf", "length", "vllm", "x", "y"]
    monkeypatch.delenv(PLUGIN_PATH_ENV)
    assert registry.names() == ["hf", "vllm", "x", "y"]


SANDBOX_MODULE = '''"""A sandbox backend that prefixes the agent's command (standing in for a
container runtime)."""

from autorl.seal.launch import CellSeal


class PrefixSeal(CellSeal):
    name = "prefix"
    sealed = True

    @classmethod
    def problems(cls, cfg):
        return ["prefix: the runtime is not installed; or sandbox.mode=none"]

    def wrap(self, command, *, workspace, home, base_model, read_only):
        return ["runtime", "exec", *command]
'''


def test_a_plugin_sandbox_backend_is_chosen_by_sandbox_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autorl.config import compose
    from autorl.seal.launch import SANDBOXES, CellSeal, Unsealed
    from autorl.seal.preflight import sandbox_problems

    folder = tmp_path / "plugin"
    (folder / "conf" / "sandbox").mkdir(parents=True)
    (folder / "conf" / "sandbox" / "prefix.yaml").write_text(
        "name: prefix\ndescription: a test backend\nimplementation: my_prefix_seal:PrefixSeal\n"
    )
    (folder / "my_prefix_seal.py").write_text(SANDBOX_MODULE)
    monkeypatch.delenv(PLUGIN_PATH_ENV, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert SANDBOXES.names() == ["bwrap", "none"]
    activate([folder])
    try:
        cfg = compose(["sandbox.mode=prefix"])
        seal = CellSeal(cfg, "c1", tmp_path / "cell")
        assert type(seal).__name__ == "PrefixSeal" and seal.sealed and seal.mode_label() == "prefix"
        assert seal.wrap(
            ["run"], workspace=tmp_path, home=tmp_path, base_model=tmp_path, read_only=[]
        ) == ["runtime", "exec", "run"]
        assert (
            seal.base_env({"A": "1"}, tmp_path) == {"A": "1"} and seal.cgroup() is None
        )  # the base's
        # The preflight asks the chosen backend: nothing is downgraded without a word.
        assert sandbox_problems(cfg) == [
            "prefix: the runtime is not installed; or sandbox.mode=none"
        ]
        assert isinstance(CellSeal(compose(["sandbox.mode=none"]), "c1", tmp_path), Unsealed)
        [problem] = sandbox_problems(compose(["sandbox.mode=prefx"]))
        assert "unknown sandbox backend 'prefx'. Did you mean: prefix?" in problem
    finally:
        sys.modules.pop("my_prefix_seal", None)
