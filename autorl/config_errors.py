"""Hydra's and OmegaConf's refusals of a config, as :class:`ConfigError` messages that name the fix.

OmegaConf's exceptions carry the full key (``full_key``) and the schema class of the node that
refused (``object_type``); :func:`config_error` turns them into one line that names the key, says
what is wrong with it and, where there is one, the key or value that was probably meant:

- an unknown key (``budget.secnds=10``): the close field of that schema class (``budget.seconds``),
  and every key that exists there;
- a value of the wrong type (``cell.cpus=many``): the field's type and help text;
- a plain value for a group of settings (``tracking=wandb``): the boolean switch inside the group
  that matches the value (``tracking.wandb.enabled=true``);
- a missing value (a config file without a required key): where to set it.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from autorl.errors import ConfigError
from autorl.registry import GROUPS, option_file

if TYPE_CHECKING:
    from omegaconf import DictConfig
    from omegaconf.errors import OmegaConfBaseException

_FALSE_WORDS = ("false", "off", "no", "0", "disabled")


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and every exception it was raised from."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _omegaconf_cause(error: BaseException) -> OmegaConfBaseException | None:
    """The first OmegaConf exception in the chain that knows which key it refused."""
    from omegaconf.errors import OmegaConfBaseException

    for item in _chain(error):
        if isinstance(item, OmegaConfBaseException) and getattr(item, "full_key", None):
            return item
    return None


def _override_for(key: str, overrides: Sequence[str]) -> str | None:
    """The override that set ``key``, else one that set a key under it, else one that chose a group
    above it (``agent=codex`` for ``agent.sft``); ``None``: a config file did."""
    names = [(override, override.split("=", 1)[0].lstrip("+~")) for override in overrides]
    for matches in (
        lambda name: name == key,
        lambda name: name.startswith(key + "."),
        lambda name: key.startswith(name + "."),
    ):
        for override, name in names:
            if matches(name):
                return override
    return None


def _option_path(group: str, name: str) -> str:
    """The YAML file of a group option, for messages (its name when it cannot be found)."""
    try:
        return str(option_file(group, name))
    except ConfigError:
        return f"tasks/{name}/task.yaml" if group == "task" else f"conf/{group}/{name}.yaml"


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``, else ``(annotation, False)``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def _fields(schema: Any) -> dict[str, tuple[Any, str]]:
    """Field name → (type, help) of a schema dataclass; ``{}`` for anything else."""
    if not (isinstance(schema, type) and dataclasses.is_dataclass(schema)):
        return {}
    hints = typing.get_type_hints(schema)
    return {
        f.name: (hints[f.name], str(f.metadata.get("help", ""))) for f in dataclasses.fields(schema)
    }


def describe_type(annotation: Any) -> str:
    """What a value of ``annotation`` looks like on the command line.

    >>> describe_type(float), describe_type(int | None), describe_type(list[str])
    ('a number (float)', 'an integer (int) or null', 'a list, e.g. [a,b]')
    """
    inner, optional = _unwrap_optional(annotation)
    origin = typing.get_origin(inner) or inner
    if isinstance(origin, type) and issubclass(origin, enum.Enum):
        text = "one of " + ", ".join(member.name for member in origin)
    else:
        text = {
            bool: "true or false (bool)",
            int: "an integer (int)",
            float: "a number (float)",
            str: "a string (str)",
            list: "a list, e.g. [a,b]",
            dict: "a mapping, e.g. {key: value}",
        }.get(origin, getattr(origin, "__name__", str(origin)))
    return text + (" or null" if optional else "")


def switches(schema: Any, prefix: str = "") -> list[str]:
    """The dotted paths of every boolean field inside a schema class, nested classes included.

    >>> from autorl.schema import TrackingConfig
    >>> switches(TrackingConfig)
    ['wandb.enabled', 'report.enabled']
    """
    found: list[str] = []
    for name, (annotation, _) in _fields(schema).items():
        inner, _optional = _unwrap_optional(annotation)
        if inner is bool:
            found.append(prefix + name)
        elif dataclasses.is_dataclass(inner):
            found += switches(inner, f"{prefix}{name}.")
    return found


def _group_message(key: str, group: Any, value: str | None) -> str:
    """A plain value was given for ``key``, which holds a group of settings (``group``)."""
    names = list(_fields(group))
    text = f"{key} is a group of settings ({', '.join(names)}), not a single value"
    candidates = switches(group)
    wanted = (value or "").strip("'\"").lower()
    matching = [s for s in candidates if any(part.lower() == wanted for part in s.split(".")[:-1])]
    if not matching and wanted:
        parts = {part.lower(): s for s in candidates for part in s.split(".")[:-1]}
        matching = [parts[p] for p in difflib.get_close_matches(wanted, list(parts), n=1)]
    if not matching and len(candidates) == 1:
        matching = candidates
    setting = "false" if wanted in _FALSE_WORDS else "true"
    if len(matching) == 1:
        text += f". Did you mean {key}.{matching[0]}={setting}?"
        if len(candidates) > 1:
            text += f" (its switches: {', '.join(f'{key}.{s}' for s in candidates)})"
    elif candidates:
        text += (
            f"; set one of its switches, e.g. {key}.{candidates[0]}={setting} "
            f"(all: {', '.join(f'{key}.{s}' for s in candidates)})"
        )
    elif names:
        text += f"; set one of its settings instead, e.g. {key}.{names[0]}={value}"
    return text


def _known_keys(
    parent: str, schema: Any, skeleton: Callable[[list[str]], DictConfig], kept: list[str]
) -> list[str]:
    """The keys that exist at ``parent``: the schema's fields, or an open dict's keys as composed
    without the bad override."""
    fields = _fields(schema)
    if fields:
        return list(fields)
    from omegaconf import DictConfig, OmegaConf

    try:
        node = OmegaConf.select(skeleton(kept), parent) if parent else skeleton(kept)
    except Exception:  # noqa: BLE001 - the listing is a hint; the error itself is already known
        return []
    return [str(k) for k in node] if isinstance(node, DictConfig) else []


def config_error(
    error: BaseException, overrides: Sequence[str], *, skeleton: Callable[[list[str]], DictConfig]
) -> ConfigError:
    """The :class:`ConfigError` for Hydra's or OmegaConf's refusal to compose ``overrides``.

    Args:
        error: What Hydra's ``compose`` or ``OmegaConf.to_object`` raised.
        overrides: The user's overrides (the axis choices and the pass-through ones).
        skeleton: Composes the config with only the given overrides; used to list the keys of a
            task's open option dicts when one of them is misspelled.
    """
    from omegaconf.errors import (
        ConfigAttributeError,
        ConfigKeyError,
        KeyValidationError,
        MissingMandatoryValue,
        ValidationError,
    )

    cause = _omegaconf_cause(error)
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if cause is None:
        given = f" (overrides: {' '.join(overrides)})" if overrides else ""
        return ConfigError(f"invalid config{given}: {first_line}")
    key = str(cause.full_key)
    override = _override_for(key, overrides)
    where = f"invalid override {override!r}" if override else f"invalid config file ({first_line})"
    if (
        override
        and override.split("=", 1)[0] in GROUPS
        and "=" in override
        and not override.startswith(key + "=")
    ):
        where = f"invalid config option {override} ({_option_path(*override.split('=', 1))})"
    value = override.split("=", 1)[1] if override and "=" in override else None
    parent, _, name = key.rpartition(".")
    schema = cause.object_type
    field_type, help_text = _fields(schema).get(name, (None, ""))
    group, _optional = _unwrap_optional(field_type)

    if isinstance(cause, MissingMandatoryValue):
        group = key.split(".", 1)[0]
        chosen = (
            next((o for o in overrides if o.startswith(group + "=")), None)
            if group in GROUPS
            else None
        )
        if chosen:
            source = _option_path(*chosen.split("=", 1))
        elif group == "task":  # the task group's options are folders, not conf/ files
            source = "the task folder (tasks/<id>/task.yaml run:, or its options.py)"
        else:
            source = f"conf/{group}/<option>.yaml" if group in GROUPS else "conf/config.yaml"
        return ConfigError(
            f"{key} has no value: set it in {source}, or on the command line with {key}=..."
        )
    if isinstance(cause, KeyValidationError):
        return ConfigError(f"{where}: {key}: {str(cause).splitlines()[0]}")
    if isinstance(cause, ConfigKeyError | ConfigAttributeError):
        kept = [o for o in overrides if o != override]
        known = _known_keys(parent, schema, skeleton, kept)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f". Did you mean {parent + '.' if parent else ''}{close[0]}?" if close else "."
        return ConfigError(
            f"{where}: unknown key {key}{hint} The keys of {parent or 'the top level'} are: "
            f"{', '.join(known) or '(none)'}"
        )
    if isinstance(cause, ValidationError) and dataclasses.is_dataclass(group):
        return ConfigError(f"{where}: {_group_message(key, group, value)}")
    if isinstance(cause, ValidationError) and field_type is not None:
        got = f", got {value!r}" if value is not None else f" ({str(cause).splitlines()[0]})"
        suggestion = ""
        if isinstance(group, type) and issubclass(group, enum.Enum) and value is not None:
            close = difflib.get_close_matches(value, [m.name for m in group], n=1)
            suggestion = f". Did you mean {key}={close[0]}?" if close else ""
        about = f" ({key}: {help_text})" if help_text else ""
        return ConfigError(
            f"{where}: {key} must be {describe_type(field_type)}{got}{suggestion}{about}"
        )
    return ConfigError(f"{where}: {key}: {str(cause).splitlines()[0]}")
