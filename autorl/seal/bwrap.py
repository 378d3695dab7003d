"""The bubblewrap command line of a sealed agent.

What the sandbox sees is only what :class:`SandboxSpec` lists: the system's ``/usr`` (with the
``/bin``, ``/lib``, ``/lib64`` and ``/sbin`` links of a merged-usr system), a few ``/etc`` files,
a fresh ``/proc`` and minimal ``/dev``, a private ``/tmp``, and the bind mounts of the cell (its
workspace read-write; base model, toolchain and agent code read-only). Every path is mounted at
its host path, so environment variables and files that name host paths stay true inside; the
folders above a mount are created empty (mode 0755), so nothing beside a mounted path shows.

Identity: started by root, bubblewrap runs without a user namespace (it can then mount paths under
``/root``), and ``setpriv`` drops the agent to a non-root host uid with no capabilities and
``no_new_privs`` before anything of the agent runs: a process of the agent is that uid on the host
too. Started by another user, bubblewrap makes a user namespace and the agent keeps that user's uid.

Namespaces: pid, ipc and uts always; network unless the cell opted out (``sandbox.network=host``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from autorl.schema import SandboxNetwork

# /etc files a program may need (dynamic linker cache, CA certificates, time zone, alternatives):
# nothing in them is the benchmark's. passwd, group and hosts are generated per cell.
SYSTEM_ETC = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/mime.types",
)
# Merged-usr links: these are symlinks into /usr on Debian 12; where one is a real folder it is
# bound.
USR_LINKS = ("/bin", "/lib", "/lib64", "/sbin", "/lib32", "/libx32")


@dataclass(frozen=True)
class Mount:
    """One bind mount, at the same path inside as outside unless ``inside`` says otherwise.

    Attributes:
        path: The host path.
        writable: Read-write (the workspace, HOME) or read-only (everything else).
        device: A device node (a GPU), bound with device access.
        inside: Where it appears in the sandbox (default: ``path``).
    """

    path: Path
    writable: bool = False
    device: bool = False
    inside: Path | None = None

    @property
    def dest(self) -> Path:
        """The path inside the sandbox."""
        return self.inside or self.path


@dataclass(frozen=True)
class SandboxSpec:
    """Everything the sandbox of one agent is made of.

    Attributes:
        bwrap: The bubblewrap executable.
        mounts: The cell's bind mounts (see :class:`Mount`).
        etc_files: Generated files bound read-only over ``/etc/<name>`` (host file → name).
        cwd: The agent's working folder (its workspace).
        network: ``none``: a network namespace with only loopback; ``host``: the node's.
        uid: Host uid the agent runs as, dropped to with ``setpriv`` (the sweep runs as root);
            None: bubblewrap runs unprivileged in a user namespace as the calling user.
        setpriv: The ``setpriv`` executable (util-linux), used when ``uid`` is set.
        shm_bytes: The size of the sandbox's ``/dev/shm`` tmpfs; None: the kernel's default.
    """

    bwrap: str
    mounts: tuple[Mount, ...]
    cwd: Path
    network: SandboxNetwork
    uid: int | None
    etc_files: dict[Path, str] = field(default_factory=dict)
    setpriv: str = "/usr/bin/setpriv"
    shm_bytes: int | None = None


def _ancestors(paths: Iterable[Path]) -> list[Path]:
    """Every folder above the given paths, parents first, without ``/``."""
    found: set[Path] = set()
    for path in paths:
        found.update(p for p in path.parents if p != Path("/"))
    return sorted(found, key=lambda p: (len(p.parts), str(p)))


def _system_mounts() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for link in USR_LINKS:
        path = Path(link)
        if path.is_symlink():
            args += ["--symlink", str(path.readlink()), link]
        elif path.is_dir():
            args += ["--ro-bind", link, link]
    # Made explicitly: bubblewrap run by root would create it 0700, unreadable to the agent's uid.
    args += ["--perms", "0755", "--dir", "/etc"]
    for name in SYSTEM_ETC:
        if Path(name).exists():
            args += ["--ro-bind", name, name]
    return args


def bwrap_command(spec: SandboxSpec, command: list[str]) -> list[str]:
    """The full command line: bubblewrap, its mounts and namespaces, the uid drop, then ``command``.

    The agent's environment is bubblewrap's own (the caller passes it to ``Popen``), so no secret
    of it shows in a command line.

    >>> mounts = (Mount(Path("/w/ws"), writable=True),)
    >>> spec = SandboxSpec("bwrap", mounts, Path("/w/ws"), SandboxNetwork.none, 200001)
    >>> argv = bwrap_command(spec, ["python3", "run.py"])
    >>> argv[argv.index("--bind") + 1:argv.index("--bind") + 3]
    ['/w/ws', '/w/ws']
    >>> argv[-3:]
    ['--', 'python3', 'run.py']
    >>> "--unshare-net" in argv and "--reuid=200001" in argv
    True
    """
    argv = [
        spec.bwrap,
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "cell",
    ]
    if spec.network == SandboxNetwork.none:
        argv.append("--unshare-net")
    if spec.uid is None:
        argv.append("--unshare-user")
    argv += _system_mounts()
    argv += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
        "--perms",
        "1777",
        *(["--size", str(spec.shm_bytes)] if spec.shm_bytes else []),
        "--tmpfs",
        "/dev/shm",
    ]
    for host_file, name in sorted(spec.etc_files.items(), key=lambda item: item[1]):
        argv += ["--ro-bind", str(host_file), f"/etc/{name}"]
    mounts = sorted(spec.mounts, key=lambda m: (len(m.dest.parts), str(m.dest)))
    for folder in _ancestors(m.dest for m in mounts):
        if not any(folder == m.dest or folder.is_relative_to(m.dest) for m in mounts):
            argv += ["--perms", "0755", "--dir", str(folder)]
    for mount in mounts:
        flag = "--dev-bind" if mount.device else "--bind" if mount.writable else "--ro-bind"
        argv += [flag, str(mount.path), str(mount.dest)]
    argv += ["--chdir", str(spec.cwd)]
    if spec.uid is not None:
        argv += [
            "--",
            spec.setpriv,
            f"--reuid={spec.uid}",
            f"--regid={spec.uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
        ]
    return [*argv, "--", *command]
