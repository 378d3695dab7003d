"""What the coding-agent CLI adapters share: finding the installed CLI, installing it, and
the launch skeleton (prompt, per-cell HOME, gateway variables).

A CLI is installed from its registry at the version pinned in ``conf/agent/<name>.yaml``
(``install: {manager, package, version, bin}``) into a project-local folder of its own,
``<agents_dir>/<name>/``: an npm prefix (``<agents_dir>/<name>/node_modules/.bin/<bin>``) or a pip
venv (``<agents_dir>/<name>/bin/<bin>``). One folder per agent, so installing one CLI never touches
another (npm prunes what its ``package.json`` does not list from a shared prefix).
``agents_dir`` is ``agent.agents_dir``, else ``$AUTORL_AGENTS_DIR``, else ``<repo>/.cache/agents``.
``agent.binary`` names the executable directly; a CLI on ``PATH`` is the last resort.
Install with ``python -m autorl.agents.install <agent> ...``.

A pip CLI's venv is made with ``install.python`` (e.g. ``python3.12``), resolved by
:func:`resolve_python`: a path, a working command on ``PATH``, then pyenv's and uv's installed
versions (pyenv puts a ``python3.12`` shim on ``PATH`` that fails unless 3.12 is the selected
version). A sealed cell needs the install folder, and for a venv its base interpreter's prefix,
inside the sandbox: :func:`install_paths`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from autorl.agent_schema import CliAgentConfig, InstallManager
from autorl.agents.base import AgentLaunch, LaunchContext
from autorl.agents.prompt import build_prompt
from autorl.agents.streams import StreamParser
from autorl.errors import ConfigError
from autorl.gateway.settings import GATEWAY_TOKEN_ENV, GATEWAY_URL_ENV
from autorl.seal.toolchain import venv_base_prefix

REPO_DIR = Path(__file__).resolve().parents[2]
# Provider credentials and endpoints a CLI would otherwise pick up from the node's environment.
PROVIDER_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_API_BASE",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "CODEX_API_KEY",
    "LLM_API_KEY",
    "LLM_BASE_URL",
    "LLM_MODEL",
    "OPENROUTER_API_KEY",
    "AZURE_API_KEY",
    "AZURE_OPENAI_API_KEY",
)


def agents_dir(agent_cfg: CliAgentConfig) -> Path:
    """Where CLIs are installed."""
    configured = agent_cfg.agents_dir or os.environ.get("AUTORL_AGENTS_DIR")
    return Path(configured).expanduser().resolve() if configured else REPO_DIR / ".cache" / "agents"


def install_dir(agent_cfg: CliAgentConfig) -> Path:
    """The agent's own install folder, ``<agents_dir>/<name>/`` (an npm prefix or a pip venv).

    >>> install_dir(CliAgentConfig(name="codex", agents_dir="/x"))
    PosixPath('/x/codex')
    """
    return agents_dir(agent_cfg) / agent_cfg.name


def installed_path(agent_cfg: CliAgentConfig) -> Path:
    """Where :func:`install_commands` puts the agent's CLI executable.

    >>> from autorl.agent_schema import InstallConfig
    >>> install = InstallConfig(manager=InstallManager.npm, bin="codex")
    >>> installed_path(CliAgentConfig(name="codex", agents_dir="/x", install=install))
    PosixPath('/x/codex/node_modules/.bin/codex')
    """
    install = agent_cfg.install
    prefix = install_dir(agent_cfg)
    if install.manager == InstallManager.npm:
        return prefix / "node_modules" / ".bin" / install.bin
    return prefix / "bin" / install.bin


def installed_version(agent_cfg: CliAgentConfig) -> str | None:
    """The version of the agent's CLI installed in :func:`install_dir`; None when it is not
    installed there."""
    install = agent_cfg.install
    prefix = install_dir(agent_cfg)
    if not installed_path(agent_cfg).exists():
        return None
    if install.manager == InstallManager.npm:
        manifest = prefix / "node_modules" / install.package / "package.json"
        return str(json.loads(manifest.read_text())["version"]) if manifest.exists() else None
    # pip: the wheel's .dist-info folder is named after the normalized project name and its version.
    project = re.sub(r"[-_.]+", "_", install.package).lower()
    for info in prefix.glob(f"lib/python*/site-packages/{project}-*.dist-info"):
        return info.name[len(project) + 1 : -len(".dist-info")]
    return None


def install_paths(agent_cfg: CliAgentConfig) -> list[Path]:
    """What a sealed cell binds read-only for the agent's installed CLI: its install folder and,
    for a pip venv, the prefix of the venv's base interpreter (``home`` in ``pyvenv.cfg``: e.g.
    ``~/.pyenv/versions/3.12.1``, whose ``bin/python3.12`` the venv's ``python`` links to).

    Raises:
        ConfigError: a pip CLI's venv without a readable ``pyvenv.cfg`` (reinstall it).
    """
    prefix = install_dir(agent_cfg)
    paths = [prefix]
    if agent_cfg.install.manager == InstallManager.pip:
        try:
            base = venv_base_prefix(prefix)
        except OSError as error:
            raise ConfigError(
                f"agent {agent_cfg.name!r}: {prefix / 'pyvenv.cfg'} is unreadable ({error}); "
                "reinstall the CLI: "
                f"python -m autorl.agents.install {agent_cfg.name} --force"
            ) from error
        if base is not None:
            paths.append(base)
    return paths


def install_commands(agent_cfg: CliAgentConfig, python: str | None = None) -> list[list[str]]:
    """The commands that install the agent's CLI at its pinned version into :func:`install_dir`.

    A pip CLI's venv is made with ``python`` (what :func:`resolve_python` found), else with
    ``install.python`` as written.

    npm records the pin in the prefix's own ``package.json`` (``--save-exact``), so a later
    ``npm install`` there keeps it.

    >>> from autorl.agent_schema import InstallConfig
    >>> npm = InstallConfig(
    ...     manager=InstallManager.npm, package="@openai/codex", version="1.0", bin="codex"
    ... )
    >>> [command] = install_commands(CliAgentConfig(name="codex", agents_dir="/x", install=npm))
    >>> " ".join(command)
    'npm install --prefix /x/codex --no-audit --no-fund --save-exact @openai/codex@1.0'

    Raises:
        ConfigError: a pip CLI without ``install.python`` (the interpreter of its venv).
    """
    install = agent_cfg.install
    prefix = install_dir(agent_cfg)
    if install.manager == InstallManager.npm:
        npm_install = [
            "npm",
            "install",
            "--prefix",
            str(prefix),
            "--no-audit",
            "--no-fund",
            "--save-exact",
        ]
        return [[*npm_install, f"{install.package}@{install.version}"]]
    # uv installs into the venv (it resolves and unpacks a large CLI like OpenHands in seconds where
    # pip takes minutes) with the machine's pip settings (autorl.uv_pip); it is a dependency of
    # autorl.
    return [
        [python or _python_spec(agent_cfg), "-m", "venv", "--without-pip", str(prefix)],
        [
            sys.executable,
            "-m",
            "autorl.uv_pip",
            "install",
            "--quiet",
            "--python",
            str(prefix / "bin" / "python"),
            f"{install.package}=={install.version}",
        ],
    ]


def _python_spec(agent_cfg: CliAgentConfig) -> str:
    if not agent_cfg.install.python:
        raise ConfigError(
            f"agent {agent_cfg.name!r}: a pip CLI needs install.python, the interpreter its venv "
            "is made with (e.g. python3.12)"
        )
    return agent_cfg.install.python


def _python_version(python: str) -> str | None:
    """``"3.12"`` for an interpreter that runs; None for one that does not (e.g. a pyenv shim of
    an unselected version)."""
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path.parent.parent.name))


def python_candidates(
    spec: str, home: Path | None = None, environ: dict[str, str] | None = None
) -> list[Path]:
    """Interpreters named ``spec`` (``pythonX.Y``) that version managers installed off ``PATH``,
    newest first.

    pyenv's versions (``$PYENV_ROOT/versions/X.Y.*``, default ``~/.pyenv``) and uv's managed Pythons
    (``~/.local/share/uv/python/cpython-X.Y.*``); prereleases and free-threaded builds are skipped.
    """
    match = re.fullmatch(r"python(\d+\.\d+)", spec)
    if match is None:
        return []
    env = os.environ if environ is None else environ
    home = Path.home() if home is None else home
    version = re.escape(match.group(1))
    roots = [
        (Path(env.get("PYENV_ROOT") or home / ".pyenv") / "versions", rf"{version}\.\d+"),
        (
            home / ".local" / "share" / "uv" / "python",
            rf"cpython-{version}\.\d+-[a-z0-9_]+-[a-z0-9_]+-[a-z]+",
        ),
    ]
    found = [
        folder / "bin" / spec
        for root, pattern in roots
        if root.is_dir()
        for folder in root.iterdir()
        if re.fullmatch(pattern, folder.name) and (folder / "bin" / spec).is_file()
    ]
    return sorted(found, key=_version_key, reverse=True)


def resolve_python(agent_cfg: CliAgentConfig) -> str:
    """The interpreter a pip CLI's venv is made with: ``install.python`` as a path, as a command on
    ``PATH`` that runs, then as a pyenv or uv install (:func:`python_candidates`).

    Raises:
        ConfigError: no working interpreter of that name, naming what to install.
    """
    spec = _python_spec(agent_cfg)
    wanted = re.fullmatch(r"python(\d+\.\d+)", Path(spec).name)
    tried: list[str] = []
    on_path = spec if "/" in spec else shutil.which(spec)
    candidates = ([Path(on_path)] if on_path else []) + (
        [] if "/" in spec else python_candidates(spec)
    )
    for candidate in candidates:
        version = _python_version(str(candidate))
        if version is not None and (wanted is None or version == wanted.group(1)):
            return str(candidate)
        tried.append(
            f"{candidate} ({'does not run' if version is None else f'is Python {version}'})"
        )
    if not candidates:
        tried.append(f"{spec} (not on PATH, nor in ~/.pyenv/versions or uv's Pythons)")
    version = wanted.group(1) if wanted else ""
    raise ConfigError(
        f"agent {agent_cfg.name!r} is installed into a venv made with install.python={spec}, and "
        "no working "
        f"interpreter was found: tried {'; '.join(tried)}. Install Python {version or spec} (e.g. "
        f"`pyenv install {version}`, `uv python install {version}` or `apt-get install "
        f"python{version}`), or name one: "
        f"python -m autorl.agents.install {agent_cfg.name} --python /path/to/python{version}"
    )


def find_binary(agent_cfg: CliAgentConfig) -> str:
    """The agent's CLI executable.

    Raises:
        ConfigError: when it is not installed, with the command that installs it.
    """
    if agent_cfg.binary:
        path = Path(agent_cfg.binary).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ConfigError(
                f"agent {agent_cfg.name!r}: agent.binary={path} is not an executable file"
            )
        return str(path)
    installed = installed_path(agent_cfg)
    if installed.exists():
        return str(installed)
    install = agent_cfg.install
    on_path = shutil.which(install.bin)
    if on_path:
        return on_path
    command = " && ".join(" ".join(c) for c in install_commands(agent_cfg))
    raise ConfigError(
        f"the {agent_cfg.name} CLI ({install.package}) is not installed: looked for {installed} "
        "and "
        f"{install.bin!r} on PATH. Install it with `python -m autorl.agents.install "
        f"{agent_cfg.name}` "
        f"({command}), or set agent.binary=/path/to/{install.bin}"
    )


def cli_folder(agent_cfg: CliAgentConfig, binary: str) -> Path:
    """The folder a sealed cell binds for the CLI ``binary`` to run: its install folder, else the
    folder above the executable's own (``<prefix>`` of ``<prefix>/bin/<cli>``)."""
    resolved = Path(binary).resolve()
    prefix = install_dir(agent_cfg)
    return prefix if resolved.is_relative_to(prefix) else resolved.parent.parent


def cli_read_only(agent_cfg: CliAgentConfig, binary: str) -> tuple[Path, ...]:
    """What a sealed cell binds read-only for the CLI ``binary``: :func:`install_paths` for the
    project-local install (a pip venv's base interpreter included), else :func:`cli_folder`."""
    folder = cli_folder(agent_cfg, binary)
    return tuple(install_paths(agent_cfg)) if folder == install_dir(agent_cfg) else (folder,)


def cli_config(ctx: LaunchContext) -> CliAgentConfig:
    """The launch's agent config as a CLI agent's.

    Raises:
        ConfigError: the agent's conf file does not build on the CLI base
            (``conf/agent/_cli_base.yaml``).
    """
    if not isinstance(ctx.agent_cfg, CliAgentConfig):
        raise ConfigError(
            f"agent {ctx.agent_cfg.name!r} has a CLI adapter but its conf/agent file does not "
            "start "
            "with `defaults: [_cli_base, _self_]` (autorl/agent_schema.py CliAgentConfig)"
        )
    return ctx.agent_cfg


def home_dir(home: Path, *parts: str) -> Path:
    """The folder ``home/parts...``, made where missing, with nothing of it a link or a file.

    The adapter writes the CLI's config into the agent's HOME on every launch, outside the sandbox
    and as the harness's user. By a resume the agent has owned HOME for hours and may have put a
    link (to ``/etc``, to the cell folder) where a config folder was: each such entry on the way is
    removed and made a real folder again, so a write never leaves HOME (docs/threat-model.md).
    """
    folder = home
    for part in parts:
        folder = folder / part
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            folder.unlink()
        folder.mkdir(exist_ok=True)
    return folder


def write_home_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (in a folder from :func:`home_dir`), replacing a link there.

    ``O_NOFOLLOW`` refuses a link that appears at ``path`` between the unlink and the open; a FIFO
    planted there is replaced too (``O_NONBLOCK`` keeps the open from waiting for a reader).
    """
    if path.is_symlink() or (path.exists() and not path.is_file()):
        path.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
    with os.fdopen(os.open(path, flags, 0o644), "w", encoding="utf-8") as handle:
        handle.write(text)


@dataclass(frozen=True)
class CliCommand:
    """What a CLI adapter's :meth:`CLIAgent.command` returns.

    Attributes:
        argv: The CLI's command line.
        env: The variables it needs besides the cell's (gateway endpoint, config folders).
    """

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


class CLIAgent:
    """Base of the CLI adapters: subclasses set :attr:`parser` and implement :meth:`command`.

    :meth:`launch` does what every CLI shares (the prompt, the cell's HOME, the environment without
    provider keys); :meth:`command` only what the one CLI needs: its flags, its config files in
    HOME, how it reaches the gateway, and ``ctx.tool_timeout_s`` in its own setting.
    """

    parser: ClassVar[type[StreamParser]]
    """The parser of the CLI's JSON output stream (:mod:`autorl.agents.streams`)."""

    def stream_parser(self) -> StreamParser:
        """A fresh :attr:`parser` for one run's output."""
        return self.parser()

    def launch(self, ctx: LaunchContext) -> AgentLaunch:
        """Write the CLI's config files into the cell's HOME and build its command line."""
        agent = cli_config(ctx)
        if GATEWAY_URL_ENV not in ctx.env or GATEWAY_TOKEN_ENV not in ctx.env:
            raise ConfigError(
                f"agent {agent.name!r} needs a driver gateway; run it with a driver (driver=...)"
            )
        binary = find_binary(agent)
        prompt = ctx.continuation_prompt
        if prompt is None:
            prompt = build_prompt(ctx.workspace, agent.mode, ctx.budget_s)
        if ctx.cell_dir is not None:
            # prompt.md, then prompt.resume1.md, ...: what the agent was told, in order.
            name = (
                "prompt.md"
                if ctx.continuation_prompt is None
                else f"prompt.resume{ctx.resume_index}.md"
            )
            (ctx.cell_dir / name).write_text(prompt)
        home = Path(ctx.env["HOME"])
        # PWD too: the node's (the sweep's own folder) would lead OpenCode, which takes its project
        # folder from PWD before its working directory, to work in the repository, not the
        # workspace.
        env = {k: v for k, v in ctx.env.items() if k not in PROVIDER_ENV} | {
            "PWD": str(ctx.workspace)
        }
        built = self.command(binary, prompt, ctx, home)
        return AgentLaunch(built.argv, env | built.env, read_only=cli_read_only(agent, binary))

    def command(self, binary: str, prompt: str, ctx: LaunchContext, home: Path) -> CliCommand:
        """The command line and the extra environment of this CLI (config files go under
        ``home``)."""
        raise NotImplementedError

    @staticmethod
    def gateway(ctx: LaunchContext) -> tuple[str, str]:
        """The cell's gateway root URL and token."""
        return ctx.env[GATEWAY_URL_ENV], ctx.env[GATEWAY_TOKEN_ENV]


def cli_agent_names() -> list[str]:
    """The registered agents (autorl's and the active plugins') whose adapter is a CLI's.

    The Makefile's ``TEST_AGENTS`` and the tests' lists of CLIs are this list
    (``python -m autorl.ls agents --names --cli``), so a new CLI is in them by its YAML file.
    """
    from autorl.agents.base import AGENTS

    names = []
    for name in AGENTS.names():
        adapter = AGENTS.get(name)
        if isinstance(adapter, type) and issubclass(adapter, CLIAgent):
            names.append(name)
    return names
