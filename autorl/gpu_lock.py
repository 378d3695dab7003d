"""The lock of a GPU node's environment: ``requirements/gpu-lock.txt``.

``make setup`` on a node with an NVIDIA driver (or with ``GPU=1``) installs ``.venv`` from this
lock: CUDA torch, vLLM and every other package at one resolved version. The lock is resolved with
uv for Linux x86_64 from ``pyproject.toml``'s pins and the extras a GPU node installs, so it can be
written and checked on any machine::

    python -m autorl.gpu_lock          # or: make gpu-lock

``tests/unit/test_gpu_lock.py`` checks offline that the lock holds every pin of ``pyproject.toml``
and, against the package index, that the pins still resolve: a pin vLLM does not accept fails
there, not on a user's GPU node.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = REPO / "pyproject.toml"
LOCK = REPO / "requirements" / "gpu-lock.txt"
EXTRAS = ("gpu", "envs", "dev")
PLATFORM = "x86_64-manylinux_2_28"
PYTHON = "3.11"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;#]+)")


def canonical(name: str) -> str:
    """A distribution's normalised name (PEP 503).

    >>> canonical("Jinja2"), canonical("hydra_core")
    ('jinja2', 'hydra-core')
    """
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lines: list[str]) -> dict[str, str]:
    """The ``name==version`` lines of a requirements text (comments, markers and extras ignored).

    >>> pins(["ray[default]==2.60.0", "    # via x", "numpy==2.3.5 ; python_version >= '3'"])
    {'ray': '2.60.0', 'numpy': '2.3.5'}
    """
    found: dict[str, str] = {}
    for line in lines:
        match = _PIN.match(line.strip())
        if match:
            found[canonical(match.group(1))] = match.group(2)
    return found


def project_pins(pyproject: Path = PYPROJECT) -> dict[str, str]:
    """The pins of the project's dependencies and of the extras a GPU node installs."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"])
    for extra in EXTRAS:
        lines += project["optional-dependencies"][extra]
    return pins(lines)


def lock_pins(lock: Path = LOCK) -> dict[str, str]:
    """The versions a lock file holds."""
    return pins(lock.read_text(encoding="utf-8").splitlines())


def compile_command(pyproject: Path, output: Path) -> list[str]:
    """The uv command that resolves ``pyproject`` for a CUDA Linux node into ``output``."""
    extras = [arg for extra in EXTRAS for arg in ("--extra", extra)]
    return [
        sys.executable, "-m", "uv", "pip", "compile", str(pyproject), *extras,
        "--python-platform", PLATFORM, "--python-version", PYTHON,
        "--no-header", "--quiet", "-o", str(output),
    ]  # fmt: skip


def main() -> int:
    """Write :data:`LOCK` from :data:`PYPROJECT`; uv's exit code (it explains a conflict)."""
    return subprocess.run(compile_command(PYPROJECT, LOCK), check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
