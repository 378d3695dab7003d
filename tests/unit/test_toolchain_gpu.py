"""The agent toolchain's GPU variant: what it installs, and the preflight that refuses a GPU cell
whose toolchain cannot reach CUDA on its node (a fake toolchain interpreter stands for torch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autorl.seal import toolchain
from autorl.seal.toolchain import STAMP, cuda_problem, expected_stamp, pinned_requirements


def _fake_toolchain(root: Path, variant: str, answer: str) -> Path:
    """A toolchain folder whose ``bin/python`` prints ``answer`` as torch's device count; with a
    ``CUDA_VISIBLE_DEVICES`` set (a Ray task without GPUs sets it empty) it answers 0."""
    (root / "bin").mkdir(parents=True)
    python = root / "bin" / "python"
    python.write_text(
        '#!/bin/sh\nif [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then echo 0; else echo '
        + answer
        + "; fi\n"
    )
    python.chmod(0o755)
    (root / STAMP).write_text(json.dumps(expected_stamp(variant)))
    return root


def test_the_gpu_variant_adds_vllm_to_the_same_pins() -> None:
    cpu, gpu = pinned_requirements(), pinned_requirements(gpu=True)
    assert gpu[: len(cpu)] == cpu and any(r.startswith("vllm==") for r in gpu[len(cpu) :])
    assert any(r.startswith("numpy==") for r in cpu)  # the numpy vLLM accepts, as .venv's
    assert expected_stamp("gpu")["variant"] == "gpu" != expected_stamp()["variant"]


def test_a_cell_without_gpus_needs_nothing_of_the_toolchain(tmp_path: Path) -> None:
    assert cuda_problem(_fake_toolchain(tmp_path / "tc", "cpu", "0"), 0) is None


def test_a_gpu_cell_on_the_cpu_variant_is_refused_with_the_command(tmp_path: Path) -> None:
    problem = cuda_problem(_fake_toolchain(tmp_path / "tc", "cpu", "2"), 1)
    assert problem is not None and "CPU variant" in problem and " --gpu" in problem


def test_a_gpu_cell_whose_toolchain_sees_no_device_is_refused(tmp_path: Path) -> None:
    problem = cuda_problem(_fake_toolchain(tmp_path / "tc", "gpu", "0"), 2)
    assert problem is not None and "sees no CUDA device (0)" in problem and "nvidia-smi" in problem


def test_the_probe_asks_without_the_preflight_tasks_empty_device_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert cuda_problem(_fake_toolchain(tmp_path / "tc", "gpu", "2"), 1) is None


def test_a_toolchain_of_the_other_variant_is_rebuilt(tmp_path: Path) -> None:
    built = _fake_toolchain(tmp_path / "tc", "cpu", "0")
    assert toolchain._stale_reason(built, "cpu") is None
    assert "variant" in (toolchain._stale_reason(built, "gpu") or "")


def test_simulated_gpus_need_no_cuda_of_the_toolchain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Declared GPUs backed by fake device files (bench/paper_grid.py, tests/helpers/fake_gpus.py).
    monkeypatch.setenv("AUTORL_GPU_DEV_DIR", str(tmp_path / "dev"))
    assert cuda_problem(_fake_toolchain(tmp_path / "tc", "cpu", "0"), 8) is None
