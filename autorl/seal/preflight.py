"""Can this node seal cells? Checked before any cell starts; nothing is silently downgraded.

Each sandbox backend names what it needs (:meth:`autorl.seal.launch.CellSeal.problems`). A sweep
with ``sandbox.mode=bwrap`` (the default) needs bubblewrap, the namespaces it creates
(with ``setpriv`` to drop to the agent's uid when the sweep runs as root, else user namespaces),
the cgroup controllers that enforce the cell's budget and limits, and the agent toolchain. Each
missing piece is named with what to install, and with the explicit opt-out ``sandbox.mode=none``;
where user namespaces are off, the kernel setting that turns them off is read from ``/proc/sys``
and named with its change (:func:`userns_advice`), with what a KubeRay pod or Slurm job needs.

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
from typing import TYPE_CHECKING, NamedTuple

from agent_kit.sandbox import namespaces_problem, namespaces_required
from autorl.errors import ConfigError, PrerequisiteError
from autorl.schema import RunConfig
from autorl.seal.bwrap import Mount, SandboxSpec, bwrap_command
from autorl.seal.bwrap_seal import resolve_bwrap
from autorl.seal.cgroups import cgroup_support
from autorl.seal.launch import SANDBOXES
from autorl.seal.toolchain import check_toolchain, cuda_problem, toolchain_dir

if TYPE_CHECKING:
    from autorl.grid import CellSpec

# The eval option of a task whose evaluator judges code in agent_kit.sandbox (e.g. humaneval).
JUDGE_MODE_OPTION = "sandbox_mode"
OPT_OUT = (
    "or run agents unsealed (debugging only, recorded with every result) with sandbox.mode=none"
)


# Where the kernel's settings are read; userns_advice takes another root (a test's fake tree).
PROC_SYS = Path("/proc/sys")


class UsernsSetting(NamedTuple):
    """A kernel setting that can turn unprivileged user namespaces off."""

    name: str  # the sysctl's name; its file under /proc/sys has dots as slashes
    off_when_zero: bool  # True: 0 turns user namespaces off; False: any other value does
    change: str  # the command that turns user namespaces on, and where the setting exists


USERNS_SETTINGS = (
    UsernsSetting(
        "kernel.unprivileged_userns_clone",
        True,
        "on Debian and Ubuntu kernels: sysctl -w kernel.unprivileged_userns_clone=1",
    ),
    UsernsSetting(
        "user.max_user_namespaces",
        True,
        "above 0: sysctl -w user.max_user_namespaces=15000",
    ),
    UsernsSetting(
        "user.max_mnt_namespaces",
        True,
        "above 0: sysctl -w user.max_mnt_namespaces=15000",
    ),
    UsernsSetting(
        "kernel.apparmor_restrict_unprivileged_userns",
        False,
        "AppArmor on Ubuntu 24.04 and later: "
        "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile for "
        "bwrap with 'userns,'",
    ),
)

# Pods and jobs cannot change the node's sysctls; what their spec must allow besides.
CONTAINER_ADVICE = (
    "in a KubeRay pod the sysctl is the node's (a DaemonSet or the node image sets it) and the "
    "Ray container needs securityContext privileged: true, or allowPrivilegeEscalation: true with "
    "seccompProfile: {type: Unconfined} (and appArmorProfile: {type: Unconfined} on AppArmor "
    "nodes); under Slurm the site sets the sysctl on the compute nodes "
    "(docs/design.md#gpu-platform)"
)


def userns_off(root: Path = PROC_SYS) -> list[str]:
    """The settings under ``root`` (a ``/proc/sys`` tree) that turn unprivileged user namespaces
    off, each as ``name=value``, with the change that turns them on.

    A setting whose file is missing (another kernel) or unreadable does not count.

    Args:
        root: The ``/proc/sys`` folder to read (a seam: a test gives a fake tree).
    """
    found: list[str] = []
    for setting in USERNS_SETTINGS:
        path = root.joinpath(*setting.name.split("."))
        try:
            value = int(path.read_text().strip())
        except (OSError, ValueError):
            continue
        if (value == 0) == setting.off_when_zero:
            found.append(f"{setting.name}={value} ({setting.change})")
    return found


def userns_advice(root: Path = PROC_SYS) -> str:
    """What bubblewrap needs from a node whose user runs cells without root: which of the kernel
    settings under ``root`` is off and what to change, and what containers must allow besides.
    """
    off = userns_off(root)
    if off:
        found = "; ".join(off)
        return (
            f"unprivileged user namespaces, which this node's kernel settings turn off: {found}, "
            f"then keep it in /etc/sysctl.d/; {CONTAINER_ADVICE}"
        )
    return (
        "unprivileged user namespaces; the kernel settings here allow them "
        f"({', '.join(s.name for s in USERNS_SETTINGS)}), so a container's seccomp or AppArmor "
        f"profile likely blocks them: {CONTAINER_ADVICE}"
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
            "util-linux's setpriv at /usr/bin/setpriv, and (in a container) the right to create "
            f"namespaces; {CONTAINER_ADVICE}"
            if os.geteuid() == 0
            else userns_advice(PROC_SYS)
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
    directory = toolchain_dir(cfg.sandbox.toolchain)
    try:
        check_toolchain(directory)
    except PrerequisiteError as error:
        problems.append(f"{error}; {OPT_OUT}")
    else:
        gpu_problem = cuda_problem(directory, cfg.cell.gpus)
        if gpu_problem is not None:
            problems.append(gpu_problem)
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
