"""Can this node seal cells? Checked before any cell starts; nothing is silently downgraded.

A sweep with ``sandbox.mode=bwrap`` (the default) needs bubblewrap, the namespaces it creates
(with ``setpriv`` to drop to the agent's uid when the sweep runs as root, else user namespaces),
the cgroup controllers that enforce the cell's budget and limits, and the agent toolchain. Each
missing piece is named with what to install, and with the explicit opt-out ``sandbox.mode=none``.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from autorl.errors import PrerequisiteError
from autorl.schema import RunConfig, SandboxMode
from autorl.seal.bwrap import Mount, SandboxSpec, bwrap_command
from autorl.seal.cgroups import cgroup_support
from autorl.seal.launch import resolve_bwrap
from autorl.seal.toolchain import check_toolchain, toolchain_dir

OPT_OUT = "or run agents unsealed (debugging only, recorded with every result) with sandbox.mode=none"


def _probe(bwrap: str, cfg: RunConfig) -> str | None:
    """Run ``true`` in a sandbox made like a cell's; None when it works, else why not."""
    with tempfile.TemporaryDirectory(prefix="autorl-seal-probe-") as folder:
        workspace = Path(folder)
        uid = cfg.sandbox.uid_base if os.geteuid() == 0 else None
        if uid is not None:
            os.chown(workspace, uid, uid)
        spec = SandboxSpec(bwrap, (Mount(workspace, writable=True),), workspace, cfg.sandbox.network, uid)
        argv = bwrap_command(spec, ["/bin/sh", "-c", f"touch {workspace}/ok"])
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False, env={"PATH": "/usr/bin:/bin"})
        except (OSError, subprocess.TimeoutExpired) as error:
            return str(error)
        if done.returncode != 0 or not (workspace / "ok").exists():
            return f"exit {done.returncode}: {done.stderr.strip()[-400:]}"
    return None


def sandbox_problems(cfg: RunConfig) -> list[str]:
    """What keeps this node from sealing ``cfg``'s cells; empty when it can (or when mode is none)."""
    if cfg.sandbox.mode != SandboxMode.bwrap:
        return []
    problems: list[str] = []
    try:
        bwrap = resolve_bwrap(cfg.sandbox.bwrap)
    except PrerequisiteError as error:
        return [str(error)]
    failure = _probe(bwrap, cfg)
    if failure is not None:
        how = ("util-linux's setpriv at /usr/bin/setpriv" if os.geteuid() == 0
               else "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)")
        problems.append(f"bubblewrap ({bwrap}) cannot create a cell's sandbox here ({failure}); it needs {how}; {OPT_OUT}")
    support = cgroup_support()
    for missing in support.problems():
        problems.append(f"cgroups: {missing}; the cell's budget, memory, CPU and process limits need them; {OPT_OUT}")
    try:
        check_toolchain(toolchain_dir(cfg.sandbox.toolchain))
    except PrerequisiteError as error:
        problems.append(f"{error}; {OPT_OUT}")
    return problems


def check_sandbox(cfg: RunConfig) -> None:
    """Raise unless this node can seal ``cfg``'s cells.

    Raises:
        PrerequisiteError: every problem of :func:`sandbox_problems`, one per line.
    """
    problems = sandbox_problems(cfg)
    if problems:
        raise PrerequisiteError("this node cannot seal cells:\n- " + "\n- ".join(problems))
