"""One cell's launch through its sandbox backend: what contains the agent, who it runs as, how it
reaches its services.

The backend is chosen by ``sandbox.mode`` among :data:`SANDBOXES`, the options of the ``sandbox``
config group (``conf/sandbox/<name>.yaml`` names its class, ``implementation: module:Class``;
a plugin folder adds a backend the same way): ``bwrap`` (:class:`autorl.seal.bwrap_seal.BwrapSeal`,
the default) and ``none`` (:class:`Unsealed`, debugging only). The Workspace actor makes
``CellSeal(cfg, cell_id, cell_dir)``, which is the chosen backend, and asks it for

- where the grading API and the driver gateway listen (:meth:`CellSeal.bind`) and the URL the
  agent uses for each (:meth:`CellSeal.agent_url`): unix sockets in ``<cell>/sockets`` when the
  backend isolates the cell's network (:attr:`CellSeal.isolated_network`), else loopback TCP;
- the agent's base environment (:meth:`CellSeal.base_env`), the interpreter for agent-side
  Python (:attr:`CellSeal.python`), the final command line (:meth:`CellSeal.wrap`), a host tool run
  on the agent's files (:meth:`CellSeal.contain`) and the cell's cgroup (:meth:`CellSeal.cgroup`);
- what keeps this node from running it, before any cell starts (:meth:`CellSeal.problems`, read
  by :mod:`autorl.seal.preflight`: nothing is silently downgraded).

Every cell is launched by one code path whatever its backend, and its results record which way it
ran (:meth:`CellSeal.mode_label`). :class:`SandboxBackend` is the interface a backend provides;
a backend subclasses :class:`CellSeal`, whose own methods are the unsealed behaviour.
"""

from __future__ import annotations

import os
import socket
import stat
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import ClassVar, Protocol

from autorl.registry import OptionRegistry
from autorl.schema import RunConfig
from autorl.seal.cgroups import CellCgroup
from autorl.serving import bind_tcp, bind_unix

# Loopback ports inside a sealed cell's own network namespace (no other cell shares it).
SERVICE_PORTS = {"grading": 8100, "gateway": 8101}


class SandboxBackend(Protocol):
    """What the Workspace actor asks of the backend that contains one cell's agent."""

    sealed: bool
    """Whether the agent is contained (its limits enforced, its view of the host cut down)."""
    isolated_network: bool
    """Whether the agent's network is its own (services reached through unix sockets)."""
    uid: int | None
    """The host uid the agent runs as; None: the sweep's own."""
    python: str
    """The interpreter for agent-side Python."""

    def mode_label(self) -> str:
        """How the cell ran, for its records (``bwrap``, ``bwrap+host-network``, ``none``)."""
        ...

    def bind(self, name: str) -> socket.socket:
        """The socket the cell's service ``name`` (``grading``, ``gateway``) serves on."""
        ...

    def agent_url(self, name: str, served_url: str) -> str:
        """The URL the agent uses for service ``name``, served at ``served_url``."""
        ...

    def base_env(self, node_env: Mapping[str, str], home: Path) -> dict[str, str]:
        """The agent's environment before the benchmark's and the adapter's variables."""
        ...

    def hand_over(self, *folders: Path) -> None:
        """Give the agent's uid the folders it writes (workspace, HOME)."""
        ...

    def wrap(
        self,
        command: list[str],
        *,
        workspace: Path,
        home: Path,
        base_model: Path,
        read_only: Iterable[Path],
    ) -> list[str]:
        """The command that runs the agent's ``command`` in the cell's sandbox."""
        ...

    def contain(
        self, command: list[str], *, read_only: Iterable[Path], writable: Iterable[Path]
    ) -> list[str]:
        """``command``, a host tool working on the agent's files, contained as the agent."""
        ...

    def cgroup(self) -> CellCgroup | None:
        """A new cgroup with the cell's limits, or None."""
        ...

    def close(self) -> None:
        """Release what the backend made for the cell (its service sockets)."""
        ...


class CellSeal:
    """Base of the sandbox backends; ``CellSeal(cfg, cell_id, cell_dir)`` makes the backend that
    ``cfg.sandbox.mode`` names. Its own methods run the agent unsealed (:class:`Unsealed`).

    Args:
        cfg: The cell's config.
        cell_id: The cell.
        cell_dir: The cell folder; the backend keeps its sockets and generated files under it.
    """

    name: ClassVar[str] = "none"
    sealed: bool = False

    def __new__(cls, cfg: RunConfig, cell_id: str, cell_dir: Path) -> CellSeal:
        """The instance of the backend ``cfg.sandbox.mode`` names, when made as ``CellSeal(...)``.

        Raises:
            ConfigError: Unknown ``sandbox.mode`` ("did you mean" and the valid backends).
        """
        backend = SANDBOXES.get(str(cfg.sandbox.mode)) if cls is CellSeal else cls
        return super().__new__(backend)

    def __init__(self, cfg: RunConfig, cell_id: str, cell_dir: Path) -> None:
        self.cfg = cfg
        self.cell_id = cell_id
        self.cell_dir = cell_dir
        self.isolated_network = False
        self.uid: int | None = None
        self.python = sys.executable
        self.sandbox_dir = cell_dir / "sandbox"
        self._sockets: dict[str, Path] = {}

    @classmethod
    def problems(cls, cfg: RunConfig) -> list[str]:
        """What keeps this node from running ``cfg``'s cells with this backend; empty: nothing.

        Each problem names what to install and the explicit opt-out; the sweep stops on any
        before a cell starts (:func:`autorl.seal.preflight.sandbox_problems`).
        """
        return []

    def mode_label(self) -> str:
        """How the cell ran, for its records: the backend's name."""
        return self.name

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

    def close(self) -> None:
        """Remove the cell's service sockets (their servers have stopped): a sweep folder holds
        only plain files, so it can be copied and archived."""
        for path in self._sockets.values():
            path.unlink(missing_ok=True)
        self._sockets.clear()

    # ---- the agent's side ------------------------------------------------------------------

    def base_env(self, node_env: Mapping[str, str], home: Path) -> dict[str, str]:
        """The agent's environment before the benchmark's and the adapter's variables: the
        node's."""
        return dict(node_env)

    def hand_over(self, *folders: Path) -> None:
        """Give the agent's uid the folders it writes (workspace, HOME), except read-only parts."""
        if self.uid is None:
            return
        for folder in folders:
            for path in [folder, *folder.rglob("*")]:
                if path.is_symlink() or not path.stat().st_mode & stat.S_IWUSR:
                    continue  # the base model link and the read-only data copy stay root's
                os.lchown(path, self.uid, self.uid)

    def wrap(
        self,
        command: list[str],
        *,
        workspace: Path,
        home: Path,
        base_model: Path,
        read_only: Iterable[Path],
    ) -> list[str]:
        """The command that runs ``command`` in the cell's sandbox: ``command`` itself here."""
        return command

    def contain(
        self, command: list[str], *, read_only: Iterable[Path], writable: Iterable[Path]
    ) -> list[str]:
        """``command`` (a host tool working on the agent's files, e.g. git on ``code/``) contained
        as the agent: ``command`` itself here."""
        return command

    def cgroup(self) -> CellCgroup | None:
        """A new cgroup with the cell's limits: none here."""
        return None


class Unsealed(CellSeal):
    """``sandbox.mode=none``: the agent runs as the sweep's user with the node's environment,
    network and files, and no limits (debugging only; every result and the report say so)."""

    name = "none"


# sandbox.mode -> backend class, from each conf/sandbox/<name>.yaml (autorl's and the plugins').
SANDBOXES: OptionRegistry[type[CellSeal]] = OptionRegistry(
    "sandbox backend", "sandbox", "implementation"
)
