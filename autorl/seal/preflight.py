"""Can this node seal cells? Checked before any cell starts; nothing is silently downgraded.

Each sandbox backend names what it needs (:meth:`autorl.seal.launch.CellSeal.problems`). A sweep
with ``sandbox.mode=bwrap`` (the default) needs bubblewrap, the namespaces it creates
(with ``setpriv`` to drop to the agent's uid when the sweep runs as root, else user namespaces),
the cgroup controllers that enforce the cell's budget and limits, and the agent toolchain. Each
missing piece is named with what to install, and with the explicit opt-out ``sandbox.mode=none``.

A task whose evaluator runs the candidate's code in :mod:`agent_kit.sandbox` (its eval options
have a ``sandbox_mode``, e.g. humaneval) needs that sandbox's namespaces to hide its private split
from the code: :func:`judge_sandbox_problems` names what is missing, with the explicit opt-in
``task.eval.<source>.sandbox_mode=rlimits``.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agent_kit.sandbox import namespaces_problem, namespaces_required
from autorl.errors import ConfigError, PrerequisiteError
from autorl.schema import RunConfig
from autorl.seal.bwrap import Mount, SandboxSpec, bwrap_command
from autorl.seal.bwrap_seal import resolve_bwrap
from autorl.seal.cgroups import cgroup_support
from autorl.seal.launch import SANDBOXES
from autorl.seal.toolchain import check_toolchain, toolchain_dir

if TYPE_CHECKING:
    from autorl.config import CellSpec

# The eval option of a task whose evaluator judges code in agent_kit.sandbox (e.g. humaneval).
JUDGE_MODE_OPTION = "sandbox_mode"
OPT_OUT = (
    "or run agents unsealed (debugging only, recorded with every result) with sandbox.mode=none"
)


def _probe(bwrap: str, cfg: RunConfig) -> str | None:
    """Run ``true`` in a sandbox made like a cell's; None when it works, else why not."""
    with tempfile.TemporaryDirectory(prefix="autorl-seal-probe-") as folder:
        workspace = Path(folder)
        uid = cfg.sandbox.uid_base if os.geteuid() == 0 else None
        if uid is not None:
            os.chown(workspace, uid, uid)
        spec = SandboxSpec(
            bwrap, (Mount(workspace, writable=True),), workspace, cfg.sandbox.network, uid
        )
        argv = bwrap_command(spec, ["/bin/sh", "-c", f"touch {workspace}/ok"])
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
                env={"PATH": "/usr/bin:/bin"},
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return str(error)
        if done.returncode != 0 or not (workspace / "ok").exists():
            return f"exit {done.returncode}: {done.stderr.strip()[-400:]}"
    return None


def sandbox_problems(cfg: RunConfig) -> list[str]:
    """What keeps this node from running ``cfg``'s cells in the backend ``sandbox.mode`` names
    (:meth:`autorl.seal.launch.CellSeal.problems`); empty when it can (always for ``none``).

    An unknown backend is one problem, with "did you mean" and the valid names.
    """
    try:
        backend = SANDBOXES.get(str(cfg.sandbox.mode))
    except ConfigError as error:
        return [str(error)]
    return backend.problems(cfg)


def bwrap_problems(cfg: RunConfig) -> list[str]:
    """What keeps this node from sealing ``cfg``'s cells with bubblewrap; empty when it can."""
    problems: list[str] = []
    try:
        bwrap = resolve_bwrap(cfg.sandbox.bwrap)
    except PrerequisiteError as error:
        return [str(error)]
    failure = _probe(bwrap, cfg)
    if failure is not None:
        how = (
            "util-linux's setpriv at /usr/bin/setpriv"
            if os.geteuid() == 0
            else "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
            "user.max_user_namespaces > 0)"
        )
        problems.append(
            f"bubblewrap ({bwrap}) cannot create a cell's sandbox here ({failure}); it needs "
            f"{how}; {OPT_OUT}"
        )
    support = cgroup_support()
    for missing in support.problems():
        problems.append(
            f"cgroups: {missing}; the cell's budget, memory, CPU and process limits need them; "
            f"{OPT_OUT}"
        )
    try:
        check_toolchain(toolchain_dir(cfg.sandbox.toolchain))
    except PrerequisiteError as error:
        problems.append(f"{error}; {OPT_OUT}")
    return problems


def judge_sandbox_problems(cells: Sequence[CellSpec]) -> list[str]:
    """What keeps this node's judges from hiding their tasks' private splits; empty: nothing.

    A cell's task uses the judge sandbox when its eval options (``task.eval.<source>``) have a
    ``sandbox_mode``; ``rlimits`` there is the explicit opt-in to run without namespaces. One
    message per task and source.

    Args:
        cells: The sweep's cells.
    """
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    for cell in cells:
        task = cell.config.task
        options = task.eval.get(task.source) or {}
        key = (task.name, task.source)
        opted_in = options.get(JUDGE_MODE_OPTION) == "rlimits"
        if JUDGE_MODE_OPTION not in options or opted_in or key in seen:
            continue
        seen.add(key)
        problem = namespaces_problem()
        if problem is not None:
            setting = f"task.eval.{task.source}.{JUDGE_MODE_OPTION}"
            problems.append(namespaces_required(f"the {task.name} judge", setting, problem))
    return problems


def check_sandbox(cfg: RunConfig) -> None:
    """Raise unless this node can seal ``cfg``'s cells.

    Raises:
        PrerequisiteError: every problem of :func:`sandbox_problems`, one per line.
    """
    problems = sandbox_problems(cfg)
    if problems:
        raise PrerequisiteError("this node cannot seal cells:\n- " + "\n- ".join(problems))
