"""autorl.seal.toolchain: the agent's own Python has the training libraries at the project's pins,
not autorl nor tasks/; with the cell's copy of the agent-side code on its path it imports agent_kit
and the
task's package."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sysconfig
from pathlib import Path

import pytest

from autorl.errors import PrerequisiteError
from autorl.seal import toolchain
from autorl.seal.toolchain import (
    STAMP,
    build_toolchain,
    check_toolchain,
    pinned_requirements,
    toolchain_dir,
    toolchain_mounts,
    toolchain_python,
)
from autorl.tasks import discover_tasks
from autorl.workspace.layout import copy_agent_code

AGENT_TASKS = sorted(t for t, spec in discover_tasks().items() if spec.agent_dir.is_dir())


@pytest.fixture(scope="module")
def built() -> Path:
    """The toolchain `make test-deps` builds (the test fails with the build command when it has
    not)."""
    directory = toolchain_dir(None)
    check_toolchain(directory)
    return directory


def _run(
    python: Path, code: str, cwd: Path, pythonpath: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in ``cwd`` (not the repository: its folder would be importable as the
    script's own)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "HF_HUB_OFFLINE": "1"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [str(python), "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_toolchain_has_the_pinned_training_libraries_and_neither_autorl_nor_tasks(
    built: Path, tmp_path: Path
) -> None:
    code = """
import importlib.metadata as md, importlib.util, json
import torch, transformers, trl, peft, datasets, accelerate
libraries = ("torch", "transformers", "trl", "peft", "datasets", "accelerate")
packages = ("autorl", "tasks", "agent_kit", "pip")
print(json.dumps({"versions": {n: md.version(n) for n in libraries},
                  "cuda": torch.version.cuda,
                  "importable": {n: importlib.util.find_spec(n) is not None for n in packages}}))
"""
    done = _run(toolchain_python(built), code, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    pins = dict(req.split("==") for req in pinned_requirements())
    assert {name: version.split("+")[0] for name, version in seen["versions"].items()} == {
        n: pins[n] for n in seen["versions"]
    }
    assert seen["cuda"] is None  # the CPU build, through constraints.txt
    assert seen["importable"] == {"autorl": False, "tasks": False, "agent_kit": False, "pip": False}
    for name in ("autorl", "tasks"):
        refused = _run(toolchain_python(built), f"import {name}", tmp_path)
        assert refused.returncode != 0 and f"No module named '{name}'" in refused.stderr


@pytest.mark.parametrize("task_id", AGENT_TASKS)
def test_with_the_cell_copy_on_its_path_it_imports_agent_kit_and_the_task_agent_package(
    built: Path, tmp_path: Path, task_id: str
) -> None:
    package = copy_agent_code(discover_tasks()[task_id], tmp_path / "agent_code")
    assert package is not None and package.parent == tmp_path / "agent_code"
    assert sorted(p.name for p in package.parent.iterdir()) == ["agent_kit", "task_agent"]
    copied = [package.parent, *package.parent.rglob("*")]
    assert not [p for p in copied if p.stat().st_mode & 0o222], "the copy must be read-only"
    assert not [p for p in copied if p.name == "__pycache__"]
    code = """
import importlib, pkgutil, sys
import agent_kit, agent_kit.protocol, agent_kit.rollout, agent_kit.sandbox
import agent_kit.function_judge, agent_kit.judge_runtime
import agent_kit.scripted.common, agent_kit.scripted.policy, agent_kit.scripted.interactive
import agent_kit.scripted.__main__
import task_agent
for info in pkgutil.walk_packages(task_agent.__path__, "task_agent."):
    importlib.import_module(info.name)
assert callable(importlib.import_module("task_agent.recipe").run)
print(
    sorted(m.split(".")[0] for m in sys.modules if m.split(".")[0] in ("autorl", "tasks")),
    agent_kit.__file__,
)
"""
    done = _run(toolchain_python(built), code, tmp_path, pythonpath=package.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["[]", str(package.parent / "agent_kit" / "__init__.py")]


def test_the_mounts_hold_the_venv_and_the_interpreter_it_links_to(built: Path) -> None:
    mounts = toolchain_mounts(built)
    assert mounts[0] == built and len(mounts) == 2
    interpreter = toolchain_python(built).resolve()
    assert not interpreter.is_relative_to(built) and interpreter.is_relative_to(mounts[1])
    assert (
        mounts[1] / "lib" / "python3.11" / "os.py"
    ).is_file()  # the stdlib is under the base prefix


# Modules nothing here imports (torch's tensorboard writer needs tensorboard, which is not
# installed), so that their bytecode can only come from the install.
NEVER_IMPORTED = ("torch/utils/tensorboard/writer.py", "transformers/models/t5/modeling_t5.py")


def _without_bytecode(site: Path) -> list[str]:
    """The modules of :data:`NEVER_IMPORTED` that have no ``.pyc`` under the ``site`` packages
    folder."""
    return [
        module
        for module in NEVER_IMPORTED
        if not Path(importlib.util.cache_from_source(str(site / module))).is_file()
    ]


def test_the_libraries_are_compiled_at_install(built: Path) -> None:
    """A sealed agent imports the toolchain read-only as another uid and cannot write bytecode:
    without ``.pyc``
    files from the install, every agent process compiled torch and transformers from source."""
    assert _without_bytecode(next((built / "lib").glob("python3.*/site-packages"))) == []


def test_the_projects_venv_is_compiled_at_install() -> None:
    """`make setup` installs .venv without pip's serial compiling, then compiles it on every core;
    this kind of machine sets PYTHONDONTWRITEBYTECODE=1, so a missed compile would go unnoticed but
    for every
    process being slow."""
    assert _without_bytecode(Path(sysconfig.get_path("purelib"))) == []


def test_an_up_to_date_toolchain_is_not_rebuilt(built: Path) -> None:
    before = (built / "bin" / "python").lstat().st_mtime_ns
    assert build_toolchain(built) is False
    assert (built / "bin" / "python").lstat().st_mtime_ns == before


def test_a_missing_or_stale_toolchain_is_refused_with_the_build_command(tmp_path: Path) -> None:
    with pytest.raises(
        PrerequisiteError,
        match=rf"no toolchain at {tmp_path}.*python -m autorl.seal.toolchain --dir {tmp_path}",
    ):
        check_toolchain(tmp_path)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to("/usr/bin/python3")
    with pytest.raises(PrerequisiteError, match="unfinished or not one"):
        check_toolchain(tmp_path)
    stamp = toolchain.expected_stamp()
    (tmp_path / STAMP).write_text(json.dumps(stamp))
    check_toolchain(tmp_path)
    # A pin change (here: a different torch) makes it stale.
    (tmp_path / STAMP).write_text(
        json.dumps(stamp | {"requirements": ["torch==0.0.1", *stamp["requirements"][1:]]})
    )
    with pytest.raises(
        PrerequisiteError,
        match=r"built for other requirements.*build it with: .*autorl.seal.toolchain",
    ):
        check_toolchain(tmp_path)
    with pytest.raises(PrerequisiteError, match="pyvenv.cfg is not readable"):
        toolchain_mounts(tmp_path)


def test_the_pins_come_from_pyproject(tmp_path: Path) -> None:
    assert pinned_requirements()[0].startswith("torch==") and len(pinned_requirements()) == len(
        toolchain.PACKAGES
    )
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["torch==2.13.0", "Transformers==5.24.0"]\n')
    missing = r"does not pin numpy, tokenizers, safetensors, huggingface-hub, trl, peft"
    with pytest.raises(PrerequisiteError, match=missing):
        pinned_requirements(pyproject)


def test_where_it_lives(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(toolchain.ENV_VAR, raising=False)
    assert toolchain_dir(None) == toolchain.REPO / ".cache" / "toolchain"
    monkeypatch.setenv(toolchain.ENV_VAR, str(tmp_path / "env"))
    assert toolchain_dir(None) == tmp_path / "env"
    assert toolchain_dir(str(tmp_path / "configured")) == tmp_path / "configured"
    monkeypatch.chdir(tmp_path)
    assert toolchain_dir("relative") == tmp_path / "relative" and os.path.isabs(
        toolchain_dir("relative")
    )
