"""Plugins: folders outside the package that add tasks, config options and Python code.

A plugin folder holds any of::

    my_plugin/
      tasks/<id>/              task folders, same contract as autorl's tasks/ (tasks/README.md)
      conf/<group>/<name>.yaml options of the config groups (autorl.registry.OPTION_GROUPS)
      myagents/ or mymod.py    Python modules at its root, e.g. the class an option names

Every kind of plugin code is added the same way, by one option file naming its class, which
:class:`autorl.registry.OptionRegistry` reads: an agent (``conf/agent/foo.yaml``: ``adapter:
myagents.foo:FooAgent``; a CLI adapter brings its stream parser, ``CLIAgent.parser``), an engine
(``conf/engine/foo.yaml``: ``implementation: mymod:FooEngine``) and a sandbox backend
(``conf/sandbox/foo.yaml``: ``implementation: mymod:FooSeal``). Drivers, models and clusters are
options without code of their own.

Plugins are named by the environment variable ``AUTORL_PLUGIN_PATH`` (folders joined with
``os.pathsep``, like ``PYTHONPATH``) and by the config key ``plugins`` (``plugins=[/a,/b]`` on the
command line). :func:`activate` makes them usable in this process and in every process started
after it: it sets the variable, which :mod:`autorl.task_code` reads when it is imported (Ray
workers, agent processes) and :func:`autorl.cluster.connect` hands to the cluster's workers with
the folders on their ``PYTHONPATH``. Each folder must be at the same path on every node, as the
autorl checkout is.

What a plugin adds must not clash with what autorl or another plugin has: a task id that is taken
is refused by :func:`autorl.tasks.discover_tasks`, an option name that is taken by
:func:`autorl.registry.list_options` (Hydra would silently pick autorl's file), a module name
that something installed already has by :func:`activate`.

Importing this module is cheap (no Hydra, no Ray).

Examples:
    $ AUTORL_PLUGIN_PATH=~/my_plugin python -m autorl.ls tasks
    $ python -m autorl.sweep plugins=[/home/me/my_plugin] task=mymath
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from autorl.errors import ConfigError
from autorl.task_code import PLUGIN_PATH_ENV, TASKS_DIR, add_tasks_dir, env_plugin_dirs

__all__ = [
    "CONFIG_KEY",
    "PLUGIN_PATH_ENV",
    "activate",
    "active_dirs",
    "conf_search_path",
    "from_overrides",
    "module_names",
    "plugin_dirs",
    "runtime_env_vars",
    "searchpath_overrides",
    "task_dirs",
]

CONFIG_KEY = "plugins"
CONTENTS = ("tasks", "conf")  # the folders a plugin may hold besides its Python code
_WHAT_A_PLUGIN_HOLDS = (
    "a plugin folder holds tasks/<id>/ task folders, conf/<group>/*.yaml options (groups: agent, "
    "driver, model, cluster, engine, sandbox) and/or Python modules at its root (*.py, or packages "
    "with __init__.py)"
)


def module_names(folder: Path) -> list[str]:
    """The top-level Python modules at a plugin's root: ``*.py`` files and packages with
    ``__init__.py``.

    ``tasks/`` and ``conf/`` are never modules (task folders are imported as
    ``autorl.task_code.<id>``).
    """
    names = {p.stem for p in folder.glob("*.py") if p.stem.isidentifier()}
    names |= {p.parent.name for p in folder.glob("*/__init__.py") if p.parent.name.isidentifier()}
    return sorted(names - set(CONTENTS))


def _check_folder(raw: str | Path, origin: str) -> Path:
    """Resolve one plugin folder and check that it exists and holds something a plugin may hold."""
    folder = Path(raw).expanduser().resolve()
    if not folder.is_dir():
        raise ConfigError(
            f"plugin folder {raw!s} (from {origin}) does not exist or is not a folder; "
            f"{_WHAT_A_PLUGIN_HOLDS}"
        )
    if not any((folder / name).is_dir() for name in CONTENTS) and not module_names(folder):
        raise ConfigError(
            f"plugin folder {folder} (from {origin}) holds no tasks/, conf/ or Python code; "
            f"{_WHAT_A_PLUGIN_HOLDS}"
        )
    return folder


def plugin_dirs(extra: Sequence[str | Path] = ()) -> list[Path]:
    """The plugin folders named by ``AUTORL_PLUGIN_PATH`` and then by ``extra`` (the config key's
    list).

    Args:
        extra: More folders, e.g. :func:`from_overrides` of the command line; relative ones are
            relative to the current folder, ``~`` is expanded.

    Returns:
        Resolved folders, each once, in that order.

    Raises:
        ConfigError: A folder does not exist or holds nothing a plugin may hold; the message names
            the folder, where it was named and what a plugin folder must contain.
    """
    named = [(str(raw), f"${PLUGIN_PATH_ENV}") for raw in env_plugin_dirs()]
    named += [(str(raw), f"the '{CONFIG_KEY}' config key") for raw in extra]
    folders: list[Path] = []
    for raw, origin in named:
        folder = _check_folder(raw, origin)
        if folder not in folders:
            folders.append(folder)
    return folders


def active_dirs() -> list[Path]:
    """The plugin folders active in this process: those of ``AUTORL_PLUGIN_PATH``, checked."""
    return plugin_dirs()


def _check_modules(folders: Sequence[Path]) -> None:
    """Refuse a plugin module whose name another plugin, or anything already importable, has.

    A plugin's folder goes on ``PYTHONPATH`` in child processes, ahead of the installed packages: a
    plugin ``json.py`` would shadow the standard library there and not here, so it is refused.
    """
    owner: dict[str, Path] = {}
    for folder in folders:
        for name in module_names(folder):
            if name in owner:
                raise ConfigError(
                    f"plugins {owner[name]} and {folder} both have a Python module {name!r}; "
                    "rename one"
                )
            owner[name] = folder
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                spec = None
            locations = (
                [spec.origin or "", *(spec.submodule_search_locations or [])] if spec else []
            )
            if spec is not None and not any(
                Path(p).resolve().is_relative_to(folder) for p in locations if p
            ):
                where = (
                    spec.origin or ", ".join(spec.submodule_search_locations or []) or "built in"
                )
                raise ConfigError(
                    f"plugin {folder}: its Python module {name!r} would shadow the installed "
                    "module of that name "
                    f"({where}); rename the plugin's module"
                )


def activate(dirs: Sequence[str | Path]) -> list[Path]:
    """Make plugin folders usable in this process and every process it starts (idempotent).

    Sets ``AUTORL_PLUGIN_PATH`` to the folders already active plus ``dirs``, makes each plugin's
    ``tasks/`` importable as ``autorl.task_code.<id>`` and puts each folder with Python modules on
    ``sys.path`` (after what is installed). Child processes see the variable; Ray workers get it,
    with the folders on their ``PYTHONPATH``, from :func:`autorl.cluster.connect`
    (:func:`runtime_env_vars`).

    Args:
        dirs: Plugin folders, usually ``plugin_dirs(from_overrides(argv))``.

    Returns:
        Every active plugin folder, in order.

    Raises:
        ConfigError: A folder is not a plugin folder (see :func:`plugin_dirs`), or one of its Python
            modules clashes with another plugin's or an installed one.
    """
    folders = plugin_dirs([str(d) for d in dirs])
    _check_modules(folders)
    os.environ[PLUGIN_PATH_ENV] = os.pathsep.join(map(str, folders))
    for folder in folders:
        if (folder / "tasks").is_dir():
            add_tasks_dir(folder / "tasks")
        if module_names(folder) and str(folder) not in sys.path:
            sys.path.append(
                str(folder)
            )  # last: a plugin never shadows an installed module (checked above)
    return folders


def task_dirs(dirs: Sequence[Path] | None = None) -> list[Path]:
    """autorl's ``tasks/`` and then the ``tasks/`` of each plugin that has one.

    Args:
        dirs: Plugin folders; ``None``: the active ones (:func:`active_dirs`).
    """
    plugins = active_dirs() if dirs is None else dirs
    return [TASKS_DIR, *(d / "tasks" for d in plugins if (d / "tasks").is_dir())]


def conf_search_path(dirs: Sequence[Path] | None = None) -> list[str]:
    """The ``file://`` URIs of the plugins' ``conf/`` folders, for Hydra's ``hydra.searchpath``.

    Args:
        dirs: Plugin folders; ``None``: the active ones (:func:`active_dirs`).
    """
    plugins = active_dirs() if dirs is None else dirs
    # Not Path.as_uri(): Hydra takes what follows file:// as the path as is, without
    # percent-decoding.
    return [f"file://{d / 'conf'}" for d in plugins if (d / "conf").is_dir()]


def _quote(value: str) -> str:
    """A Hydra override string literal (paths may hold spaces, commas or brackets)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def searchpath_overrides(dirs: Sequence[Path] | None = None) -> list[str]:
    """The Hydra override that adds the plugins' config options: ``[]`` without plugins.

    Put it before the user's overrides when composing; checked with hydra-core 1.3.8's Compose API,
    a ``hydra.searchpath`` override adds the options of each group folder under the plugin's
    ``conf/`` (``agent=mine`` composes ``conf/agent/mine.yaml``). On a name clash autorl's own
    file would win silently, which is why :func:`autorl.registry.list_options` refuses clashes.

    >>> searchpath_overrides([])
    []
    """
    uris = conf_search_path(dirs)
    return [f"hydra.searchpath=[{','.join(map(_quote, uris))}]"] if uris else []


def from_overrides(argv: Sequence[str]) -> list[str]:
    """The folders of a ``plugins=[...]`` override in a command line (``[]`` when there is none).

    Only that override is read, so this can run before the rest of the command line is checked.
    ``plugins=/one/folder`` is a list of one; ``~plugins`` clears the list.

    >>> from_overrides(["task=mymath", "plugins=[/a/p,./q]"])
    ['/a/p', './q']
    >>> from_overrides(["+plugins=/a/p"])
    ['/a/p']

    Raises:
        ConfigError: The override is malformed, or gives a comma list without brackets.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    found: list[str] = []
    for arg in argv:
        if arg.split("=", 1)[0].lstrip("+~") != CONFIG_KEY:
            continue
        try:
            (override,) = OverridesParser.create().parse_overrides([arg])
        except OverrideParseException as error:
            raise ConfigError(
                f"cannot parse {arg!r} ({str(error).splitlines()[0]}); write "
                "plugins=[/path/a,/path/b] "
                "and quote a path with spaces or a ~: plugins=['~/my plugin']"
            ) from error
        if override.is_delete():
            found = []
            continue
        if override.is_sweep_override():
            raise ConfigError(
                f"{arg!r}: plugins is a list, not a sweep axis; write "
                f"{CONFIG_KEY}=[{arg.split('=', 1)[1]}]"
            )
        value = override.value()
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str) for v in values):
            raise ConfigError(
                f"{arg!r}: plugins must be folder paths, e.g. plugins=[/home/me/my_plugin]"
            )
        found = [str(v) for v in values]
    return found


def runtime_env_vars(dirs: Sequence[Path] | None = None) -> dict[str, str]:
    """The ``env_vars`` of a Ray runtime env that gives workers the plugins (``{}`` without
    plugins).

    ``AUTORL_PLUGIN_PATH`` for :mod:`autorl.task_code`, and the folders that hold Python modules
    ahead of the worker's own ``PYTHONPATH`` (Ray expands ``${PYTHONPATH}`` on the worker).

    Args:
        dirs: Plugin folders; ``None``: the active ones (:func:`active_dirs`).
    """
    plugins = active_dirs() if dirs is None else list(dirs)
    if not plugins:
        return {}
    env = {PLUGIN_PATH_ENV: os.pathsep.join(map(str, plugins))}
    # Only folders with Python code: on the path, a plugin's tasks/ would import as the namespace
    # package ``tasks`` (grader-side code) in every process that inherits the variable, agents
    # included.
    if code := [str(d) for d in plugins if module_names(d)]:
        env["PYTHONPATH"] = f"{os.pathsep.join(code)}{os.pathsep}${{PYTHONPATH}}"
    return env
