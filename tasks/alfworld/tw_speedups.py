"""Speed-ups of TextWorld's PDDL engine that give the same texts: where ALFWorld's stepping spends
its time.

Profiled on the fixture (36 games × 20 steps, bench/interactive_eval.py), TextWorld's own work is:

- **Grammar and query parsing**: every command template and grammar condition is parsed again with
  TatSu on every step (:func:`memoize_parsers`).
- **Context copies**: each grammar derivation deep-copies its context's ``variables`` (the game's
  ``EntityInfo`` objects) and ``mapping`` dicts for every symbol it expands
  (``textgen.copy_context``). The derivation only adds keys to those dicts (``query``) and reads the
  values (``{r.name}``, ``{o.indefinite}``): a copy of each dict is enough
      (:func:`shallow_context_copies`).
- **PDDL translation**: loading a game translates its PDDL problem with fast-downward, and the
  ``reset`` right after translates the same problem again (both build a ``PddlState``); within
  :func:`translate_once` the second translation reuses the first.

Grader side: imported by ``env.py``; ``tests/unit/test_alfworld_speedups.py`` checks that every
observation and admissible command list stays the same.
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_translations = (
    threading.local()
)  # .memo: the translations of the current reset, when inside translate_once


def memoize_parsers() -> None:
    """Cache TextWorld's grammar and query parsing (same strings, same parse trees).

    The parse depends only on the string, so a cache with a deep copy per use (derivation mutates
    the symbols) gives the same text about 20x faster (about 0.3 s per ALFWorld step without it).
    """
    import textworld.envs.pddl.textgen as textgen
    import textworld.logic as logic

    for module in (textgen, logic):
        original = module._parse_and_convert
        if getattr(original, "_autorl_memoized", False):
            continue
        cache: dict[tuple[Any, ...], Any] = {}

        def cached(
            *args: Any,
            _original: Any = original,
            _cache: dict[tuple[Any, ...], Any] = cache,
            **kwargs: Any,
        ) -> Any:
            key = (args, tuple(sorted((k, v) for k, v in kwargs.items() if k != "trace")))
            if key not in _cache:
                _cache[key] = _original(*args, **kwargs)
            return copy.deepcopy(_cache[key])

        cached._autorl_memoized = True  # type: ignore[attr-defined]
        module._parse_and_convert = cached


def shallow_context_copies() -> None:
    """Replace ``textgen.copy_context`` by one that copies the ``variables`` and ``mapping`` dicts,
    not their values."""
    import textworld.envs.pddl.textgen as textgen

    if getattr(textgen.copy_context, "_autorl_shallow", False):
        return

    def copy_context(context: dict[str, Any]) -> dict[str, Any]:
        return {
            "state": context["state"],
            "facts": context["facts"],
            "variables": dict(context["variables"]),
            "mapping": dict(context["mapping"]),
            "entity_infos": context["entity_infos"],
        }

    copy_context._autorl_shallow = True  # type: ignore[attr-defined]
    textgen.copy_context = (
        copy_context  # module global: Symbol.copy, query and derive look it up at call time
    )


def _install_translation_memo() -> None:
    """Wrap ``fast_downward.pddl2sas`` so that it consults the current thread's memo inside
    :func:`translate_once`."""
    import fast_downward  # type: ignore[import-untyped]

    original = fast_downward.pddl2sas
    if getattr(original, "_autorl_memo", False):
        return

    @functools.wraps(original)  # __wrapped__: the translation itself
    def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
        translate = pddl2sas.__wrapped__
        memo = getattr(_translations, "memo", None)
        if memo is None:
            return translate(domain, problem, verbose=verbose, optimize=optimize)
        key = (domain, problem, optimize)
        if key not in memo:
            memo[key] = translate(domain, problem, verbose=verbose, optimize=optimize)
        return memo[key]

    pddl2sas._autorl_memo = True  # type: ignore[attr-defined]
    fast_downward.pddl2sas = pddl2sas


@contextmanager
def translate_once() -> Iterator[None]:
    """Within the block (one game's load and reset), each PDDL problem is translated once in this
    thread.

    The load's ``PddlState`` is replaced by the reset's right away, so sharing the translated task
    between them shares nothing that is played. The memo ends with the block: a later reset of the
    same game translates afresh.
    """
    _install_translation_memo()
    _translations.memo = {}
    try:
        yield
    finally:
        _translations.memo = None


def install() -> None:
    """Install the process-wide speed-ups (idempotent); :func:`translate_once` is used per reset."""
    memoize_parsers()
    shallow_context_copies()
    _install_translation_memo()
