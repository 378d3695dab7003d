"""The agent's toolchain: a Python environment of its own, for training, without autorl or
``tasks/``.

A sealed agent trains with this venv's interpreter, not with the project's: it holds torch,
numpy, transformers, tokenizers, safetensors, huggingface-hub, trl, peft, datasets and accelerate
at the pins of ``pyproject.toml``, and nothing of this repository. Two variants: ``cpu`` (torch's
CPU build where the machine's index serves it) and ``gpu`` (``--gpu``: the CUDA build and vLLM
from the ``[gpu]`` extra, for TRL's vLLM generation on the cell's GPUs). The
agent-side code (``agent_kit/`` and the task's ``agent/`` package) is not installed in it either:
the cell gets a read-only copy on ``PYTHONPATH`` (:func:`autorl.workspace.layout.copy_agent_code`).
It has no pip: inside the sandbox there is nothing to install from.

The venv's interpreter is a link to the project's base interpreter (``home`` in ``pyvenv.cfg``), so
the sandbox binds both, read-only (:func:`toolchain_mounts`). ``toolchain.json`` in the venv records
what it was built from (the pins, ``constraints.txt``, the base interpreter);
:func:`check_toolchain` compares it with what the repository asks for now, so a pin change means a
rebuild::

    python -m autorl.seal.toolchain [--dir DIR]      # or: make test-deps

Where it lives: ``sandbox.toolchain_dir`` when set, else ``$AUTORL_TOOLCHAIN_DIR``, else
``<repo>/.cache/toolchain``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from autorl.errors import PrerequisiteError
from autorl.gpu_lock import canonical
from autorl.seal.gpus import DEV_DIR_ENV

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = REPO / "pyproject.toml"
CONSTRAINTS = REPO / "constraints.txt"
DEFAULT_DIR = REPO / ".cache" / "toolchain"
ENV_VAR = "AUTORL_TOOLCHAIN_DIR"
STAMP = "toolchain.json"
# What an agent trains with (issue #11): the libraries, and the ones among their dependencies that
# pyproject.toml pins as well, so that the toolchain's versions are the project's.
PACKAGES = (
    "torch",
    "numpy",
    "transformers",
    "tokenizers",
    "safetensors",
    "huggingface-hub",
    "trl",
    "peft",
    "datasets",
    "accelerate",
)
_STAMP_FORMAT = 1


def toolchain_dir(configured: str | None = None) -> Path:
    """Where the toolchain venv is: ``configured``, else ``$AUTORL_TOOLCHAIN_DIR``, else
    ``<repo>/.cache/toolchain``.

    >>> toolchain_dir("/opt/tc")
    PosixPath('/opt/tc')
    """
    chosen = configured or os.environ.get(ENV_VAR)
    return Path(chosen).expanduser().absolute() if chosen else DEFAULT_DIR


def toolchain_python(directory: Path) -> Path:
    """The toolchain's interpreter (``<dir>/bin/python``)."""
    return directory / "bin" / "python"


def build_command(directory: Path, *, gpu: bool = False) -> str:
    """The command that (re)builds the toolchain at ``directory`` (``gpu``: the GPU variant)."""
    default = directory == DEFAULT_DIR
    return (
        f"{sys.executable} -m autorl.seal.toolchain"
        + ("" if default else f" --dir {directory}")
        + (" --gpu" if gpu else "")
        + ((" (or: make test-deps GPU=1)" if gpu else " (or: make test-deps)") if default else "")
    )


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string (``Foo_Bar[x]==1`` ->
    ``foo-bar``)."""
    return canonical(re.split(r"[\s\[=<>!~;@]", requirement.strip(), maxsplit=1)[0])


def pinned_requirements(pyproject: Path = PYPROJECT, *, gpu: bool = False) -> list[str]:
    """The ``pyproject.toml`` dependency strings of :data:`PACKAGES`, in that order, and with
    ``gpu`` the ``[gpu]`` extra's.

    Raises:
        PrerequisiteError: One of them is not among the project's dependencies.
    """
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    dependencies: list[str] = project["dependencies"]
    extra: list[str] = project["optional-dependencies"]["gpu"] if gpu else []
    by_name = {_name(dep): dep.strip() for dep in dependencies}
    missing = [name for name in PACKAGES if name not in by_name]
    if missing:
        raise PrerequisiteError(
            f"{pyproject} [project].dependencies does not pin {', '.join(missing)}, which the "
            "agent toolchain installs; add them, or drop them from autorl.seal.toolchain.PACKAGES"
        )
    return [by_name[name] for name in PACKAGES] + [dep.strip() for dep in extra]


def _base_python() -> Path:
    """The interpreter the project's venv was made from (the toolchain's links point at it)."""
    return Path(getattr(sys, "_base_executable", None) or sys.executable).resolve()


def expected_stamp(variant: str = "cpu") -> dict[str, Any]:
    """What ``toolchain.json`` must say for a toolchain of ``variant`` to match this repository."""
    return {
        "format": _STAMP_FORMAT,
        "variant": variant,
        "requirements": pinned_requirements(gpu=variant == "gpu"),
        "constraints": CONSTRAINTS.read_text(encoding="utf-8"),
        "base_python": str(_base_python()),
    }


def _read_stamp(directory: Path) -> dict[str, Any] | None:
    try:
        stamp = json.loads((directory / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) else None


def _stale_reason(directory: Path, variant: str | None = None) -> str | None:
    """Why the toolchain at ``directory`` cannot be used as is (``None``: it can).

    ``variant`` is the one asked for; None takes the built one's (either serves CPU-only cells).
    """
    if not toolchain_python(directory).exists():
        return f"no toolchain at {directory} ({toolchain_python(directory)} does not exist)"
    stamp = _read_stamp(directory)
    if stamp is None:
        return (
            f"the toolchain at {directory} is unfinished or not one "
            f"({directory / STAMP} is missing or unreadable)"
        )
    expected = expected_stamp(variant or str(stamp.get("variant", "cpu")))
    changed = [key for key in expected if stamp.get(key) != expected[key]]
    if changed:
        return (
            f"the toolchain at {directory} was built for other {', '.join(changed)} "
            "than the repository's now"
        )
    return None


def check_toolchain(directory: Path) -> None:
    """Fail unless the toolchain at ``directory`` exists and matches the repository's pins.

    Raises:
        PrerequisiteError: Missing, unfinished or stale; the message gives the command that
            builds it.
    """
    reason = _stale_reason(directory)
    if reason is not None:
        raise PrerequisiteError(f"{reason}; build it with: {build_command(directory)}")


def cuda_problem(directory: Path, gpus: float) -> str | None:
    """Why a cell that reserves ``gpus`` GPUs could not use them with the toolchain at
    ``directory`` (None: it could, or it reserves none).

    The toolchain must be the GPU variant and its torch must see a CUDA device on this node
    (asked with ``CUDA_VISIBLE_DEVICES`` unset: a preflight task holds no GPUs of its own). A node
    whose GPUs are simulated (declared to Ray, with fake device files under
    ``AUTORL_GPU_DEV_DIR``, :mod:`autorl.seal.gpus`) has no CUDA to find: nothing to check there.
    """
    if gpus <= 0 or os.environ.get(DEV_DIR_ENV):
        return None
    stamp = _read_stamp(directory) or {}
    fix = f"build the GPU variant with: {build_command(directory, gpu=True)}"
    if stamp.get("variant") != "gpu":
        return (
            f"cells reserve {gpus:g} GPU(s) but the agent toolchain at {directory} is the CPU "
            f"variant (no CUDA torch, no vLLM); {fix}"
        )
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    probe = "import torch; print(torch.cuda.device_count())"
    try:
        done = subprocess.run(
            [str(toolchain_python(directory)), "-c", probe],
            capture_output=True, text=True, timeout=120, env=env, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"the agent toolchain's torch at {directory} did not answer ({error}); {fix}"
    count = done.stdout.strip()
    if done.returncode != 0 or not count.isdigit() or int(count) == 0:
        seen = count or (done.stderr.strip()[-300:] or f"exit {done.returncode}")
        return (
            f"cells reserve {gpus:g} GPU(s) but the agent toolchain's torch at {directory} sees "
            f"no CUDA device ({seen}): check the NVIDIA driver (nvidia-smi), or {fix}"
        )
    return None


def venv_base_prefix(venv: Path) -> Path | None:
    """The prefix of a venv's base interpreter (the parent of ``home`` in its ``pyvenv.cfg``, e.g.
    ``~/.pyenv/versions/3.11.7``): what a sandbox must bind, beside the venv, for its ``python`` to
    run.

    Returns:
        None when ``pyvenv.cfg`` has no ``home`` line.

    Raises:
        OSError: ``pyvenv.cfg`` is not readable.
    """
    lines = (venv / "pyvenv.cfg").read_text(encoding="utf-8").splitlines()
    homes = [
        value.strip()
        for key, _, value in (line.partition("=") for line in lines)
        if key.strip() == "home"
    ]
    # home is the base interpreter's bin/ folder; its parent is the prefix with the stdlib and
    # libpython.
    return Path(homes[0]).resolve().parent if homes else None


def toolchain_mounts(directory: Path) -> list[Path]:
    """What a sandbox binds read-only for the toolchain's interpreter to run: the venv and its base
    prefix.

    Raises:
        PrerequisiteError: The venv has no readable ``pyvenv.cfg`` with a ``home`` line.
    """
    try:
        prefix = venv_base_prefix(directory)
    except OSError as error:
        raise PrerequisiteError(
            f"{directory / 'pyvenv.cfg'} is not readable ({error}); build the toolchain with: "
            f"{build_command(directory)}"
        ) from error
    if prefix is None:
        raise PrerequisiteError(
            f"{directory / 'pyvenv.cfg'} has no 'home = ...' line; rebuild the toolchain with: "
            f"{build_command(directory)}"
        )
    return [directory.absolute(), prefix]


def build_toolchain(directory: Path, *, force: bool = False, gpu: bool = False) -> bool:
    """Create (or recreate) the toolchain venv at ``directory`` unless it is up to date.

    The venv is made from the project's base interpreter without pip; uv, with the machine's pip
    settings (:mod:`autorl.uv_pip`), installs :func:`pinned_requirements` into it with ``-c
    constraints.txt``. The stamp is written last, so an interrupted build is never taken for a
    finished one.

    Returns:
        True when it built, False when the toolchain was already up to date (its stamp is touched).

    Raises:
        PrerequisiteError: venv or uv failed (their output is in the message).
    """
    variant = "gpu" if gpu else "cpu"
    if not force and _stale_reason(directory, variant) is None:
        (directory / STAMP).touch()  # newer than pyproject.toml, for make
        return False
    stamp = expected_stamp(variant)
    if directory.exists():
        shutil.rmtree(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    steps = [
        [str(_base_python()), "-m", "venv", "--without-pip", str(directory)],
        [
            sys.executable,
            "-m",
            "autorl.uv_pip",
            "install",
            "-q",
            "--python",
            str(toolchain_python(directory)),
            "-c",
            str(CONSTRAINTS),
            *stamp["requirements"],
        ],
    ]
    for step in steps:
        # The argv is ours: fixed commands with the repository's paths and pins.
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise PrerequisiteError(
                f"building the agent toolchain at {directory} failed: {' '.join(step)} exited "
                f"{done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}"
            )
    (directory / STAMP).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
    return True


def _size_mb(directory: Path) -> float:
    return (
        sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.is_symlink())
        / 1e6
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m autorl.seal.toolchain [--dir DIR] [--force] [--gpu]``: build the toolchain if
    needed."""
    parser = argparse.ArgumentParser(
        prog="python -m autorl.seal.toolchain", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--dir", default=None, help=f"where (default: ${ENV_VAR}, else {DEFAULT_DIR})"
    )
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    parser.add_argument(
        "--gpu", action="store_true", help="the GPU variant: CUDA torch and vLLM (a GPU node)"
    )
    args = parser.parse_args(argv)
    directory = toolchain_dir(args.dir)
    started = time.monotonic()
    try:
        built = build_toolchain(directory, force=args.force, gpu=args.gpu)
    except PrerequisiteError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if built:
        print(
            f"agent toolchain built at {directory} in {time.monotonic() - started:.0f} s "
            f"({_size_mb(directory):.0f} MB); python: {toolchain_python(directory)}"
        )
    else:
        print(f"agent toolchain at {directory} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
