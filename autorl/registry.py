"""What is registered: the options of each Hydra config group, read without importing anything heavy.

A config group is a folder under ``conf/`` (``agent/``, ``driver/``, ``task/``, ``model/``,
``cluster/``); each YAML file in it is one option, and its ``description`` field is the one-line
description that ``autorl.ls`` prints.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

import yaml

from autorl.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
AXES = ("agent", "driver", "task", "model", "seed")
GROUPS = ("agent", "driver", "task", "model", "cluster")


@dataclass(frozen=True)
class Option:
    """One option of a config group."""

    group: str
    name: str
    description: str


def list_options(group: str) -> list[Option]:
    """Return the options of ``group`` sorted by name.

    Raises:
        ConfigError: if ``group`` is not a config group.
    """
    if group not in GROUPS:
        raise ConfigError(f"unknown config group {group!r}; valid groups: {', '.join(GROUPS)}")
    options = []
    for path in sorted((CONF_DIR / group).glob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        description = str(data.get("description") or "")
        if group == "task":
            description = _task_description(path.stem) or description
        options.append(Option(group, path.stem, description))
    return options


def option_names(group: str) -> list[str]:
    """Names of the options of ``group``."""
    return [option.name for option in list_options(group)]


def check_names(group: str, names: list[str]) -> None:
    """Fail if any of ``names`` is not an option of ``group``, suggesting the closest valid names.

    Raises:
        ConfigError: naming the unknown value, "did you mean …" and every valid name.
    """
    valid = option_names(group)
    for name in names:
        if name not in valid:
            close = difflib.get_close_matches(name, valid, n=3)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise ConfigError(f"unknown {group} {name!r}.{hint} Valid {group} names: {', '.join(valid)}")


def _task_description(task_id: str) -> str | None:
    """The task's own one-line description and level from ``tasks/<id>/task.yaml``, if present."""
    manifest = CONF_DIR.parent / "tasks" / task_id / "task.yaml"
    if not manifest.exists():
        return None
    data = yaml.safe_load(manifest.read_text()) or {}
    return f"[{data.get('level', '?')}] {data.get('description', '')}"
