"""A task's typed options: dataclasses in its own folder, checked by OmegaConf structured configs.

Each task folder has an ``options.py`` (its manifest's ``options`` entry point) that declares one
dataclass per data source for the builder and one for the evaluator, and names them in a
:class:`TaskOptions`; a field's default is the task's default and its help says what it does::

    @dataclass
    class FixtureBuild:
        train_size: int = option(2000, "generated problems in public/train.jsonl")

    OPTIONS = TaskOptions(build={"fixture": FixtureBuild, "hub": HubBuild},
                          eval={"fixture": Eval, "hub": HubEval})

Builders get an instance of their source's build class, evaluators and environments one of the
eval class (:meth:`autorl.tasks.EvalContext.options_as`). The complete options, as a plain dict,
are what the data cache and the score cache are keyed by (:func:`build_options`,
:func:`eval_options`), so ``{}`` and the defaults spelled out share one build. Importing this
module is cheap (OmegaConf is imported where options are checked).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from autorl.errors import ConfigError, TaskError
from autorl.registry import load_object

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from autorl.task_spec import TaskSpec

OPTION_KINDS = ("build", "eval")
T = TypeVar("T")


def option(default: Any, help: str) -> Any:  # noqa: A002 - the name the config errors print
    """A field of a task's options dataclass: its default and what it does.

    The help is what a refused override prints next to the expected type
    (:mod:`autorl.config_errors`). A list or dict default is copied for every instance.

    >>> @dataclass
    ... class Build:
    ...     train_size: int = option(10, "training items")
    >>> dataclasses.fields(Build)[0].metadata["help"], Build().train_size
    ('training items', 10)
    """
    meta = {"help": help}
    if isinstance(default, list | dict):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class TaskOptions:
    """The option classes of one task: data source to dataclass, for its builder and its evaluator.

    Attributes:
        build: Source (``"fixture"``, ``"hub"``) to the builder's options class; the complete
            options are part of the built data's cache key.
        eval: Source to the evaluator's options class (an interactive task's environments get the
            same options). One evaluator reads every source's, so they share their fields.
    """

    build: Mapping[str, type]
    eval: Mapping[str, type]


@functools.cache
def _load(
    package: str, target: str, task_id: str, sources: tuple[str, ...], where: str
) -> TaskOptions:
    """Import and check a task's :class:`TaskOptions` (cached: the options module does not change
    while a process runs, and environments look their options up at every reset)."""
    try:
        found = load_object(target, package=package, what=f"task '{task_id}' options")
    except ConfigError as error:
        raise TaskError(str(error)) from error
    if not isinstance(found, TaskOptions):
        raise TaskError(
            f"{where}: the options entry point {target!r} must be an "
            "autorl.task_options.TaskOptions, "
            f"got {type(found).__name__}"
        )
    for kind in OPTION_KINDS:
        classes: Mapping[str, type] = getattr(found, kind)
        if tuple(classes) != sources:
            raise TaskError(
                f"{where}: TaskOptions.{kind} must have one class per source, in the manifest's "
                "order "
                f"({', '.join(sources)}), got {', '.join(classes) or '(none)'}"
            )
        for source, cls in classes.items():
            if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
                raise TaskError(
                    f"{where}: TaskOptions.{kind}[{source!r}] must be a dataclass, got {cls!r}"
                )
    return found


def task_options(spec: TaskSpec) -> TaskOptions:
    """The task's option classes (its manifest's ``options`` entry point, e.g. ``options:OPTIONS``).

    Raises:
        TaskError: The entry point is missing, does not import, or its classes do not match the
            manifest's sources.

    >>> from autorl.task_spec import get_task
    >>> sorted(task_options(get_task("gsm8k")).build)
    ['fixture', 'hub']
    """
    return _load(
        spec.package,
        spec.entry_points["options"],
        spec.id,
        spec.sources,
        str(spec.folder / "task.yaml"),
    )


def option_class(spec: TaskSpec, kind: str, source: str) -> type:
    """The ``kind`` (``"build"`` or ``"eval"``) options class of ``source``.

    Raises:
        TaskError: Unknown source (the message lists the valid ones).
    """
    if source not in spec.sources:
        raise TaskError(
            f"task '{spec.id}' has no source '{source}'; valid sources: {', '.join(spec.sources)}"
        )
    classes: Mapping[str, type] = getattr(task_options(spec), kind)
    return classes[source]


def _names_message(what: str, unknown: list[str], valid: list[str], where: str) -> str:
    """The message for option names that ``valid`` lacks: each with a close match, then the valid
    ones."""
    names = []
    for name in unknown:
        close = difflib.get_close_matches(name, valid, n=1)
        names.append(f"'{name}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    plural = "s" if len(unknown) > 1 else ""
    listed = ", ".join(sorted(valid)) or "(none)"
    return f"unknown {what} option{plural} {', '.join(names)}; valid: {listed} ({where})"


def typed_options(
    cls: type[T],
    given: Mapping[str, Any] | T | None,
    *,
    what: str,
    complete: bool = False,
    error: type[Exception] = TaskError,
) -> T:
    """An instance of the options class ``cls``: ``given`` over its defaults, checked by OmegaConf.

    Args:
        cls: A task's options dataclass.
        given: Options that differ from the defaults, or an instance (returned as it is).
        what: Which options these are, for messages (``"gsm8k eval"``).
        complete: Refuse a mapping that lacks an option instead of filling in the default: an
            evaluator or environment handed a hand-made dict must not get another source's defaults.
        error: The exception class raised (an environment raises its ``EnvError``).

    Raises:
        TaskError: (or ``error``) An unknown name (with "did you mean" and the valid names), a
            missing one (``complete``), or a value of the wrong type (with the field's type and
            help).

    >>> @dataclass
    ... class Eval:
    ...     limit: int | None = option(None, "first N items; null: all")
    >>> typed_options(Eval, {"limit": "3"}, what="demo eval")
    Eval(limit=3)
    >>> typed_options(Eval, {"limt": 3}, what="demo eval")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    autorl.errors.TaskError: unknown demo eval option 'limt' (did you mean 'limit'?); valid: ...
    """
    if isinstance(given, cls):
        return given
    values: dict[str, Any] = dict(cast(Mapping[str, Any], given or {}))
    valid = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise error(_names_message(what, unknown, valid, cls.__qualname__))
    missing = sorted(set(valid) - set(values))
    if complete and missing:
        raise error(
            f"{what} options lack {', '.join(missing)}: pass complete options "
            "(EvalContext.for_task or "
            f"autorl.tasks.eval_options fill them in from {cls.__qualname__}'s defaults)"
        )
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        merged = OmegaConf.merge(OmegaConf.structured(cls), values)
        # A given mapping (``search: {...}``, ``judge_params: {...}``) is the option's complete
        # value: merged into the default one, it would keep keys of another backend or request.
        for name, value in values.items():
            if isinstance(value, Mapping):
                OmegaConf.update(merged, name, dict(value), merge=False)
        typed: T = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        raise error(_type_message(what, cls, exc)) from exc
    return typed


def _type_message(what: str, cls: type, exc: Exception) -> str:
    """OmegaConf's refusal of a value, as the option, its expected type and its help."""
    from autorl.config_errors import describe_type

    key = str(getattr(exc, "full_key", "") or "")
    hints = {f.name: f for f in dataclasses.fields(cls)}
    name = key.split(".")[0]
    if name not in hints:
        return f"{what} options: {str(exc).splitlines()[0]} ({cls.__qualname__})"
    import typing

    kind = describe_type(typing.get_type_hints(cls)[name])
    help_text = hints[name].metadata.get("help", "")
    about = f" ({help_text})" if help_text else ""
    return f"{what} option '{name}' must be {kind}: {str(exc).splitlines()[0]}{about}"


def plain(options: object) -> dict[str, Any]:
    """The options instance as a plain dict (what caches are keyed by and Ray passes on).

    >>> @dataclass
    ... class Build:
    ...     size: int = option(3, "items")
    >>> plain(Build())
    {'size': 3}
    """
    if not dataclasses.is_dataclass(options) or isinstance(options, type):
        raise TypeError(f"expected an options dataclass instance, got {type(options).__name__}")
    return dataclasses.asdict(options)


def build_options(
    spec: TaskSpec, source: str, given: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Complete build options of ``source``: ``given`` over the class defaults, as a dict.

    Raises:
        TaskError: Unknown source, an unknown option (the message lists the valid ones) or a value
            of the wrong type.

    >>> from autorl.task_spec import get_task
    >>> build_options(get_task("gsm8k"), "fixture", {"eval_size": 20})
    {'train_size': 2000, 'eval_size': 20}
    """
    cls = option_class(spec, "build", source)
    return plain(typed_options(cls, given, what=f"{spec.id} build"))


def eval_options(
    spec: TaskSpec, source: str, given: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Complete eval options of ``source``: ``given`` over the class defaults, as a dict.

    Raises:
        TaskError: Unknown source, an unknown option (the message lists the valid ones) or a value
            of the wrong type.

    >>> from autorl.task_spec import get_task
    >>> eval_options(get_task("gsm8k"), "fixture", {"limit": 3})["limit"]
    3
    """
    cls = option_class(spec, "eval", source)
    return plain(typed_options(cls, given, what=f"{spec.id} eval"))


def task_node(spec: TaskSpec) -> DictConfig:
    """The ``task=<id>`` option of the Hydra config: the manifest's run defaults and, under
    ``build.<source>`` and ``eval.<source>``, each options class as a structured config.

    The structured nodes keep their types through composition, so Hydra refuses an override of
    an unknown option or of the wrong type with the key's full name (:mod:`autorl.config_errors`
    adds "did you mean" and the field's help).
    """
    from omegaconf import OmegaConf

    classes = task_options(spec)
    run = spec.run
    node: dict[str, Any] = {
        "name": spec.id,
        "source": run.source,
        "budget_s": run.budget_s,
        "build": {source: OmegaConf.structured(cls) for source, cls in classes.build.items()},
        "eval": {source: OmegaConf.structured(cls) for source, cls in classes.eval.items()},
    }
    if run.env_pool is not None:
        node["env_pool"] = run.env_pool.model_dump()
    return OmegaConf.create(node)


def register_task_configs() -> None:
    """Store every task folder's :func:`task_node` in Hydra's ConfigStore as the ``task`` group.

    Called before each composition: the set of task folders changes with the active plugins.
    """
    from hydra.core.config_store import ConfigStore

    from autorl.task_spec import discover_tasks

    store = ConfigStore.instance()
    for spec in discover_tasks().values():
        store.store(group="task", name=spec.id, node=task_node(spec))
