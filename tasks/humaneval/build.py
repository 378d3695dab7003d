"""Data builder for humaneval: public/train.jsonl for the agent, private/eval.jsonl for the grader.

Rows (both files): ``question`` (the HumanEval ``prompt``: signature and docstring), ``answer``
(the ``canonical_solution``: the function body), ``task_id``, ``entry_point`` and ``test`` (code
defining ``check(candidate)``).

Sources:
    hub: ``openai/openai_humaneval`` split ``test`` (164 problems, in order): the first 82 -> train
        (tests included), the last 82 -> eval.
    fixture: generated small function problems in the same format (one-line bodies over ints,
        strings and lists), drawn from one pool of distinct problems, so train and eval are disjoint.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HUB_PATH = "openai/openai_humaneval"
HUB_CONFIG = "openai_humaneval"
HUB_SPLIT_AT = 82
FIELDS = ("question", "answer", "task_id", "entry_point", "test")

_WORDS = ("sun", "moon", "star", "tree", "leaf", "rock", "wave", "bird", "fish", "rain", "snow", "wind",
          "fire", "lake", "hill", "rose", "corn", "bell", "drum", "kite")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


Args = tuple[Any, ...]


@dataclass(frozen=True)
class _Template:
    """A family of one-line functions: name, signature, docstring sentence, body, reference, test inputs.

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
    _Template("add_{p}", "x: int) -> int", "Return x plus {p}.", "return x + {p}",
              lambda p, x: x + p, lambda p: _INTS, tuple(range(1, 100))),
    _Template("subtract_{p}", "x: int) -> int", "Return x minus {p}.", "return x - {p}",
              lambda p, x: x - p, lambda p: _INTS, tuple(range(1, 100))),
    _Template("times_{p}", "x: int) -> int", "Return x multiplied by {p}.", "return x * {p}",
              lambda p, x: x * p, lambda p: _INTS, tuple(range(2, 60))),
    _Template("is_multiple_of_{p}", "n: int) -> bool", "Return True if n is a multiple of {p}, otherwise False.",
              "return n % {p} == 0", lambda p, n: n % p == 0,
              lambda p: ((0,), (3 * p,), (p + 1,), (2 * p - 1,), (-2 * p,)), tuple(range(2, 40))),
    _Template("repeat_{p}", "n: int) -> str", "Return the word '{p}' repeated n times, with nothing in between.",
              "return '{p}' * n", lambda p, n: p * n, lambda p: ((0,), (1,), (3,)), _WORDS),
    _Template("count_{p}", "s: str) -> int", "Return how many times the letter '{p}' occurs in s.",
              "return s.count('{p}')", lambda p, s: s.count(p), lambda p: _STRS + ((f"{p}{p}-{p}",),), tuple(_LETTERS)),
    _Template("starts_with_{p}", "s: str) -> bool", "Return True if s starts with the letter '{p}', otherwise False.",
              "return s.startswith('{p}')", lambda p, s: s.startswith(p), lambda p: _STRS + ((f"{p}x",),),
              tuple(_LETTERS)),
    _Template("sum_times_{p}", "xs: list[int]) -> int", "Return the sum of the numbers in xs, multiplied by {p}.",
              "return sum(xs) * {p}", lambda p, xs: sum(xs) * p, lambda p: _LISTS, tuple(range(2, 40))),
    _Template("keep_above_{p}", "xs: list[int]) -> list[int]",
              "Return the numbers in xs that are greater than {p}, in their original order.",
              "return [x for x in xs if x > {p}]", lambda p, xs: [x for x in xs if x > p],
              lambda p: _LISTS + (([p + 1, p, p + 7, p - 1],),), tuple(range(0, 30))),
)


def _problem(template: _Template, param: Any) -> dict[str, str]:
    name = template.name.format(p=param)
    inputs = template.inputs(param)
    example_args = inputs[1]
    example = f"    >>> {name}({', '.join(map(repr, example_args))})\n    {template.ref(param, *example_args)!r}\n"
    prompt = f"def {name}({template.signature}:\n    \"\"\"{template.doc.format(p=param)}\n{example}    \"\"\"\n"
    asserts = "".join(f"    assert candidate({', '.join(map(repr, args))}) == {template.ref(param, *args)!r}\n"
                      for args in inputs)
    return {"question": prompt, "answer": f"    {template.body.format(p=param)}\n",
            "entry_point": name, "test": f"\n\ndef check(candidate):\n{asserts}"}


def fixture_problems() -> list[dict[str, str]]:
    """Every fixture problem, template by template (the builder samples from these)."""
    return [_problem(t, p) for t in _TEMPLATES for p in t.params]


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps({k: row[k] for k in FIELDS}, ensure_ascii=False) + "\n")


def _check_private_not_public(public: list[dict[str, str]], private: list[dict[str, str]]) -> None:
    """Guard against a generator change that lets eval text leak into train."""
    public_text = "\n".join(json.dumps(r) + "".join(r.values()) for r in public)
    for row in private:
        for key in ("question", "answer", "test"):
            if row[key] in public_text:
                raise ValueError(f"fixture bug: eval {key} of {row['entry_point']} also appears in train")


def _build_fixture(public: Path, private: Path, seed: int, options: dict[str, Any]) -> None:
    train_size = int(options.get("train_size", 240))
    eval_size = int(options.get("eval_size", 40))
    pool = fixture_problems()
    if train_size + eval_size > len(pool):
        raise ValueError(f"the fixture has {len(pool)} problems; train_size + eval_size = {train_size + eval_size}")
    random.Random(seed).shuffle(pool)
    chosen = pool[: eval_size + train_size]
    for index, row in enumerate(chosen):
        row["task_id"] = f"Fixture/{index}"
    evals, train = chosen[:eval_size], chosen[eval_size:]
    _check_private_not_public(train, evals)
    _write_jsonl(private / "eval.jsonl", evals)
    _write_jsonl(public / "train.jsonl", train)


def _build_hub(public: Path, private: Path, options: dict[str, Any]) -> None:
    import datasets  # heavy; only the hub source needs it

    split_at = int(options.get("split_at", HUB_SPLIT_AT))
    data = datasets.load_dataset(options.get("hub_path", HUB_PATH), HUB_CONFIG, split="test")
    if len(data) <= split_at:
        raise ValueError(f"{options.get('hub_path', HUB_PATH)} test split has {len(data)} problems; "
                         f"need more than split_at={split_at}")
    rows = [{"question": r["prompt"], "answer": r["canonical_solution"], "task_id": r["task_id"],
             "entry_point": r["entry_point"], "test": r["test"]} for r in data]
    _write_jsonl(public / "train.jsonl", rows[:split_at])
    _write_jsonl(private / "eval.jsonl", rows[split_at:])


_BUILDERS: dict[str, Callable[[Path, Path, int, dict[str, Any]], None]] = {
    "fixture": _build_fixture,
    "hub": lambda public, private, seed, options: _build_hub(public, private, options),
}


def build(source: str, public: Path, private: Path, *, seed: int, options: dict[str, Any]) -> None:
    """Write ``public/train.jsonl`` and ``private/eval.jsonl``.

    Args:
        source: ``"fixture"`` or ``"hub"``.
        public: Empty folder for what the agent may see.
        private: Empty folder for what only the evaluator reads.
        seed: Seed of the fixture's shuffle (the hub split is fixed).
        options: ``train_size`` / ``eval_size`` (fixture, defaults 240 / 40); ``hub_path`` (hub,
            default ``openai/openai_humaneval``; a local folder with the same layout works) and
            ``split_at`` (hub, default 82).

    Raises:
        ValueError: Unknown source or impossible sizes.
    """
    if source not in _BUILDERS:
        raise ValueError(f"unknown source '{source}'; valid: {', '.join(_BUILDERS)}")
    _BUILDERS[source](Path(public), Path(private), seed, options)
