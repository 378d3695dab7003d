"""The ``bwrap`` sandbox backend (``sandbox.mode=bwrap``, the default): the agent runs in a
bubblewrap sandbox, in a cgroup of its own.

Sealed, the agent keeps a short allow-list of the node's environment instead of all of it, so no
credential or cluster address of the node reaches it; runs the toolchain's interpreter; sees only
its workspace, HOME, the base model, the toolchain and what its adapter names; and, unless
``sandbox.network=host``, reaches the grading API and the gateway through unix sockets forwarded
by :mod:`autorl.seal.forward` to fixed loopback ports inside its own network namespace.
"""

from __future__ import annotations

import os
import shutil
import uuid
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path

from autorl.errors import PrerequisiteError
from autorl.schema import RunConfig, SandboxNetwork
from autorl.seal import forward
from autorl.seal.bwrap import Mount, SandboxSpec, bwrap_command
from autorl.seal.cgroups import CellCgroup, CgroupLimits
from autorl.seal.gpus import (
    GpuDevice,
    GpuMappingError,
    device_binds,
    device_dir,
    map_visible_devices,
    query_device_table,
)
from autorl.seal.launch import SERVICE_PORTS, CellSeal
from autorl.seal.toolchain import check_toolchain, toolchain_dir, toolchain_mounts, toolchain_python

SOCKETS_INSIDE = Path("/run/autorl")  # where the cell's service sockets appear in its sandbox
# What a sealed agent keeps of the node's environment: locale and time zone only.
_NODE_ENV_KEPT = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")
_AGENT_USER = "agent"


def resolve_bwrap(configured: str) -> str:
    """The bubblewrap executable ``sandbox.bwrap`` names, as an absolute path.

    Raises:
        PrerequisiteError: it does not exist, naming the install command and the opt-out.
    """
    found = shutil.which(configured)
    if found is None:
        raise PrerequisiteError(
            f"bubblewrap not found (sandbox.bwrap={configured}): cells run their agent in a "
            "bubblewrap "
            "sandbox. Install it (Debian/Ubuntu: apt-get install bubblewrap) or point "
            "sandbox.bwrap at it; "
            "to run agents unsealed (debugging only, recorded with every result) pass "
            "sandbox.mode=none"
        )
    return str(Path(found).resolve())


class BwrapSeal(CellSeal):
    """One cell sealed by bubblewrap and a cgroup (see the module docstring).

    Raises:
        PrerequisiteError: bubblewrap or the toolchain is missing (the preflight names both first).
    """

    name = "bwrap"
    sealed = True

    def __init__(self, cfg: RunConfig, cell_id: str, cell_dir: Path) -> None:
        super().__init__(cfg, cell_id, cell_dir)
        self.isolated_network = cfg.sandbox.network == SandboxNetwork.none
        self._bwrap = resolve_bwrap(cfg.sandbox.bwrap)
        self._toolchain = toolchain_dir(cfg.sandbox.toolchain)
        check_toolchain(self._toolchain)
        self.python = str(toolchain_python(self._toolchain))
        if os.geteuid() == 0:
            # Distinct per cell folder (sweep and cell), so that no two cells' agents share a uid on
            # a node, not even the same cell of two sweeps running side by side.
            folder = str(cell_dir.resolve())
            self.uid = cfg.sandbox.uid_base + zlib.crc32(folder.encode()) % 100_000
        self._gpus: tuple[GpuDevice, ...] | None = None

    @classmethod
    def problems(cls, cfg: RunConfig) -> list[str]:
        """Bubblewrap, the namespaces it makes, the cgroup controllers and the toolchain."""
        from autorl.seal.preflight import bwrap_problems  # here: the preflight imports this module

        return bwrap_problems(cfg)

    def mode_label(self) -> str:
        """``bwrap``, or ``bwrap+host-network`` with ``sandbox.network=host``."""
        return "bwrap" if self.isolated_network else "bwrap+host-network"

    def base_env(self, node_env: Mapping[str, str], home: Path) -> dict[str, str]:
        """Locale and time zone of the node's environment, the toolchain's PATH, the agent's HOME,
        loopback for NCCL and gloo, and the reserved GPUs' UUIDs as ``CUDA_VISIBLE_DEVICES``."""
        env = {key: node_env[key] for key in _NODE_ENV_KEPT if key in node_env}
        env.setdefault("LANG", "C.UTF-8")
        env |= {
            "PATH": f"{self._toolchain / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "USER": _AGENT_USER,
            "LOGNAME": _AGENT_USER,
            "TMPDIR": "/tmp",
            "HF_HOME": str(home / ".cache" / "huggingface"),
        }
        if self.isolated_network:
            # Nothing off the cell is reachable: fail fast instead of timing out on a hub download.
            env |= {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        # NCCL and gloo skip loopback by default, and loopback is the only interface of an isolated
        # cell (and the one its GPUs' processes share with each other on the host network too).
        env |= {"NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"}
        if gpus := self.reserved_gpus():
            # By UUID: inside, CUDA may number the GPUs it can open from 0 (as under a device
            # cgroup), so one of the node's indices could name another GPU or none; a UUID cannot.
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu.uuid for gpu in gpus)
        return env

    def wrap(
        self,
        command: list[str],
        *,
        workspace: Path,
        home: Path,
        base_model: Path,
        read_only: Iterable[Path],
    ) -> list[str]:
        """The bubblewrap command line that runs ``command`` in the cell's sandbox."""
        self.sandbox_dir.mkdir(mode=0o755, exist_ok=True)
        # The base model at the path the workspace's models/<base> link names, and at its real path.
        models = {Path(os.path.abspath(base_model)), base_model.resolve()}
        mounts = [
            Mount(workspace, writable=True),
            Mount(home, writable=True),
            *(Mount(p) for p in models),
        ]
        mounts += [Mount(path) for path in {*toolchain_mounts(self._toolchain), *read_only}]
        mounts += [
            Mount(host, device=True, inside=inside)
            for host, inside in device_binds(self.reserved_gpus(), device_dir())
        ]
        if self.isolated_network:
            forwarder = self.sandbox_dir / "forward.py"
            shutil.copyfile(forward.__file__, forwarder)
            # The sockets at a short path inside (the unix socket path limit), read-only.
            mounts += [Mount(self.cell_dir / "sockets", inside=SOCKETS_INSIDE), Mount(forwarder)]
            spec_forwards = [
                f"--forward={SERVICE_PORTS[name]}={SOCKETS_INSIDE / path.name}"
                for name, path in sorted(self._sockets.items())
            ]
            command = [self.python, "-I", "-S", str(forwarder), *spec_forwards, "--", *command]
        spec = SandboxSpec(
            self._bwrap,
            tuple(_outermost(mounts)),
            workspace,
            self.cfg.sandbox.network,
            self.uid,
            self._identity_files(home),
            # Multi-GPU training shares tensors through /dev/shm; its pages count against the
            # cell's memory limit, so that limit is its size.
            shm_bytes=int(self.cfg.cell.memory_gb * (1 << 30)),
        )
        return bwrap_command(spec, command)

    def contain(
        self, command: list[str], *, read_only: Iterable[Path], writable: Iterable[Path]
    ) -> list[str]:
        """``command`` in a sandbox of its own as the agent's uid, with only the given folders,
        and no network.

        The agent owns what the tool reads, links included; inside, a link to a host path leads
        nowhere.
        """
        mounts = [*(Mount(p) for p in read_only), *(Mount(p, writable=True) for p in writable)]
        spec = SandboxSpec(
            self._bwrap, tuple(_outermost(mounts)), Path("/"), SandboxNetwork.none, self.uid
        )
        return bwrap_command(spec, command)

    def cgroup(self) -> CellCgroup | None:
        """A new cgroup with the cell's memory, CPU and process limits."""
        cell = self.cfg.cell
        limits = CgroupLimits(
            memory_bytes=int(cell.memory_gb * (1 << 30)),
            cpus=cell.cpus or None,
            max_processes=cell.max_processes,
        )
        # Unique per attempt: a retried cell on the same node must not meet its earlier cgroup.
        return CellCgroup.create(f"autorl-{self.cell_id}-{uuid.uuid4().hex[:8]}", limits)

    def _identity_files(self, home: Path) -> dict[Path, str]:
        """passwd, group and hosts of the sandbox: the agent's user, root, localhost."""
        uid = self.uid if self.uid is not None else os.getuid()
        files = {
            "passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n"
            f"{_AGENT_USER}:x:{uid}:{uid}:agent:{home}:/bin/bash\n",
            "group": f"root:x:0:\n{_AGENT_USER}:x:{uid}:\n",
            "hosts": "127.0.0.1 localhost\n::1 localhost\n",
        }
        written = {}
        for name, text in files.items():
            path = self.sandbox_dir / name
            path.write_text(text)
            path.chmod(0o644)
            written[path] = name
        return written

    def reserved_gpus(self) -> tuple[GpuDevice, ...]:
        """The GPUs Ray reserved for the cell (its actor's ``CUDA_VISIBLE_DEVICES``), looked up in
        the node's device table once; none when ``cell.gpus`` is 0.

        Raises:
            GpuMappingError: the cell reserved GPUs but Ray named none, or an id maps to no GPU.
        """
        if self._gpus is None:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            if self.cfg.cell.gpus <= 0:
                self._gpus = ()
            elif not visible.strip():
                raise GpuMappingError(
                    f"cell.gpus={self.cfg.cell.gpus:g} but the cell's actor has no "
                    "CUDA_VISIBLE_DEVICES: Ray reserved no GPU for it"
                )
            else:
                self._gpus = map_visible_devices(visible, query_device_table())
        return self._gpus


def _outermost(mounts: list[Mount]) -> list[Mount]:
    """``mounts`` without read-only paths already inside another mount (a writable one wins)."""
    kept: list[Mount] = []
    for mount in sorted(mounts, key=lambda m: (len(m.dest.parts), not m.writable)):
        if (
            any(mount.dest == k.dest or mount.dest.is_relative_to(k.dest) for k in kept)
            and not mount.writable
        ):
            continue
        kept.append(mount)
    return kept
