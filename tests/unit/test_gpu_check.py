"""bench/gpu_check.py: every check it makes decides its exit code, and the script runs
(on this machine's CPU: ``--device cpu`` makes the same checks with the CPU as the device)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"


def _script() -> ModuleType:
    if "gpu_check" in sys.modules:
        return sys.modules["gpu_check"]
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclass resolves annotations through it
    spec.loader.exec_module(module)
    return module


def test_a_failing_check_fails_the_script(capsys: pytest.CaptureFixture[str]) -> None:
    check = _script().Check
    passing = check("batched equals one by one", True, 32, "32 of 32")
    failing = check("same greedy texts as the CPU", False, 12, ">= 30 of 32")
    assert _script().verdict([passing], {}) == 0
    assert _script().verdict([passing, failing], {"device": "x"}) == 1
    assert _script().verdict([], {}) == 1  # no check run is no pass
    out = capsys.readouterr().out
    assert "FAIL same greedy texts as the CPU: 12 (needs >= 30 of 32)" in out


def test_the_script_passes_its_checks_on_the_cpu(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu"],
        capture_output=True, text=True, timeout=900, cwd=SCRIPT.parents[1],
        env={"PYTHONPATH": str(SCRIPT.parents[1]), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
             "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("\nok  ") + done.stdout.startswith("ok  ") == 7, done.stdout
