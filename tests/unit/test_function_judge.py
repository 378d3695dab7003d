"""The function judge: adversarial completions fail, fair ones pass; the candidate runs in a
sandbox of its own, sees neither the judge nor its files, and leaves no process behind."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_kit.function_judge import FunctionJudge, Problem, Verdict
from agent_kit.sandbox import Sandbox, SandboxError, SandboxLimits
from tests.helpers.humaneval_task import PROTOCOL
from tests.helpers.procs import processes_mentioning

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
    # The frame written ahead is refused by its id when the judge reads it; in one CI run (two
    # busy cores) it was not read at all and the candidate's real answer, 0, was judged instead.
    # Either way the forged answer never counts (test_adversarial_completion_fails).
    ahead = verdicts["answer written ahead with a guessed id"].reason
    assert "not an answer to this call" in ahead or ahead.startswith("AssertionError"), ahead
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
