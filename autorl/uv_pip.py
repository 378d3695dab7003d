"""``python -m autorl.uv_pip ARGS``: ``uv pip ARGS`` with the machine's pip configuration.

uv installs the agent toolchain (:mod:`autorl.seal.toolchain`) and the pip-based agent CLIs
(:mod:`autorl.agents.cli`): it resolves, downloads and unpacks in parallel, where pip works one
package at a time. But uv reads neither pip's configuration files nor ``PIP_*`` variables, and a
machine's pip configuration can be what keeps the CPU build of torch in: this kind of machine finds
``torch 2.13.0+cpu`` through ``find-links`` and caps torch with a global constraint file. So the
settings that decide what pip would install from where are handed to uv as its own options
(:func:`uv_options`), read from ``pip config list``, which already merges pip's files and ``PIP_*``
variables. (``make setup`` keeps pip for ``.venv``: see the Makefile.)
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

# pip's option -> uv's (uv pip install takes each of these; pip's multi-valued options are
# whitespace-separated).
LIST_OPTIONS = {
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "trusted-host": "--allow-insecure-host",
}
# A command's own section ([install]) overrides [global], and PIP_* variables (":env:") override
# both, as in pip.
SECTIONS = (":env:", "install", "global")


def pip_settings(listing: str) -> dict[str, str]:
    """The settings in ``pip config list`` output, each from the section pip would take it from.

    >>> pip_settings("global.find-links='/opt/wheels'\\n:env:.find-links='/w'\\nglobal.cert='/c'")
    {'find-links': '/w', 'cert': '/c'}
    """
    by_section: dict[str, dict[str, str]] = {}
    for line in listing.splitlines():
        key, sep, quoted = line.partition("=")
        section, dot, name = key.rpartition(".")
        if sep and dot:
            by_section.setdefault(section, {})[name] = str(ast.literal_eval(quoted))
    settings: dict[str, str] = {}
    for section in reversed(SECTIONS):
        settings.update(by_section.get(section, {}))
    return settings


def uv_options(settings: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv's options and environment for pip's ``settings``.

    With more than one source, uv is told to pick the best version across all of them, as pip does
    (uv's default takes a package from the first index that has it: a newer ``ray`` on a later index
    went unseen).

    >>> options, env = uv_options({"find-links": "/w", "extra-index-url": "file:///a file:///b"})
    >>> options
    ['--extra-index-url', 'file:///a', '--extra-index-url', 'file:///b', '--find-links', '/w', \
'--index-strategy', 'unsafe-best-match']
    >>> uv_options({"cert": "/c.crt"})[1]
    {'SSL_CERT_FILE': '/c.crt'}
    """
    options: list[str] = []
    if settings.get("index-url"):
        options += ["--index-url", settings["index-url"]]
    for pip_name, uv_name in LIST_OPTIONS.items():
        for value in settings.get(pip_name, "").split():
            options += [uv_name, value]
    if settings.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        options.append("--no-index")
    if "--extra-index-url" in options or "--find-links" in options:
        options += ["--index-strategy", "unsafe-best-match"]
    env = {}
    if settings.get("cert"):
        env["SSL_CERT_FILE"] = settings["cert"]
    if settings.get("timeout") or settings.get("default-timeout"):
        env["UV_HTTP_TIMEOUT"] = settings.get("timeout") or settings["default-timeout"]
    return options, env


def machine_pip_settings() -> dict[str, str]:
    """This machine's pip settings (empty where pip is missing or has none)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return pip_settings(done.stdout) if done.returncode == 0 else {}


def uv_pip_command(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """``uv pip <args>`` (uv run as this interpreter's module) with the machine's pip settings, and
    the environment to run it in. The settings go after the subcommand, ``args[0]``, where it
    installs packages.

    ``install`` and ``sync`` also compile bytecode, as pip does and uv does not by default: a sealed
    agent imports the toolchain read-only as another uid, and this kind of machine sets
    ``PYTHONDONTWRITEBYTECODE=1``, so nothing writes ``.pyc`` files at import; without them every
    process would compile torch and transformers from source.
    """
    if args[:1] not in (["install"], ["sync"]):
        return [sys.executable, "-m", "uv", "pip", *args], dict(os.environ)
    options, env = uv_options(machine_pip_settings())
    return [
        sys.executable,
        "-m",
        "uv",
        "pip",
        args[0],
        *options,
        "--compile-bytecode",
        *args[1:],
    ], {**os.environ, **env}


def main(argv: list[str] | None = None) -> int:
    """Run ``uv pip`` with ``argv`` (default: this command's arguments); returns its exit code."""
    command, env = uv_pip_command(list(sys.argv[1:] if argv is None else argv))
    return subprocess.run(command, env=env, check=False).returncode  # noqa: S603 - argv built above


if __name__ == "__main__":
    raise SystemExit(main())
