"""The GPU install: ``requirements/gpu-lock.txt``, what ``make setup`` installs on a GPU node.

Offline: the lock holds every pin of ``pyproject.toml`` at its version, with vLLM and the CUDA
build of torch, and setup picks the GPU variant exactly when an NVIDIA driver answers. Online (the
package index, time-limited): the pins still resolve for CUDA Linux, to the lock's versions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from autorl.gpu_lock import LOCK, REPO, compile_command, lock_pins, project_pins


def test_the_lock_holds_every_project_pin_at_its_version() -> None:
    locked = lock_pins()
    wrong = {
        name: (version, locked.get(name))
        for name, version in project_pins().items()
        if locked.get(name) != version
    }
    assert not wrong, (
        f"pyproject.toml pins that requirements/gpu-lock.txt does not hold (pin, lock): {wrong}. "
        "Regenerate the lock with `make gpu-lock`; if uv finds no solution, the pin conflicts "
        "with vLLM's requirements."
    )


def test_the_lock_is_the_cuda_environment_with_vllm() -> None:
    locked = lock_pins()
    assert locked["vllm"] == project_pins()["vllm"]
    assert locked["torch"] == "2.13.0"  # the index's Linux x86_64 wheel is the CUDA build
    assert any(name.startswith("nvidia-cu") for name in locked), "no CUDA runtime packages"


def test_a_pin_moved_in_pyproject_alone_is_reported(tmp_path: Path) -> None:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    version = project_pins()["transformers"]
    moved = tmp_path / "pyproject.toml"
    moved.write_text(text.replace(f'"transformers=={version}"', '"transformers==5.24.0"'))
    assert project_pins(moved)["transformers"] == "5.24.0" != lock_pins()["transformers"]


def _variant(tmp_path: Path, *, driver: bool) -> str:
    """The variant ``make`` picks with (or without) an ``nvidia-smi`` that lists a GPU on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0000)'\n")
    fake.chmod(0o755)
    path = os.environ["PATH"] if not driver else f"{bin_dir}:{os.environ['PATH']}"
    if not driver:  # this machine has no driver; keep it so whatever PATH holds
        assert shutil.which("nvidia-smi") is None
    env = {k: v for k, v in os.environ.items() if k not in ("GPU", "MAKEFLAGS", "MFLAGS")}
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", "print-variant"],
        cwd=REPO, env={**env, "PATH": path}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def test_setup_installs_the_gpu_variant_where_an_nvidia_driver_answers(tmp_path: Path) -> None:
    assert _variant(tmp_path, driver=True) == "gpu"
    assert _variant(tmp_path, driver=False) == "cpu"
    dry = subprocess.run(
        ["make", "-n", "-B", "GPU=1", ".venv/bin/autorl-installed-gpu"],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "-r requirements/gpu-lock.txt" in dry.stdout and "--no-deps -e ." in dry.stdout


def test_the_pins_still_resolve_to_the_lock_against_the_index(tmp_path: Path) -> None:
    """Re-resolve for CUDA Linux: each package the project pins resolves to the lock's version
    (unpinned dependencies may have newer releases since the lock was written)."""
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    fresh = tmp_path / "gpu-lock.txt"
    try:
        done = subprocess.run(
            compile_command(tmp_path / "pyproject.toml", fresh),
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("uv pip compile did not finish in 300 s: is the package index reachable?")
    assert done.returncode == 0, f"the GPU install does not resolve:\n{done.stderr[-3000:]}"
    resolved, locked = lock_pins(fresh), lock_pins(LOCK)
    differ = {
        name: (locked.get(name), resolved.get(name))
        for name in project_pins()
        if resolved.get(name) != locked.get(name)
    }
    assert not differ, f"the lock and a fresh resolution differ (lock, fresh): {differ}"
