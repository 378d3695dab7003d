"""The humaneval fixture generator: small HumanEval-style function problems, one-line bodies.

Nine families of one-line functions over ints, strings and lists (``add_N``, ``subtract_N``,
``times_N``, ``is_multiple_of_N``, ``repeat_<word>``, ``count_<letter>``, ``starts_with_<letter>``,
``sum_times_N``, ``keep_above_N``); each problem has a HumanEval-style prompt (signature, docstring,
one doctest example), the body as canonical solution, and ``check(candidate)`` with 3-6 asserts
computed from a reference implementation.

Grader side: deterministic, so it can rebuild the private split; no agent imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_WORDS = (
    "sun",
    "moon",
    "star",
    "tree",
    "leaf",
    "rock",
    "wave",
    "bird",
    "fish",
    "rain",
    "snow",
    "wind",
    "fire",
    "lake",
    "hill",
    "rose",
    "corn",
    "bell",
    "drum",
    "kite",
)
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


Args = tuple[Any, ...]


@dataclass(frozen=True)
class _Template:
    """A family of one-line functions: name, signature, docstring sentence, body, reference, test
    inputs.

    ``inputs(p)`` gives the test calls' arguments; at least one depends on the parameter or the
    outputs do, so two problems never share a test.
    """

    name: str
    signature: str
    doc: str
    body: str
    ref: Callable[..., Any]
    inputs: Callable[[Any], tuple[Args, ...]]
    params: tuple[Any, ...]


_INTS: tuple[Args, ...] = ((0,), (3,), (10,), (-4,), (27,))
_STRS: tuple[Args, ...] = (("",), ("banana",), ("a stream of clear water",), ("Mississippi",))
_LISTS: tuple[Args, ...] = (([],), ([1, 2, 3],), ([5, -2, 9, 14],), ([30, 4, 18, 11, 2],))

_TEMPLATES: tuple[_Template, ...] = (
    _Template(
        "add_{p}",
        "x: int) -> int",
        "Return x plus {p}.",
        "return x + {p}",
        lambda p, x: x + p,
        lambda p: _INTS,
        tuple(range(1, 100)),
    ),
    _Template(
        "subtract_{p}",
        "x: int) -> int",
        "Return x minus {p}.",
        "return x - {p}",
        lambda p, x: x - p,
        lambda p: _INTS,
        tuple(range(1, 100)),
    ),
    _Template(
        "times_{p}",
        "x: int) -> int",
        "Return x multiplied by {p}.",
        "return x * {p}",
        lambda p, x: x * p,
        lambda p: _INTS,
        tuple(range(2, 60)),
    ),
    _Template(
        "is_multiple_of_{p}",
        "n: int) -> bool",
        "Return True if n is a multiple of {p}, otherwise False.",
        "return n % {p} == 0",
        lambda p, n: n % p == 0,
        lambda p: ((0,), (3 * p,), (p + 1,), (2 * p - 1,), (-2 * p,)),
        tuple(range(2, 40)),
    ),
    _Template(
        "repeat_{p}",
        "n: int) -> str",
        "Return the word '{p}' repeated n times, with nothing in between.",
        "return '{p}' * n",
        lambda p, n: p * n,
        lambda p: ((0,), (1,), (3,)),
        _WORDS,
    ),
    _Template(
        "count_{p}",
        "s: str) -> int",
        "Return how many times the letter '{p}' occurs in s.",
        "return s.count('{p}')",
        lambda p, s: s.count(p),
        lambda p: _STRS + ((f"{p}{p}-{p}",),),
        tuple(_LETTERS),
    ),
    _Template(
        "starts_with_{p}",
        "s: str) -> bool",
        "Return True if s starts with the letter '{p}', otherwise False.",
        "return s.startswith('{p}')",
        lambda p, s: s.startswith(p),
        lambda p: _STRS + ((f"{p}x",),),
        tuple(_LETTERS),
    ),
    _Template(
        "sum_times_{p}",
        "xs: list[int]) -> int",
        "Return the sum of the numbers in xs, multiplied by {p}.",
        "return sum(xs) * {p}",
        lambda p, xs: sum(xs) * p,
        lambda p: _LISTS,
        tuple(range(2, 40)),
    ),
    _Template(
        "keep_above_{p}",
        "xs: list[int]) -> list[int]",
        "Return the numbers in xs that are greater than {p}, in their original order.",
        "return [x for x in xs if x > {p}]",
        lambda p, xs: [x for x in xs if x > p],
        lambda p: _LISTS + (([p + 1, p, p + 7, p - 1],),),
        tuple(range(0, 30)),
    ),
)


def _problem(template: _Template, param: Any) -> dict[str, str]:
    name = template.name.format(p=param)
    inputs = template.inputs(param)
    example_args = inputs[1]
    example = f"    >>> {name}({', '.join(map(repr, example_args))})\n    {template.ref(param, *example_args)!r}\n"  # noqa: E501
    prompt = f'def {name}({template.signature}:\n    """{template.doc.format(p=param)}\n{example}    """\n'  # noqa: E501
    asserts = "".join(
        f"    assert candidate({', '.join(map(repr, args))}) == {template.ref(param, *args)!r}\n"
        for args in inputs
    )
    return {
        "question": prompt,
        "answer": f"    {template.body.format(p=param)}\n",
        "entry_point": name,
        "test": f"\n\ndef check(candidate):\n{asserts}",
    }


def fixture_problems() -> list[dict[str, str]]:
    """Every fixture problem, template by template (the builder samples from these).

    Rows have ``question`` (prompt), ``answer`` (body), ``entry_point`` and ``test``; the builder
    adds ``task_id``.

    >>> problems = fixture_problems()
    >>> len(problems), problems[0]["entry_point"], problems[0]["answer"]
    (434, 'add_1', '    return x + 1\\n')
    """
    return [_problem(t, p) for t in _TEMPLATES for p in t.params]
