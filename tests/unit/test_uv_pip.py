"""uv installs what pip would: `autorl.uv_pip` hands uv the machine's pip configuration."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autorl.uv_pip import machine_pip_settings, uv_options, uv_pip_command

REQUIREMENT = (
    "torch==2.13.0"  # the pin that a lost find-links or constraint turns into a CUDA build
)


def test_pip_variables_reach_uv_over_the_configuration_files(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///nowhere/a file:///nowhere/b")
    options, _ = uv_options(machine_pip_settings())
    pairs = list(zip(options[::2], options[1::2], strict=True))
    assert ("--find-links", str(tmp_path)) in pairs
    assert [value for name, value in pairs if name == "--extra-index-url"] == [
        "file:///nowhere/a",
        "file:///nowhere/b",
    ]
    assert ("--index-strategy", "unsafe-best-match") in pairs


def test_uv_resolves_the_torch_build_that_pip_resolves(tmp_path: Path) -> None:
    """On this kind of machine pip's configuration is what makes ``torch==2.13.0`` the CPU wheel;
    uv, run the
    way the toolchain build runs it, must land on the same file."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True
    )
    target = str(tmp_path / "venv" / "bin" / "python")
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-deps",
            "--ignore-installed",
            "--quiet",
            "--report",
            "-",
            REQUIREMENT,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pip.returncode == 0, pip.stderr[-2000:]
    [pip_pick] = [item["metadata"]["version"] for item in json.loads(pip.stdout)["install"]]
    command, env = uv_pip_command(
        ["install", "--dry-run", "--no-deps", "--python", target, REQUIREMENT]
    )
    uv = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)  # noqa: S603 - fixed argv
    assert uv.returncode == 0, uv.stderr[-2000:]
    assert re.findall(r"\+ torch==(\S+)", uv.stderr + uv.stdout) == [pip_pick], uv.stderr[-2000:]
