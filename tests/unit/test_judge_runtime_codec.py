"""The plain-data codec between the function judge's two processes: plain values round-trip
exactly, anything else is unsendable, nesting is capped, malformed data is refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent_kit import judge_runtime


def _typed(value: Any) -> Any:
    """``value`` with the exact type of every part spelled out (floats by hex: -0.0 is not 0.0)."""
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, dict):
        return ("dict", [(_typed(k), _typed(v)) for k, v in value.items()])
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, frozenset(_typed(v) for v in value))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_typed(v) for v in value))
    return (type(value).__name__, value)


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        10**5000,
        -(2**64),
        0.1,
        -0.0,
        float("inf"),
        float("-inf"),
        1e308,
        5e-324,
        2 - 3j,
        "",
        "héllo\n\x00",
        "\ud800 lone surrogate",
        b"",
        b"\x00\xff\n",
        [],
        (),
        {},
        set(),
        frozenset(),
        [1, (2, [3, {4: (5,)}])],
        {"a": [None], 1: {2.5}, (1, "x"): frozenset({b"y"})},
        ((),),
        [[[]]],
    ],
    ids=lambda value: type(value).__name__,
)
def test_plain_values_round_trip_exactly(value: Any) -> None:
    back = judge_runtime.decode(judge_runtime.encode(value))
    assert back == value and _typed(back) == _typed(
        value
    )  # nested types too, and -0.0 keeps its sign


def test_nan_round_trips() -> None:
    back = judge_runtime.decode(judge_runtime.encode([float("nan")]))
    assert type(back[0]) is float and back[0] != back[0]


def test_subclasses_cross_as_the_value_their_base_type_stores() -> None:
    """A forged method never runs: the stored value is read with the base type's own methods."""
    from collections import Counter, OrderedDict, namedtuple

    class Liar(int):
        def __int__(self) -> int:
            return 99

        def __index__(self) -> int:
            return 98

        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = int.__hash__

    class LyingList(list):  # type: ignore[type-arg]
        def __iter__(self) -> Iterator[Any]:
            return iter([1, 2, 3])

    Pair = namedtuple("Pair", "a b")
    cases = [
        (Liar(5), 5),
        (LyingList([7]), [7]),
        (Counter("aab"), {"a": 2, "b": 1}),
        (Pair(1, 2), (1, 2)),
        (OrderedDict(x=1), {"x": 1}),
    ]
    for value, plain in cases:
        back = judge_runtime.decode(judge_runtime.encode(value))
        assert back == plain and type(back) is type(plain)


@pytest.mark.parametrize(
    "value",
    [
        (x for x in ()),
        object(),
        print,
        type,
        Exception("x"),
        range(3),
        [1, object()],
        {"k": lambda: 0},
        bytearray(b"x"),
        memoryview(b"x"),
    ],
    ids=lambda value: type(value).__name__,
)
def test_anything_else_is_unsendable(value: Any) -> None:
    with pytest.raises(judge_runtime.Unsendable):
        judge_runtime.encode(value)


def test_nesting_is_capped_both_ways() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(judge_runtime.Unsendable, match="nested deeper"):
        judge_runtime.encode(loop)
    with pytest.raises(ValueError, match="nested deeper"):
        judge_runtime.decode(b"l1:" * 100_000 + b"n")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"x",
        b"nn",
        b"i",
        b"i3:1",
        b"i2:zz",
        b"s-1:",
        b"s1x:a",
        b"l2:n",
        b"l99999999999:n",
        b"d1:n",
        b"d1:l0:n",
        b"e1:l0:",
        b"f3:xyz",
        b"c3:1;2",
        b"c1:1",
        b"s2:\xff\xfe",
        b"i1:1n",
        b"q1:a",
        b"s+1:a",
        b"s 1:a",
    ],
)
def test_malformed_data_is_refused(data: bytes) -> None:
    with pytest.raises((ValueError, TypeError)):
        judge_runtime.decode(data)
