"""One cell's sealed launch: what its agent's sandbox holds, who it runs as, how it reaches its services.

The Workspace actor makes a :class:`CellSeal` for its cell and asks it for

- where the grading API and the driver gateway listen (:meth:`CellSeal.bind`) and the URL the
  agent uses for each (:meth:`CellSeal.agent_url`): unix sockets in ``<cell>/sockets`` reached
  through the in-sandbox forwarder (:mod:`autorl.seal.forward`) at ``http://127.0.0.1:<port>``, or
  plain loopback TCP when the cell has the node's network (``sandbox.network=host``) or is not sealed;
- the agent's base environment (:meth:`CellSeal.base_env`): sealed, a short allow-list instead of
  the node's environment, so no credential or cluster address of the node reaches the agent;
- the interpreter for agent-side Python (:attr:`CellSeal.python`): the toolchain's;
- the final command line (:meth:`CellSeal.wrap`) and the cell's cgroup (:meth:`CellSeal.cgroup`).

With ``sandbox.mode=none`` the same object answers with the unsealed values (node environment,
this interpreter, the command as it is, TCP on loopback, no cgroup): every cell is launched by one
code path, and its results record which way it ran (:meth:`CellSeal.mode_label`).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import sys
import uuid
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path

from autorl.errors import PrerequisiteError
from autorl.schema import RunConfig, SandboxMode, SandboxNetwork
from autorl.seal import forward
from autorl.seal.bwrap import Mount, SandboxSpec, bwrap_command
from autorl.seal.cgroups import CellCgroup, CgroupLimits
from autorl.seal.toolchain import check_toolchain, toolchain_dir, toolchain_mounts, toolchain_python
from autorl.serving import bind_tcp, bind_unix

logger = logging.getLogger(__name__)

# Loopback ports inside a sealed cell's own network namespace (no other cell shares it).
SERVICE_PORTS = {"grading": 8100, "gateway": 8101}
SOCKETS_INSIDE = Path("/run/autorl")  # where the cell's service sockets appear in its sandbox
# What a sealed agent keeps of the node's environment: locale and time zone only.
_NODE_ENV_KEPT = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")
_GPU_CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
_AGENT_USER = "agent"


def resolve_bwrap(configured: str) -> str:
    """The bubblewrap executable ``sandbox.bwrap`` names, as an absolute path.

    Raises:
        PrerequisiteError: it does not exist, naming the install command and the opt-out.
    """
    found = shutil.which(configured)
    if found is None:
        raise PrerequisiteError(
            f"bubblewrap not found (sandbox.bwrap={configured}): cells run their agent in a bubblewrap "
            "sandbox. Install it (Debian/Ubuntu: apt-get install bubblewrap) or point sandbox.bwrap at it; "
            "to run agents unsealed (debugging only, recorded with every result) pass sandbox.mode=none"
        )
    return str(Path(found).resolve())


class CellSeal:
    """How one cell's agent is launched: sealed (``sandbox.mode=bwrap``) or not (``none``).

    Args:
        cfg: The cell's config.
        cell_id: The cell.
        cell_dir: The cell folder; the seal keeps its sockets and generated files under it, and the
            agent's uid is derived from its path.
    """

    def __init__(self, cfg: RunConfig, cell_id: str, cell_dir: Path) -> None:
        self.cfg = cfg
        self.cell_id = cell_id
        self.cell_dir = cell_dir
        self.sealed = cfg.sandbox.mode == SandboxMode.bwrap
        self.isolated_network = self.sealed and cfg.sandbox.network == SandboxNetwork.none
        self.uid: int | None = None
        self.python = sys.executable
        self._toolchain: Path | None = None
        self._bwrap = ""
        self._sockets: dict[str, Path] = {}
        if self.sealed:
            self._bwrap = resolve_bwrap(cfg.sandbox.bwrap)
            self._toolchain = toolchain_dir(cfg.sandbox.toolchain)
            check_toolchain(self._toolchain)
            self.python = str(toolchain_python(self._toolchain))
            if os.geteuid() == 0:
                # Distinct per cell folder (sweep and cell), so that no two cells' agents share a uid on a
                # node, not even the same cell of two sweeps running side by side.
                folder = str(cell_dir.resolve())
                self.uid = cfg.sandbox.uid_base + zlib.crc32(folder.encode()) % 100_000
        self.sandbox_dir = cell_dir / "sandbox"

    def mode_label(self) -> str:
        """How the cell ran, for its records: ``bwrap``, ``bwrap+host-network`` or ``none``."""
        if not self.sealed:
            return "none"
        return "bwrap" if self.isolated_network else "bwrap+host-network"

    # ---- services --------------------------------------------------------------------------

    def bind(self, name: str) -> socket.socket:
        """The socket the cell's service ``name`` (``grading``, ``gateway``) serves on."""
        if not self.isolated_network:
            return bind_tcp(self.cfg.grading_api.host)
        folder = self.cell_dir / "sockets"
        folder.mkdir(mode=0o755, exist_ok=True)
        path = folder / f"{name}.sock"
        path.unlink(missing_ok=True)
        # A unix socket path has at most 107 bytes and cell folders can be longer: bind through a
        # descriptor of the folder (/proc/self/fd/<n>/<name>.sock names the same place).
        folder_fd = os.open(folder, os.O_PATH | os.O_DIRECTORY)
        try:
            sock = bind_unix(Path(f"/proc/self/fd/{folder_fd}/{name}.sock"))
        finally:
            os.close(folder_fd)
        # The agent's uid connects to it (connecting needs write permission on the socket file);
        # the folder is bound into the sandbox read-only, so the agent cannot replace the socket.
        os.chmod(path, 0o666)
        self._sockets[name] = path
        return sock

    def agent_url(self, name: str, served_url: str) -> str:
        """The URL the agent uses for service ``name``, served at ``served_url``."""
        if name in self._sockets:
            return f"http://127.0.0.1:{SERVICE_PORTS[name]}"
        return served_url

    # ---- the agent's side ------------------------------------------------------------------

    def base_env(self, node_env: Mapping[str, str], home: Path) -> dict[str, str]:
        """The agent's environment before the benchmark's and the adapter's variables are added."""
        if not self.sealed:
            return dict(node_env)
        assert self._toolchain is not None
        env = {key: node_env[key] for key in _NODE_ENV_KEPT if key in node_env}
        env.setdefault("LANG", "C.UTF-8")
        env |= {
            "PATH": f"{self._toolchain / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home), "USER": _AGENT_USER, "LOGNAME": _AGENT_USER, "TMPDIR": "/tmp",
            "HF_HOME": str(home / ".cache" / "huggingface"),
        }
        if self.isolated_network:
            # Nothing off the cell is reachable: fail fast instead of timing out on a hub download.
            env |= {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        if "CUDA_VISIBLE_DEVICES" in node_env:
            env["CUDA_VISIBLE_DEVICES"] = node_env["CUDA_VISIBLE_DEVICES"]
        return env

    def hand_over(self, *folders: Path) -> None:
        """Give the agent's uid the folders it writes (workspace, HOME), except read-only parts."""
        if self.uid is None:
            return
        for folder in folders:
            for path in [folder, *folder.rglob("*")]:
                if path.is_symlink() or not path.stat().st_mode & stat.S_IWUSR:
                    continue  # the base model link and the read-only data copy stay root's
                os.lchown(path, self.uid, self.uid)

    def wrap(self, command: list[str], *, workspace: Path, home: Path, base_model: Path,
             read_only: Iterable[Path]) -> list[str]:
        """The command that runs ``command`` in the cell's sandbox (``command`` itself when unsealed)."""
        if not self.sealed:
            return command
        assert self._toolchain is not None
        self.sandbox_dir.mkdir(mode=0o755, exist_ok=True)
        # The base model at the path the workspace's models/<base> link names, and at its real path.
        models = {Path(os.path.abspath(base_model)), base_model.resolve()}
        mounts = [Mount(workspace, writable=True), Mount(home, writable=True), *(Mount(p) for p in models)]
        mounts += [Mount(path) for path in {*toolchain_mounts(self._toolchain), *read_only}]
        mounts += [Mount(path, device=True) for path in self._gpu_devices()]
        if self.isolated_network:
            forwarder = self.sandbox_dir / "forward.py"
            shutil.copyfile(forward.__file__, forwarder)
            # The sockets at a short path inside (the unix socket path limit), read-only.
            mounts += [Mount(self.cell_dir / "sockets", inside=SOCKETS_INSIDE), Mount(forwarder)]
            spec_forwards = [f"--forward={SERVICE_PORTS[name]}={SOCKETS_INSIDE / path.name}"
                             for name, path in sorted(self._sockets.items())]
            command = [self.python, "-I", "-S", str(forwarder), *spec_forwards, "--", *command]
        spec = SandboxSpec(self._bwrap, tuple(_outermost(mounts)), workspace, self.cfg.sandbox.network,
                           self.uid, self._identity_files(home))
        return bwrap_command(spec, command)

    def contain(self, command: list[str], *, read_only: Iterable[Path], writable: Iterable[Path]) -> list[str]:
        """``command`` (a host tool working on the agent's files, e.g. git on ``code/``) in a sandbox
        of its own as the agent's uid, with only the given folders, and no network.

        The agent owns what the tool reads, links included; inside, a link to a host path leads
        nowhere. ``command`` itself when the cell is not sealed.
        """
        if not self.sealed:
            return command
        mounts = [*(Mount(p) for p in read_only), *(Mount(p, writable=True) for p in writable)]
        spec = SandboxSpec(self._bwrap, tuple(_outermost(mounts)), Path("/"), SandboxNetwork.none, self.uid)
        return bwrap_command(spec, command)

    def close(self) -> None:
        """Remove the cell's service sockets (their servers have stopped): a sweep folder holds
        only plain files, so it can be copied and archived."""
        for path in self._sockets.values():
            path.unlink(missing_ok=True)
        self._sockets.clear()

    def cgroup(self) -> CellCgroup | None:
        """A new cgroup with the cell's limits (sealed cells), or None."""
        if not self.sealed:
            return None
        cell = self.cfg.cell
        limits = CgroupLimits(memory_bytes=int(cell.memory_gb * (1 << 30)), cpus=cell.cpus or None,
                              max_processes=cell.max_processes)
        # Unique per attempt: a retried cell on the same node must not meet its earlier cgroup.
        return CellCgroup.create(f"autorl-{self.cell_id}-{uuid.uuid4().hex[:8]}", limits)

    def _identity_files(self, home: Path) -> dict[Path, str]:
        """passwd, group and hosts of the sandbox: the agent's user, root, localhost."""
        uid = self.uid if self.uid is not None else os.getuid()
        files = {
            "passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\n{_AGENT_USER}:x:{uid}:{uid}:agent:{home}:/bin/bash\n",
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

    def _gpu_devices(self) -> list[Path]:
        """The device nodes of the GPUs reserved for the cell (none on a CPU node)."""
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        if self.cfg.cell.gpus <= 0 or not visible:
            return []
        indexes = [item.strip() for item in visible.split(",") if item.strip().isdigit()]
        candidates = [*_GPU_CONTROL_DEVICES, *(f"/dev/nvidia{i}" for i in indexes)]
        return [Path(p) for p in candidates if Path(p).exists()]


def _outermost(mounts: list[Mount]) -> list[Mount]:
    """``mounts`` without read-only paths already inside another mount (a writable one wins)."""
    kept: list[Mount] = []
    for mount in sorted(mounts, key=lambda m: (len(m.dest.parts), not m.writable)):
        if any(mount.dest == k.dest or mount.dest.is_relative_to(k.dest) for k in kept) and not mount.writable:
            continue
        kept.append(mount)
    return kept

