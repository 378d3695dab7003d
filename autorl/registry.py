"""Name → implementation lookups, and the options of each Hydra config group.

Two kinds of registry live here, both read without importing anything heavy:

- :class:`Registry` maps a name to a lazy ``"module:attr"`` string (lm-eval's ``MODEL_MAPPING``
  shape): environments and judges keep one. The target is imported on first
  :meth:`Registry.get`; an unknown name fails with "did you mean".
- :class:`OptionRegistry` is a :class:`Registry` whose entries are a config group's option files,
  autorl's and each plugin's: agents (``adapter:``), engines (``implementation:``) and sandbox
  backends (``implementation:``) are added by one YAML file each, in ``conf/`` or a plugin's.
- :func:`list_options` reads a config group folder under ``conf/`` (``agent/``, ``driver/``,
  ``model/``, ``cluster/``), autorl's and each plugin's (:mod:`autorl.plugins`); each YAML file is
  one option and its ``description`` field is the line that ``autorl.ls`` prints. The ``task``
  group's options are the task folders instead (``tasks/<id>/task.yaml``), autorl's and the
  plugins'.
"""

from __future__ import annotations

import difflib
import importlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml

from autorl.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
AXES = ("agent", "driver", "task", "model", "seed")
# The groups chosen by `group=name` (cfg.<group>.name).
GROUPS = ("agent", "driver", "task", "model", "cluster")
# Every config group folder: the chosen ones, ``engine``, each of whose options is composed into
# ``grader.engines.<name>`` (``grader.engine`` picks the one that scores), and ``sandbox``, whose
# options are the backends ``sandbox.mode`` names (read by autorl.seal.launch.SANDBOXES).
OPTION_GROUPS = (*GROUPS, "engine", "sandbox")

T = TypeVar("T")


def unknown_name_message(kind: str, name: str, valid: list[str]) -> str:
    """The message for a name that is not registered: "did you mean" and every valid name.

    >>> unknown_name_message("engine", "hff", ["hf", "vllm"])
    "unknown engine 'hff'. Did you mean: hf? Valid engine names: hf, vllm"
    """
    close = difflib.get_close_matches(name, valid, n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return f"unknown {kind} {name!r}.{hint} Valid {kind} names: {', '.join(valid) or '(none)'}"


def load_object(target: str, *, package: str | None = None, what: str = "object") -> Any:
    """Import ``"module:attr"`` and return the attribute (``attr`` may be dotted).

    Args:
        target: ``"package.module:name"``; with ``package`` set, the module part is relative to
            it (``"evaluate:evaluate"`` under ``autorl.task_code.gsm8k``).
        package: Package that relative module parts are resolved in.
        what: What the target is, for the error message (``"engine"``, ``"task 'gsm8k' build"``).

    Raises:
        ConfigError: The string is malformed, or names a module or attribute that does not exist.

    >>> load_object("json:dumps")([1])
    '[1]'
    """
    module_name, sep, attr = str(target).partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{what}: expected 'module:attr', got {target!r}")
    full = f"{package}.{module_name}" if package else module_name
    try:
        obj: Any = importlib.import_module(full)
    except ModuleNotFoundError as error:
        # Only a missing target module is a naming mistake; a missing dependency inside it is not.
        if error.name and (full == error.name or full.startswith(error.name + ".")):
            raise ConfigError(f"{what}: no module {full!r} (from {target!r})") from error
        raise
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(
                f"{what}: module {full!r} has no attribute {attr!r} (from {target!r})"
            )
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    """A lazy name → ``"module:attr"`` map with helpful misses.

    >>> engines: Registry[object] = Registry("codec", {"json": "json:dumps"})
    >>> engines.get("json")({"a": 1})
    '{"a": 1}'
    >>> engines.get("jsn")
    Traceback (most recent call last):
    ...
    autorl.errors.ConfigError: unknown codec 'jsn'. Did you mean: json? Valid codec names: json
    """

    def __init__(self, kind: str, targets: Mapping[str, str]) -> None:
        """Args: kind: what the names name (for messages); targets: name → ``"module:attr"``."""
        self.kind = kind
        self._targets = dict(targets)
        self._loaded: dict[str, T] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._targets

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._targets))

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._targets)

    def register(self, name: str, target: str) -> None:
        """Add or replace ``name`` (a plugin's own entry)."""
        self._targets[name] = target
        self._loaded.pop(name, None)

    def check(self, name: str) -> None:
        """Raise :class:`ConfigError` with "did you mean" unless ``name`` is registered."""
        if name not in self._targets:
            raise ConfigError(unknown_name_message(self.kind, name, self.names()))

    def get(self, name: str) -> T:
        """The implementation registered as ``name``, imported on first use.

        Raises:
            ConfigError: Unknown name (with "did you mean"), or a target that does not import.
        """
        self.check(name)
        if name not in self._loaded:
            self._loaded[name] = load_object(self._targets[name], what=f"{self.kind} {name!r}")
        return self._loaded[name]


class OptionRegistry(Registry[T]):
    """A registry whose entries are the options of a config group, autorl's and every plugin's.

    Each option's YAML file names its implementation under ``key`` (``conf/engine/hf.yaml``:
    ``implementation: autorl.engine.hf:HFEngine``; ``conf/agent/codex.yaml``: ``adapter: ...``), so
    a plugin folder adds an entry with one file, as it adds any option. The files are read again
    whenever the set of active plugins has changed, since a plugin may be activated after import.

    Args:
        kind: What the names name (for messages).
        group: The config group whose options are the entries.
        key: The field of an option's YAML that holds its ``"module:attr"``.
        builtins: Entries that need no option file.
    """

    def __init__(
        self, kind: str, group: str, key: str, builtins: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(kind, builtins or {})
        self.group = group
        self.key = key
        self._builtins = dict(builtins or {})
        self._seen: str | None = None

    def _refresh(self) -> None:
        """Read the group's option files again when the active plugins have changed."""
        from autorl.task_code import PLUGIN_PATH_ENV  # here, not at the top: see conf_dirs

        active = os.environ.get(PLUGIN_PATH_ENV, "")
        if self._seen == active:
            return
        targets = dict(self._builtins)
        for option in list_options(self.group):
            data = yaml.safe_load(option.path.read_text()) or {}
            if data.get(self.key):
                targets[option.name] = str(data[self.key])
        self._targets, self._loaded, self._seen = targets, {}, active

    def __contains__(self, name: object) -> bool:
        self._refresh()
        return super().__contains__(name)

    def __iter__(self) -> Iterator[str]:
        self._refresh()
        return super().__iter__()

    def names(self) -> list[str]:
        """The registered names, sorted: the option files' and the built-in ones."""
        self._refresh()
        return super().names()

    def check(self, name: str) -> None:
        """Raise :class:`ConfigError` with "did you mean" unless ``name`` is registered."""
        self._refresh()
        super().check(name)

    def register(self, name: str, target: str) -> None:
        """Add or replace ``name`` in code (kept when the option files are read again)."""
        self._builtins[name] = target
        self._seen = None

    def target(self, name: str) -> str:
        """The ``"module:attr"`` registered as ``name``."""
        self.check(name)
        return self._targets[name]


@dataclass(frozen=True)
class Option:
    """One option of a config group.

    Attributes:
        group: The config group (``task``, ``agent``, ...).
        name: The option's name (its file's stem), as given on the command line.
        description: The line ``autorl.ls`` prints.
        path: The option's YAML file.
        plugin: The plugin folder it comes from; ``None`` for autorl's own ``conf/``.
        in_grid: Whether ``<group>=all`` includes it (the file's ``in_grid``, default true).
    """

    group: str
    name: str
    description: str
    path: Path
    plugin: Path | None = None
    in_grid: bool = True


def conf_dirs() -> list[tuple[Path, Path | None]]:
    """autorl's ``conf/`` and each active plugin's, as ``(conf folder, plugin folder or None)``.

    Raises:
        ConfigError: A plugin's ``conf/`` holds something other than config group folders (a typo
            such as ``conf/tasks/`` would otherwise be ignored without a word).
    """
    # Imported here: autorl.plugins imports autorl.task_code, which an agent process that imports
    # this module (the scripted agent does) must never load.
    from autorl.plugins import active_dirs

    found: list[tuple[Path, Path | None]] = [(CONF_DIR, None)]
    for plugin in active_dirs():
        conf = plugin / "conf"
        if not conf.is_dir():
            continue
        strays = sorted(
            p.name
            for p in conf.iterdir()
            if p.name not in OPTION_GROUPS and not p.name.startswith(".")
        )
        if strays:
            raise ConfigError(
                f"plugin {plugin}: conf/ may hold only the config group folders "
                f"{', '.join(OPTION_GROUPS)}, "
                f"found {', '.join(strays)}; move each option to conf/<group>/<name>.yaml"
            )
        found.append((conf, plugin))
    return found


def list_options(group: str) -> list[Option]:
    """Return the options of ``group`` sorted by name: autorl's and every active plugin's.

    Files whose name starts with ``_`` are shared bases that options include
    (``defaults: [_base]``), not options. A plugin option may not take a name that autorl or
    another plugin has: Hydra would compose the first file on its search path (autorl's) and
    ignore the plugin's in silence.

    Raises:
        ConfigError: ``group`` is not a config group, or two files give one option name (the message
            names both files).
    """
    if group not in OPTION_GROUPS:
        raise ConfigError(
            f"unknown config group {group!r}; valid groups: {', '.join(OPTION_GROUPS)}"
        )
    if group == "task":
        return _task_options()
    options: dict[str, Option] = {}
    for conf, plugin in conf_dirs():
        for path in sorted((conf / group).glob("*.yaml")):
            if path.stem.startswith("_"):
                continue
            if path.stem in options:
                raise ConfigError(
                    f"config option {group}={path.stem} is defined twice: "
                    f"{options[path.stem].path} and {path}; "
                    "a plugin's options need names of their own: rename the plugin's file and its "
                    "name: key"
                )
            data = yaml.safe_load(path.read_text()) or {}
            description = str(data.get("description") or "")
            in_grid = bool(data.get("in_grid", True))
            options[path.stem] = Option(group, path.stem, description, path, plugin, in_grid)
    return [options[name] for name in sorted(options)]


def option_file(group: str, name: str) -> Path:
    """The YAML file of option ``name`` of ``group``, in autorl's ``conf/`` or a plugin's.

    Raises:
        ConfigError: No such option ("did you mean" and every valid name).
    """
    options = {option.name: option.path for option in list_options(group)}
    if name not in options:
        raise ConfigError(unknown_name_message(group, name, sorted(options)))
    return options[name]


def option_names(group: str) -> list[str]:
    """Names of the options of ``group``."""
    return [option.name for option in list_options(group)]


def grid_names(group: str) -> list[str]:
    """What ``<group>=all`` means: the options of ``group`` that do not set ``in_grid: false``."""
    return [option.name for option in list_options(group) if option.in_grid]


def check_names(group: str, names: list[str]) -> None:
    """Fail if any of ``names`` is not an option of ``group``, suggesting the closest valid names.

    Raises:
        ConfigError: naming the unknown value, "did you mean …" and every valid name.
    """
    valid = option_names(group)
    for name in names:
        if name not in valid:
            raise ConfigError(unknown_name_message(group, name, valid))


def _task_options() -> list[Option]:
    """The task group's options: one per task folder (``tasks/<id>/task.yaml``), autorl's and the
    plugins'; a task has no file under ``conf/``
    (:func:`autorl.task_options.register_task_configs`).

    Raises:
        ConfigError: A plugin still has a ``conf/task/`` folder, whose files would not be read.
    """
    from autorl.plugins import active_dirs  # here, not at the top: see conf_dirs
    from autorl.task_spec import discover_tasks

    for conf, plugin in conf_dirs():
        if plugin is not None and (conf / "task").is_dir():
            raise ConfigError(
                f"plugin {plugin}: a task is one folder, tasks/<id>/, and has no conf/task/ file; "
                "move the run defaults of each file in conf/task/ into its tasks/<id>/task.yaml "
                "(run: source, budget_s, env_pool) and its build and eval options into "
                "tasks/<id>/options.py (tasks/README.md)"
            )
    plugins = {(folder / "tasks").resolve(): folder for folder in active_dirs()}
    return [
        Option(
            "task",
            spec.id,
            f"[{spec.level}] {spec.description}",
            spec.folder / "task.yaml",
            plugins.get(spec.folder.parent.resolve()),
        )
        for spec in discover_tasks().values()
    ]
