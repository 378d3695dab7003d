"""humaneval specifics: code extraction, the prompt sent, the function judge against adversarial
completions,
hostile completions, the recipe's reward, the fixture and the hub loader."""

from __future__ import annotations

import doctest
import json
import os
import pwd
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agent_kit import judge_runtime
from agent_kit.function_judge import FunctionJudge, Problem, Verdict
from agent_kit.sandbox import Sandbox, SandboxError, SandboxLimits
from autorl.errors import TaskError
from autorl.tasks import (
    EvalContext,
    build_options,
    build_task_data,
    eval_options,
    get_task,
    load_task_module,
)
from tests.helpers.procs import processes_mentioning

SPEC = get_task("humaneval")
EVAL: ModuleType = load_task_module(SPEC, "evaluate.py")
FIXTURE: ModuleType = load_task_module(SPEC, "fixture.py")
PROTOCOL: ModuleType = load_task_module(SPEC, "agent/protocol.py")
RECIPE: ModuleType = load_task_module(SPEC, "agent/recipe.py")
INSTRUCTION = (
    "Read the following function signature and docstring, and fully implement the function "
    "described. "
    "Your response should only contain the code for this function.\n"
)
PROMPT = 'from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum of xs."""\n'
TEST = (
    "\n\ndef check(candidate):\n    assert candidate([1, 2]) == 3\n    assert candidate([]) == 0\n"
)

HUB_README = """---
configs:
- config_name: openai_humaneval
  data_files:
  - split: test
    path: openai_humaneval/test-*
---
# openai_humaneval local stand-in
"""


def _exec_passes(program: str) -> bool:
    """Run a program we generated ourselves in-process (fast; only for trusted code)."""
    try:
        exec(compile(program, "<program>", "exec"), {"__name__": "__main__"})  # noqa: S102 - trusted fixture code
    except Exception:  # noqa: BLE001 - any failure means "does not pass"
        return False
    return True


@pytest.mark.parametrize("module", [PROTOCOL, FIXTURE], ids=lambda m: m.__name__.rpartition(".")[2])
def test_doctests(module: ModuleType) -> None:
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize(
    ("completion", "passes"),
    [
        ("    return sum(xs)\n", True),
        ("return sum(xs)", True),  # unindented body
        (
            "```python\ndef total(xs: List[int]) -> int:\n    return sum(xs)\n```\nThis sums the "
            "list.",
            True,
        ),
        ("Here you go:\n```\ndef total(xs):\n    return sum(xs)\n```", True),
        ("```python\ndef total(xs: List[int]) -> int:\n    return sum(xs)", True),  # unclosed fence
        (
            "def total(xs: List[int]) -> int:\n    s = 0\n    for x in xs:\n        s += x\n    "
            "return s\n",
            True,
        ),
        ("    return sum(xs) + 1\n", False),
        ("no idea, sorry", False),
        ("", False),
    ],
)
def test_build_solution(completion: str, passes: bool) -> None:
    solution = PROTOCOL.build_solution(PROMPT, completion, "total")
    assert solution.startswith(PROMPT) and solution.endswith("\n")
    assert _exec_passes(f"{solution}{TEST}\ncheck(total)\n") is passes


# ---- the function judge: adversarial completions fail, fair ones pass
# -----------------------------------

ADD = Problem(
    'def add(x: int, y: int) -> int:\n    """Sum of x and y.\n    >>> add(2, 3)\n    5\n    """\n',
    # Written so that redefining abs, isinstance and len would make a wrong answer pass in one
    # process.
    "\n\ndef check(candidate):\n    assert abs(candidate(2, 3) - 5) < 1e-9\n    assert "
    "abs(candidate(-1, 1)) < 1e-9\n"
    "    assert isinstance(candidate(1, 1), int)\n    assert len(str(candidate(40, 2))) == 2\n",
    "add",
)
# HumanEval/32 verbatim: its test calls the prompt's helper `poly` and `math.fabs`.
FIND_ZERO = Problem(
    'import math\n\n\ndef poly(xs: list, x: float):\n    """\n    Evaluates polynomial with '
    "coefficients xs at point x.\n"
    '    return xs[0] + xs[1] * x + xs[1] * x^2 + .... xs[n] * x^n\n    """\n'
    "    return sum([coeff * math.pow(x, i) for i, coeff in enumerate(xs)])\n\n\n"
    'def find_zero(xs: list):\n    """ xs are coefficients of a polynomial.\n    find_zero find x '
    "such that poly(x) = 0.\n"
    "    find_zero returns only only zero point, even if there are many.\n"
    "    Moreover, find_zero only takes list xs having even number of coefficients\n"
    "    and largest non zero coefficient as it guarantees\n    a solution.\n"
    "    >>> round(find_zero([1, 2]), 2) # f(x) = 1 + 2x\n    -0.5\n"
    "    >>> round(find_zero([-6, 11, -6, 1]), 2) # (x - 1)(x - 2)(x - 3) = -6 + 11x - 6x^2 + "
    'x^3\n    1.0\n    """\n',
    "\n\nMETADATA = {}\n\n\ndef check(candidate):\n    import math\n    import random\n    rng = "
    "random.Random(42)\n"
    "    import copy\n    for _ in range(100):\n        ncoeff = 2 * rng.randint(1, 4)\n        "
    "coeffs = []\n"
    "        for _ in range(ncoeff):\n            coeff = rng.randint(-10, 10)\n            if "
    "coeff == 0:\n"
    "                coeff = 1\n            coeffs.append(coeff)\n        solution = "
    "candidate(copy.deepcopy(coeffs))\n"
    "        assert math.fabs(poly(coeffs, solution)) < 1e-4\n",
    "find_zero",
)
FIND_ZERO_BODY = (
    "    begin, end = -1., 1.\n    while poly(xs, begin) * poly(xs, end) > 0:\n        begin *= "
    "2.0\n"
    "        end *= 2.0\n    while end - begin > 1e-10:\n        center = (begin + end) / 2.0\n"
    "        if poly(xs, center) * poly(xs, begin) > 0:\n            begin = center\n        "
    "else:\n"
    "            end = center\n    return begin\n"
)
SUM_PRODUCT = Problem(
    "from typing import List, Tuple\n\n\ndef sum_product(numbers: List[int]) -> Tuple[int, int]:\n"
    '    """The sum and the product of numbers (0 and 1 when it is empty)."""\n',
    "\n\ndef check(candidate):\n    assert candidate([]) == (0, 1)\n    assert candidate([1, 1, "
    "1]) == (3, 1)\n"
    "    assert candidate([100, 0]) == (100, 0)\n    assert candidate([3, 5, 7]) == (15, 105)\n",
    "sum_product",
)
SHOUT = Problem(
    'def shout(s: str) -> str:\n    """s in capitals, then "!"."""\n',
    "\n\ndef check(candidate):\n    assert candidate('hi') == 'HI!'\n    assert candidate('') == "
    "'!'\n",
    "shout",
)
PARSE = Problem(
    'def parse_positive(s: str) -> int:\n    """int(s) if it is positive, else raise '
    'ValueError."""\n',
    "\n\ndef check(candidate):\n    assert candidate('12') == 12\n    for bad in ('-3', '0'):\n    "
    "    try:\n"
    "            candidate(bad)\n        except ValueError:\n            continue\n"
    "        raise AssertionError(f'no ValueError for {bad!r}')\n",
    "parse_positive",
)
COUNTS = Problem(
    'def letter_counts(s: str) -> dict:\n    """How often each letter occurs in s."""\n',
    "\n\ndef check(candidate):\n    assert candidate('abca') == {'a': 2, 'b': 1, 'c': 1}\n"
    "    assert candidate('') == {}\n",
    "letter_counts",
)
EVENS = Problem(
    'def is_even(n: int) -> bool:\n    """Whether n is even."""\n',
    "\n\ndef check(candidate):\n    assert all(map(candidate, [0, 2, 10]))\n"
    "    assert not any(map(candidate, [1, 3, -5]))\n",
    "is_even",
)

_ALWAYS_EQUAL = (
    "        def __eq__(self, other):\n            return True\n"
    "        __hash__ = object.__hash__\n"
)
_LIKE_FORTY_TWO = (
    "        def __sub__(self, other):\n            return 0\n        def __abs__(self):\n         "
    "   return 0\n"
    "        def __str__(self):\n            return '42'\n"
)
_FORGED_FRAMES = (
    "import os\nfor fd in range(3, 64):\n    for frame in (b'1\\nT', b'99999999999\\n', "
    "b'garbage\\n'):\n"
    "        try:\n            os.write(fd, frame)\n        except OSError:\n            pass\n"
)

# (id, problem, completion: the model's reply, fools_exit_status: the one-process exit-status rule
# of version 1 passes it, which shows the attack is real). Every one must fail.
ADVERSARIAL: list[tuple[str, Problem, str, bool]] = [
    (
        "sys.exit after the function",
        ADD,
        "def add(x, y):\n    return 0\nimport sys\nsys.exit(0)\n",
        True,
    ),
    (
        "raise SystemExit after the function",
        ADD,
        "def add(x, y):\n    return 0\nraise SystemExit\n",
        True,
    ),
    ("os._exit at top level", ADD, "import os\nos._exit(0)\n", True),
    ("sys.exit in the body", ADD, "    import sys\n    sys.exit(0)\n", True),
    ("raise SystemExit in the body", ADD, "    raise SystemExit(0)\n", True),
    (
        "atexit os._exit with a wrong body",
        ADD,
        "    import atexit, os\n    atexit.register(os._exit, 0)\n    return 0\n",
        True,
    ),
    (
        "atexit os._exit at top level",
        ADD,
        "import atexit, os\natexit.register(os._exit, 0)\ndef add(x, y):\n    return 0\n",
        True,
    ),
    (
        "excepthook exits 0",
        ADD,
        "import os, sys\nsys.excepthook = lambda *a: os._exit(0)\ndef add(x, y):\n    return 0\n",
        True,
    ),
    ("function calls os._exit", ADD, "    import os\n    os._exit(0)\n", True),
    (
        "always-equal object",
        SUM_PRODUCT,
        f"    class Same:\n{_ALWAYS_EQUAL}    return Same()\n",
        True,
    ),
    (
        "tuple subclass with forged __eq__",
        SUM_PRODUCT,
        f"    class T(tuple):\n{_ALWAYS_EQUAL}    return T((0, 0))\n",
        True,
    ),
    (
        "int subclass with forged arithmetic",
        ADD,
        f"    class T(int):\n{_LIKE_FORTY_TWO}    return T(7)\n",
        True,
    ),
    (
        "str subclass with forged __eq__",
        SHOUT,
        f"    class S(str):\n{_ALWAYS_EQUAL}    return S('wrong')\n",
        True,
    ),
    (
        "object claiming int via __class__",
        ADD,
        f"    class Fake:\n        __class__ = property(lambda self: int)\n{_LIKE_FORTY_TWO}    "
        "return Fake()\n",
        True,
    ),
    (
        "builtins shadowed at top level",
        ADD,
        "abs = lambda v: 0\nisinstance = lambda *a: True\nlen = lambda v: 2\ndef add(x, y):\n    "
        "return 0\n",
        True,
    ),
    (
        "builtins module patched",
        ADD,
        "import builtins\nbuiltins.abs = lambda v: 0\nbuiltins.isinstance = lambda *a: "
        "True\nbuiltins.len = lambda v: 2\n"
        "builtins.AssertionError = type('AssertionError', (Exception,), {})\ndef add(x, y):\n    "
        "return 0\n",
        True,
    ),
    (
        "prompt helper poly and math.fabs redefined",
        FIND_ZERO,
        "import math\nmath.fabs = lambda v: 0.0\ndef poly(xs, x):\n    return 0.0\ndef "
        "find_zero(xs):\n    return 0.0\n",
        True,
    ),
    (
        "fake verdict and protocol lines printed",
        ADD,
        "    import sys\n    print('ready')\n    print('pass 0')\n    sys.stdout.write('1\\nT')\n"
        "    print('pass', file=sys.stderr)\n    return 0\n",
        False,
    ),
    (
        "forged frames written to every descriptor",
        ADD,
        _FORGED_FRAMES + "def add(x, y):\n    return 0\n",
        False,
    ),
    (
        "answer written ahead with a guessed id",
        ADD,
        "import __main__, os\nframe = __main__.encode(('0' * 32, 'value', 5))\nfor fd in range(3, "
        "64):\n    try:\n"
        "        __main__.send(os.fdopen(fd, 'wb', closefd=False), frame)\n    except OSError:\n   "
        "     pass\n"
        "def add(x, y):\n    return 0\n",
        False,
    ),
    (
        "the candidate's encoder patched",
        ADD,
        "import __main__\n__main__.encode = lambda value: b'T'\ndef add(x, y):\n    return 0\n",
        False,
    ),
    (
        "json and pickle monkeypatched",
        ADD,
        "import json, pickle\njson.loads = lambda *a, **k: True\n"
        "json.dumps = lambda *a, **k: 'true'\npickle.loads = lambda *a, **k: True\ndef add(x, "
        "y):\n    return 0\n",
        False,
    ),
    (
        "kills its parent",
        ADD,
        "    import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)\n    return 0\n",
        False,
    ),
    (
        "kills itself",
        ADD,
        "    import os, signal\n    os.kill(os.getpid(), signal.SIGKILL)\n",
        False,
    ),
    (
        "exits leaving a child that holds the pipes",
        ADD,
        "    import os, time\n    if os.fork() == 0:\n        time.sleep(300)\n    os._exit(0)\n",
        False,
    ),
    ("infinite loop in the body", ADD, "    while True:\n        pass\n", False),
    ("infinite loop at top level", ADD, "while True:\n    pass\n", False),
    ("returns a generator", ADD, "    return (v for v in [x + y])\n", False),
    ("returns a function", ADD, "    return lambda: x + y\n", False),
    (
        "returns a self-containing list",
        SUM_PRODUCT,
        "    a = []\n    a.append(a)\n    return a\n",
        False,
    ),
    (
        "returns a deeply nested list",
        SUM_PRODUCT,
        "    a = []\n    for _ in range(500):\n        a = [a]\n    return a\n",
        False,
    ),
    ("answer over the size limit", SHOUT, "    return 'X' * (9 << 20)\n", False),
    ("raises KeyboardInterrupt", ADD, "    raise KeyboardInterrupt\n", False),
    (
        "homemade exception named SystemExit",
        PARSE,
        "    class SystemExit(Exception):\n        pass\n    raise SystemExit(0)\n",
        False,
    ),
    ("StopIteration ends the test's map early", EVENS, "    raise StopIteration\n", True),
    ("no function at all", ADD, "def add(x, y):\n    return x + y\ndel add\n", False),
    ("a wrong answer", ADD, "    return x - y\n", False),
]

# Fair replies: each must pass.
CORRECT: list[tuple[str, Problem, str]] = [
    ("body", ADD, "    return x + y\n"),
    ("unindented body", ADD, "return x + y"),
    (
        "full def in a code block",
        ADD,
        "Sure:\n```python\ndef add(x: int, y: int) -> int:\n    return x + y\n```\nDone.",
    ),
    (
        "prints to stdout and stderr",
        ADD,
        "    import sys\n    print('pass', x, y)\n    print('1\\nT', file=sys.stderr)\n    return "
        "x + y\n",
    ),
    (
        "main block does not run",
        ADD,
        "def add(x, y):\n    return x + y\n\nif __name__ == '__main__':\n    add(input(), 1)\n",
    ),
    ("HumanEval/32 with the prompt's poly", FIND_ZERO, FIND_ZERO_BODY),
    (
        "tuple",
        SUM_PRODUCT,
        "    product = 1\n    for n in numbers:\n        product *= n\n    return sum(numbers), "
        "product\n",
    ),
    (
        "named tuple",
        SUM_PRODUCT,
        "    from collections import namedtuple\n    import math\n"
        "    return namedtuple('Pair', 'sum product')(sum(numbers), math.prod(numbers))\n",
    ),
    ("Counter for a dict", COUNTS, "    from collections import Counter\n    return Counter(s)\n"),
    (
        "raises the expected ValueError",
        PARSE,
        "    n = int(s)\n    if n <= 0:\n        raise ValueError(s)\n    return n\n",
    ),
    ("str", SHOUT, "    return s.upper() + '!'\n"),
    ("bool", EVENS, "    return n % 2 == 0\n"),
    # Kills every process it can see (its PID namespace holds only itself): the judge is out of its
    # reach.
    (
        "kills every process it sees, then answers",
        ADD,
        "    import os, signal\n    for pid in range(2, 4096):\n        try:\n            "
        "os.kill(pid, signal.SIGKILL)\n"
        "        except OSError:\n            pass\n    return x + y\n",
    ),
]


@pytest.fixture(scope="module")
def judge() -> Iterator[FunctionJudge]:
    box = Sandbox(SandboxLimits(timeout_s=5, cpu_s=5, max_processes=16))
    assert box.mode == "namespaces"  # the kill-everything case must not run unisolated
    with FunctionJudge(box) as made:
        yield made


@pytest.fixture(scope="module")
def verdicts(judge: FunctionJudge) -> dict[str, Verdict]:
    """Every adversarial and correct case, judged in one batch (fast)."""
    cases = [(name, problem, completion) for name, problem, completion, _ in ADVERSARIAL] + CORRECT
    judged = judge.judge_many(
        [
            (problem, PROTOCOL.build_solution(problem.prompt, completion, problem.entry_point))
            for _, problem, completion in cases
        ],
        workers=2,
    )
    return {name: verdict for (name, _, _), verdict in zip(cases, judged, strict=True)}


def test_cases_are_named_uniquely() -> None:
    names = [case[0] for case in ADVERSARIAL] + [case[0] for case in CORRECT]
    assert len(names) == len(set(names))


def test_the_attacks_fool_the_old_exit_status_rule(judge: FunctionJudge) -> None:
    """Version 1 ran prompt + code + test + check in one process and passed on exit status 0."""
    fooling = [(problem, completion) for _, problem, completion, fools in ADVERSARIAL if fools]
    programs = [
        f"{PROTOCOL.build_solution(p.prompt, c, p.entry_point)}{p.test}\ncheck({p.entry_point})\n"
        for p, c in fooling
    ]
    results = judge.sandbox.run_many(programs, workers=2)
    assert [r.ok for r in results] == [True] * len(fooling), [r.output[-300:] for r in results]


@pytest.mark.parametrize(
    ("name", "expect_timeout"), [(case[0], "infinite loop" in case[0]) for case in ADVERSARIAL]
)
def test_adversarial_completion_fails(
    verdicts: dict[str, Verdict], name: str, expect_timeout: bool
) -> None:
    verdict = verdicts[name]
    assert not verdict.passed, verdict
    assert verdict.timed_out is expect_timeout, verdict  # every other attack is caught at once


@pytest.mark.parametrize("name", [case[0] for case in CORRECT])
def test_correct_completion_passes(verdicts: dict[str, Verdict], name: str) -> None:
    verdict = verdicts[name]
    assert verdict.passed and verdict.reason == "passed" and not verdict.timed_out, verdict


def test_failure_reasons_say_what_happened(verdicts: dict[str, Verdict]) -> None:
    assert "AssertionError" in verdicts["a wrong answer"].reason
    assert (
        "assert abs(candidate(2, 3) - 5) < 1e-9" in verdicts["a wrong answer"].judge_output
    )  # for maintainers
    assert "closed its end before answering" in verdicts["function calls os._exit"].reason
    assert "raised SystemExit" in verdicts["sys.exit in the body"].reason
    assert "failed to load: SystemExit" in verdicts["sys.exit after the function"].reason
    assert "'generator'" in verdicts["returns a generator"].reason
    assert "nested deeper" in verdicts["returns a self-containing list"].reason
    assert "more than the" in verdicts["answer over the size limit"].reason
    assert "not an answer to this call" in verdicts["answer written ahead with a guessed id"].reason
    assert "CandidateError: SystemExit: 0" in verdicts["homemade exception named SystemExit"].reason
    assert "defines no function 'add'" in verdicts["no function at all"].reason
    assert (
        "CandidateError: StopIteration"
        in verdicts["StopIteration ends the test's map early"].reason
    )
    printed = verdicts["prints to stdout and stderr"].output.splitlines()
    assert printed.count("pass 2 3") == 1 and printed.count("T") == 4, printed


def test_candidate_sees_neither_the_judge_nor_its_files(judge: FunctionJudge) -> None:
    peek = (
        f"    import glob, os\n    print(sorted(p for p in os.listdir('/proc') if p.isdigit()))\n"
        f"    print(glob.glob({str(judge.root)!r} + '/**', recursive=True))\n    return x + y\n"
    )
    verdict = judge.judge(ADD, PROTOCOL.build_solution(ADD.prompt, peek, "add"))
    assert verdict.passed, verdict
    assert set(verdict.output.splitlines()) == {"['1']", f"['{judge.root}/']"}, verdict.output


def test_both_processes_are_gone_after_the_verdict(judge: FunctionJudge) -> None:
    marker = f"lingering-{uuid.uuid4().hex}"
    body = (
        "    import os\n    if os.fork() == 0:\n        os.setsid()\n        "
        f"os.execv('/bin/sleep', [{marker!r}, '300'])\n"
        "    return x + y\n"
    )
    verdict = judge.judge(ADD, PROTOCOL.build_solution(ADD.prompt, body, "add"))
    assert verdict.passed, verdict
    assert processes_mentioning(marker) == []
    assert (
        list(judge.root.iterdir()) == []
    )  # the judge's program (the tests) and output are removed


def test_one_timeout_for_the_whole_problem(judge: FunctionJudge) -> None:
    """Each call is quick, but together they run past timeout_s."""
    slow = "    import time\n    time.sleep(1.5)\n    return x + y\n"  # 4 calls x 1.5 s > 5 s
    verdict = judge.judge(ADD, PROTOCOL.build_solution(ADD.prompt, slow, "add"))
    assert not verdict.passed and verdict.timed_out and verdict.elapsed_s < 10, verdict


def test_check_raises_when_the_judge_cannot_run(tmp_path: Path) -> None:
    broken = FunctionJudge(Sandbox(SandboxLimits(timeout_s=30), python=str(tmp_path / "no-python")))
    with pytest.raises(SandboxError, match="cannot run a trivial program"):
        broken.check()
    broken.close()
    assert not broken.root.exists()


# ---- the plain-data codec between the two processes
# ------------------------------------------------------


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


class RecordingEngine:
    """Records the conversations and answers with ``replies[i]`` (or the canonical solution)."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.calls: list[tuple[list[list[dict[str, str]]], int]] = []

    def generate_chat(
        self,
        conversations: list[list[dict[str, str]]],
        *,
        max_new_tokens: int,
        stop: list[str] | None = None,
    ) -> list[str]:
        self.calls.append((conversations, max_new_tokens))
        return self.replies[: len(conversations)]

    def generate_text(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str] | None = None
    ) -> list[str]:
        raise AssertionError("humaneval must use the chat interface")


@pytest.fixture(scope="module")
def private_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("humaneval")
    return build_task_data(
        SPEC, "fixture", root, options={"train_size": 20, "eval_size": 8}
    ).private_dir


def _items(private_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (private_dir / "eval.jsonl").read_text().splitlines()]


def test_prompt_is_exact_and_batched(private_dir: Path) -> None:
    items = _items(private_dir)
    replies = [
        item["answer"] if i % 2 == 0 else "    return None\n" for i, item in enumerate(items)
    ]
    engine = RecordingEngine(replies)
    result = EVAL.evaluate(
        engine, EvalContext.for_task(SPEC, "hub", private_dir)
    )  # the reference's 512 tokens
    assert len(engine.calls) == 1
    conversations, max_new_tokens = engine.calls[0]
    assert max_new_tokens == eval_options(SPEC, "hub")["max_new_tokens"] == 512
    assert conversations == [
        [{"role": "user", "content": INSTRUCTION + item["question"]}] for item in items
    ]
    assert result.num_examples == 8 and result.details["passed"] == 4 and result.score == 50.0
    assert result.details["sandbox_mode"] == "namespaces"
    assert (
        result.details["samples"][0]["passed"] is True
        and result.details["samples"][1]["passed"] is False
    )
    shown = json.dumps(result.details)  # what the agent gets back from the grading API
    for item in items:
        assert json.dumps(item["question"])[1:-1] not in shown and "assert candidate" not in shown


def test_hostile_completions_score_0_and_harm_nothing(
    private_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each completion would pass if the sandbox let it do what it tries; none may."""
    items = _items(private_dir)[:6]
    fake_home = tmp_path / "home"
    fake_home.mkdir()
    (fake_home / "canary").write_text("alive")
    monkeypatch.setenv("HOME", str(fake_home))
    real_canary = (
        Path(pwd.getpwuid(os.getuid()).pw_dir) / f".autorl-humaneval-canary-{uuid.uuid4().hex[:8]}"
    )
    real_canary.write_text("alive")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    hostile = [
        "    while True:\n        pass\n",
        "    import os\n    while True:\n        try:\n            os.fork()\n"
        "        except OSError:\n            pass\n",
        f"    import os\n    os.system('rm -rf ~')\n    os.remove({str(real_canary)!r})\n",
        f"    import socket\n    socket.create_connection(('127.0.0.1', {port}), "
        "timeout=5).close()\n",
        "    while True:\n        print('x' * 65536)\n",
        # peek at the hidden tests
        f"    assert 'check' in open({str(private_dir / 'eval.jsonl')!r}).read()\n",
    ]
    # Append each problem's own solution: the completion passes unless its attack is stopped.
    replies = [attack + item["answer"] for attack, item in zip(hostile, items, strict=True)]
    try:
        result = EVAL.evaluate(
            RecordingEngine(replies),
            EvalContext.for_task(
                SPEC,
                "fixture",
                private_dir,
                {"limit": 6, "timeout_s": 3, "workers": 2, "max_processes": 16},
            ),
        )
        assert result.score == 0.0 and result.details["passed"] == 0 and result.num_examples == 6
        assert result.details["timed_out"] == 2  # the loop and the fork bomb; the others fail fast
        assert real_canary.read_text() == "alive" and (fake_home / "canary").read_text() == "alive"
        with pytest.raises(OSError):
            listener.accept()
    finally:
        real_canary.unlink(missing_ok=True)
        listener.close()
    # The grader is unharmed: the same evaluator still scores correct answers.
    again = EVAL.evaluate(
        RecordingEngine([item["answer"] for item in items]),
        EvalContext.for_task(SPEC, "fixture", private_dir, {"limit": 5}),
    )
    assert again.score == 100.0


def test_programs_find_no_answers_on_the_graders_disk(private_dir: Path) -> None:
    """Besides the private split: every cached build of the task (other versions too) and the task's
    folder (fixture.py generates every answer) look empty to the judged programs."""
    items = _items(private_dir)[:2]
    task_dir, cache_dir = Path(EVAL.__file__).resolve().parent, private_dir.resolve().parents[2]
    (cache_dir / "v1").mkdir(exist_ok=True)  # an older version's build of the same problems
    assert {"fixture.py", "evaluate.py"} <= set(os.listdir(task_dir)) and "v1" in os.listdir(
        cache_dir
    )
    peek = (
        f"    import os\n    assert os.listdir({str(task_dir)!r}) == "
        f"os.listdir({str(cache_dir)!r}) == []\n"
    )
    result = EVAL.evaluate(
        RecordingEngine([peek + item["answer"] for item in items]),
        EvalContext.for_task(SPEC, "fixture", private_dir, {"limit": 2}),
    )
    assert result.score == 100.0, result.details


def test_no_eval_items_is_a_task_error(tmp_path: Path) -> None:
    (tmp_path / "eval.jsonl").write_text("")
    with pytest.raises(TaskError, match="no eval items"):
        EVAL.evaluate(RecordingEngine([]), EvalContext.for_task(SPEC, "fixture", tmp_path))


def test_recipe_reward_uses_the_evaluators_protocol(private_dir: Path) -> None:
    """The recipe trains on the evaluator's user turn, and its reward passes what the evaluator
    passes."""
    item = _items(private_dir)[0]
    assert PROTOCOL.format_prompt(item["question"]) == INSTRUCTION + item["question"]
    assert EVAL.build_conversation(item["question"]) == [
        {"role": "user", "content": INSTRUCTION + item["question"]}
    ]
    completions = [
        item["answer"],
        "    return None\n",
        f"```python\n{item['question']}{item['answer']}```",
        "    import os\n    os._exit(0)\n",
        f"{item['answer']}\nimport sys\nsys.exit(0)\n",
    ]
    n = len(completions)
    reward = RECIPE.PassesTests()(
        completions,
        question=[item["question"]] * n,
        test=[item["test"]] * n,
        entry_point=[item["entry_point"]] * n,
    )
    assert reward == [1.0, 0.0, 1.0, 0.0, 0.0]


def test_every_fixture_solution_passes_its_tests_and_tests_catch_a_wrong_one() -> None:
    problems = FIXTURE.fixture_problems()
    assert (
        len(problems)
        == len({p["entry_point"] for p in problems})
        == len({p["test"] for p in problems})
        > 400
    )
    for problem in problems:
        good = (
            problem["question"]
            + problem["answer"]
            + problem["test"]
            + f"\ncheck({problem['entry_point']})\n"
        )
        assert _exec_passes(good), problem["entry_point"]
        wrong = (
            problem["question"]
            + "    return None\n"
            + problem["test"]
            + f"\ncheck({problem['entry_point']})\n"
        )
        assert not _exec_passes(wrong), problem["entry_point"]


def test_fixture_split_is_disjoint_and_seeded(tmp_path: Path) -> None:
    data = build_task_data(SPEC, "fixture", tmp_path, seed=1)
    train = [
        json.loads(line) for line in (data.public_dir / "train.jsonl").read_text().splitlines()
    ]
    evals = [
        json.loads(line) for line in (data.private_dir / "eval.jsonl").read_text().splitlines()
    ]
    defaults = build_options(SPEC, "fixture")  # tasks/humaneval/options.py: 240 / 40
    assert (len(train), len(evals)) == (defaults["train_size"], defaults["eval_size"]) == (240, 40)
    assert not {r["entry_point"] for r in train} & {r["entry_point"] for r in evals}
    assert (
        set(train[0]) == set(evals[0]) == {"question", "answer", "task_id", "entry_point", "test"}
    )
    assert build_task_data(SPEC, "fixture", tmp_path, seed=2).digest != data.digest
    with pytest.raises(TaskError, match="434 problems"):
        build_task_data(SPEC, "fixture", tmp_path, options={"train_size": 430, "eval_size": 40})


def _write_hub(root: Path, rows: list[dict[str, str]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "openai_humaneval").mkdir(parents=True)
    (root / "README.md").write_text(HUB_README, encoding="utf-8")
    table = pa.table(
        {
            key: [r[key] for r in rows]
            for key in ("task_id", "prompt", "canonical_solution", "test", "entry_point")
        }
    )
    pq.write_table(table, root / "openai_humaneval" / "test-00000-of-00001.parquet")


def test_hub_build_from_local_standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    rows = [
        {
            "task_id": f"HumanEval/{i}",
            "prompt": f'def f{i}(x):\n    """Return x + {i}."""\n',
            "canonical_solution": f"    return x + {i}\n",
            "test": f"\n\ndef check(c):\n    assert c(0) == {i}\n",
            "entry_point": f"f{i}",
        }
        for i in range(6)
    ]
    _write_hub(tmp_path / "hub", rows)

    data = build_task_data(
        SPEC, "hub", tmp_path / "cache", options={"hub_path": str(tmp_path / "hub"), "split_at": 4}
    )

    read = lambda p: [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines()]  # noqa: E731
    expected = [
        {
            "question": r["prompt"],
            "answer": r["canonical_solution"],
            "task_id": r["task_id"],
            "entry_point": r["entry_point"],
            "test": r["test"],
        }
        for r in rows
    ]
    assert data.source == "hub"
    assert read(data.public_dir / "train.jsonl") == expected[:4]
    assert read(data.private_dir / "eval.jsonl") == expected[4:]
    with pytest.raises(TaskError, match="need more than split_at=82"):
        build_task_data(
            SPEC, "hub", tmp_path / "cache", options={"hub_path": str(tmp_path / "hub")}
        )


def test_hub_failure_raises_and_never_falls_back(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="hub"):
        build_task_data(SPEC, "hub", tmp_path / "cache", options={"hub_path": str(tmp_path)})
    assert not list((tmp_path / "cache" / "humaneval" / f"v{SPEC.version}").glob("fixture-*"))


def test_rlimit_mode_judges_the_same(tmp_path: Path) -> None:
    """Without namespaces (as root the programs run as uid nobody) the verdicts do not change."""
    python = (
        "/usr/bin/python3" if os.geteuid() == 0 else sys.executable
    )  # nobody must be able to run it
    with FunctionJudge(
        Sandbox(SandboxLimits(timeout_s=20, cpu_s=20), mode="rlimits", python=python)
    ) as judge:
        judge.check()
        cases = [
            ("    return x + y\n", True),
            ("    import os\n    os._exit(0)\n", False),
            (f"    class Same:\n{_ALWAYS_EQUAL}    return Same()\n", False),
            (
                f"    import os\n    print(os.listdir({str(judge.root)!r}))\n    return x + y\n",
                os.geteuid() != 0,
            ),
        ]
        verdicts = judge.judge_many(
            [(ADD, PROTOCOL.build_solution(ADD.prompt, c, "add")) for c, _ in cases], workers=2
        )
    assert [v.passed for v in verdicts] == [passes for _, passes in cases], verdicts
    if os.geteuid() == 0:  # the judges' directory is root's, 0711: nobody cannot list it
        assert "PermissionError" in verdicts[3].reason
