"""Task options: every default lives in ``conf/task/<id>.yaml``, nowhere in the code.

A builder, evaluator or environment reads ``options["key"]`` and gets complete options from
:func:`autorl.tasks.build_task_data`, :func:`eval_options` or :meth:`autorl.tasks.EvalContext.for_task`.
"""

from __future__ import annotations

import copy
import difflib
import functools
import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autorl.errors import TaskError
from autorl.registry import conf_dirs as registry_conf_dirs
from autorl.task_spec import PACKAGE, TaskSpec, parse_manifest, read_yaml_mapping

OPTION_KINDS = ("build", "eval")


@dataclass(frozen=True)
class TaskOptions:
    """Every option of one data source of a task, at its default.

    ``conf/task/<id>.yaml`` ``build.<source>`` and ``eval.<source>`` are the only place a task's
    defaults are written: builders, evaluators and environments read ``options["key"]`` and get
    complete options from :func:`build_task_data`, :func:`eval_options` or
    :meth:`EvalContext.for_task`.

    Attributes:
        build: The builder's options (the complete dict is part of the data's cache key).
        eval: The evaluator's options (an interactive task's environments get the same dict).
        path: The conf file they were read from.
    """

    build: dict[str, Any]
    eval: dict[str, Any]
    path: Path


def task_conf_dirs() -> tuple[Path, ...]:
    """The conf folders a task's ``task/<id>.yaml`` is looked up in: autorl's ``conf/``, then each
    active plugin's (:func:`autorl.registry.conf_dirs`; an option name is never in two of them)."""
    return tuple(conf for conf, _plugin in registry_conf_dirs())


def task_conf_path(spec: TaskSpec, conf_dirs: Sequence[Path] | None = None) -> Path:
    """The task's run-knob file, ``<conf dir>/task/<id>.yaml``, from the first conf folder that has it.

    Args:
        spec: The task.
        conf_dirs: Conf folders to search in order (default :func:`task_conf_dirs`).

    Raises:
        TaskError: No conf folder holds the file; the message names where it was looked for.
    """
    dirs = tuple(conf_dirs) if conf_dirs is not None else task_conf_dirs()
    for folder in dirs:
        path = Path(folder) / "task" / f"{spec.id}.yaml"
        if path.is_file():
            return path
    looked = ", ".join(str(Path(d) / "task" / f"{spec.id}.yaml") for d in dirs) or "(no conf folders)"
    raise TaskError(f"task '{spec.id}' has no run-knob file (looked for {looked}); add one with a build.<source> "
                    "and an eval.<source> block of every option and its default for each source "
                    f"({', '.join(spec.sources)})")


def _option_block(path: Path, raw: dict[str, Any], kind: str, source: str) -> dict[str, Any]:
    section = raw.get(kind)
    block = section.get(source, ...) if isinstance(section, dict) else ...
    if block is ...:
        raise TaskError(f"{path}: no '{kind}.{source}' block; it lists every {kind} option of source '{source}' "
                        f"with its default (write '{kind}: {{{source}: {{}}}}' when there are none)")
    if block is None:  # "fixture:" with nothing under it: no options
        return {}
    if not isinstance(block, dict) or not all(isinstance(k, str) for k in block):
        raise TaskError(f"{path}: '{kind}.{source}' must map option names to default values, got {block!r}")
    return copy.deepcopy(block)


def task_options(spec: TaskSpec, source: str, conf_dirs: Sequence[Path] | None = None) -> TaskOptions:
    """Every build and eval option of ``source`` with its default, from ``conf/task/<id>.yaml``.

    Args:
        spec: The task.
        source: One of ``spec.sources``.
        conf_dirs: Conf folders to find the YAML in (default :func:`task_conf_dirs`).

    Raises:
        TaskError: Unknown source, no conf file, or the file lacks (or mangles) the source's blocks.

    >>> from autorl.task_spec import get_task
    >>> opts = task_options(get_task("gsm8k"), "fixture")
    >>> opts.build["eval_size"], opts.eval["num_shots"], opts.path.name
    (200, 0, 'gsm8k.yaml')
    """
    if source not in spec.sources:
        raise TaskError(f"task '{spec.id}' has no source '{source}'; valid sources: {', '.join(spec.sources)}")
    path = task_conf_path(spec, conf_dirs)
    raw = read_yaml_mapping(path)
    return TaskOptions(build=_option_block(path, raw, "build", source), eval=_option_block(path, raw, "eval", source),
                       path=path)


def check_option_names(what: str, given: Sequence[str] | Mapping[str, Any], valid: Sequence[str] | Mapping[str, Any],
                       where: str) -> None:
    """Refuse option names that are not in ``valid``, naming each (with a close match) and every valid one.

    Raises:
        TaskError: Some name is unknown.

    >>> check_option_names("eval", ["num_shot"], ["num_shots", "limit"], "gsm8k.yaml")
    Traceback (most recent call last):
    ...
    autorl.errors.TaskError: unknown eval option 'num_shot' (did you mean 'num_shots'?); valid: limit, num_shots (gsm8k.yaml)
    """
    unknown = sorted(set(given) - set(valid))
    if not unknown:
        return
    names = []
    for name in unknown:
        close = difflib.get_close_matches(name, list(valid), n=1)
        names.append(f"'{name}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    plural = "s" if len(unknown) > 1 else ""
    raise TaskError(f"unknown {what} option{plural} {', '.join(names)}; valid: {', '.join(sorted(valid)) or '(none)'} "
                    f"({where})")


def _merged(spec: TaskSpec, source: str, kind: str, given: Mapping[str, Any] | None,
            conf_dirs: Sequence[Path] | None) -> dict[str, Any]:
    options = task_options(spec, source, conf_dirs)
    defaults: dict[str, Any] = getattr(options, kind)
    given = dict(given or {})
    check_option_names(f"{spec.id} {kind}", given, defaults, f"defaults in {options.path} {kind}.{source}")
    # Top-level keys are replaced whole: a given ``search: {...}`` or ``judge_params: {...}`` is the
    # complete value, as in the conf file, never merged into the default dict.
    return {**defaults, **given}


def build_options(spec: TaskSpec, source: str, given: Mapping[str, Any] | None = None, *,
                  conf_dirs: Sequence[Path] | None = None) -> dict[str, Any]:
    """Complete build options of ``source``: ``given`` over the conf defaults (``build.<source>``).

    Raises:
        TaskError: A given option is not in the conf block (the message lists the valid ones).

    >>> from autorl.task_spec import get_task
    >>> build_options(get_task("gsm8k"), "fixture", {"eval_size": 20})
    {'train_size': 2000, 'eval_size': 20}
    """
    return _merged(spec, source, "build", given, conf_dirs)


def eval_options(spec: TaskSpec, source: str, given: Mapping[str, Any] | None = None, *,
                 conf_dirs: Sequence[Path] | None = None) -> dict[str, Any]:
    """Complete eval options of ``source``: ``given`` over the conf defaults (``eval.<source>``).

    Raises:
        TaskError: A given option is not in the conf block (the message lists the valid ones).

    >>> from autorl.task_spec import get_task
    >>> eval_options(get_task("gsm8k"), "fixture", {"limit": 3})["limit"]
    3
    """
    return _merged(spec, source, "eval", given, conf_dirs)


def require_options(package: str | None, kind: str, options: Mapping[str, Any], *,
                    error: type[Exception] = TaskError) -> dict[str, Any]:
    """What a task's own code checks its options with: every option of its conf blocks, no other.

    A task's evaluator (and environment) is handed complete options by :meth:`EvalContext.for_task`,
    :func:`eval_options` or a sweep; this refuses a hand-made partial or misspelt dict with a clear
    message instead of a ``KeyError`` deep inside the task.

    Args:
        package: The task package (``autorl.task_code.<id>``; a module passes its ``__package__``).
        kind: ``"build"`` or ``"eval"``.
        options: The options the code was given.
        error: The exception class raised (an environment raises its :class:`EnvError`).

    Returns:
        A copy of ``options``.

    Raises:
        TaskError: (or ``error``) An option is unknown or missing; the message names it and the
            conf file that lists the valid ones.
    """
    if kind not in OPTION_KINDS:
        raise ValueError(f"kind must be one of {OPTION_KINDS}, got {kind!r}")
    if not package or not package.startswith(PACKAGE + "."):
        raise ValueError(f"package must be a task package ({PACKAGE}.<id>), got {package!r}")
    task_id, valid, required, path = _option_keys(".".join(package.split(".")[:3]), kind)  # autorl.task_code.<id>
    try:
        check_option_names(f"{task_id} {kind}", options, sorted(valid), f"defaults in {path}")
    except TaskError as exc:
        raise error(str(exc)) from exc
    missing = sorted(required - set(options))
    if missing:
        fillers = "EvalContext.for_task or autorl.tasks.eval_options" if kind == "eval" else "build_task_data"
        raise error(f"{task_id} {kind} options lack {', '.join(missing)}: pass complete options ({fillers} "
                    f"fill them in from {path})")
    return dict(options)


@functools.cache
def _option_keys(package: str, kind: str) -> tuple[str, frozenset[str], frozenset[str], Path]:
    """The task id, the option names any source accepts, those every source has, and the conf file.

    Cached per process: environments check their options at every episode reset, and the manifest
    and conf files do not change while a process runs.
    """
    root = importlib.import_module(package)
    spec = parse_manifest(Path(next(iter(root.__path__))) / "task.yaml")
    blocks = [set(getattr(task_options(spec, source), kind)) for source in spec.sources]
    return spec.id, frozenset(set().union(*blocks)), frozenset(set.intersection(*blocks)), task_conf_path(spec)
