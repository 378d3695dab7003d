"""Judge a candidate's function by a problem's tests, run where no candidate code can reach them.

One problem is judged by two programs in :mod:`agent_kit.sandbox`, each in its own sandbox (in
namespace mode: its own user, mount, network and PID namespaces), joined only by two pipes:

- the **candidate** process runs the candidate's solution (the problem's prompt and the candidate's
  code) and answers calls of the entry point (:func:`agent_kit.judge_runtime.serve`);
- the **judge** process runs only trusted code: the problem's original prompt (so the helpers and
  imports the tests use are the prompt's, never the candidate's), the problem's tests, and
  ``check(candidate)``, where each call of ``candidate`` crosses to the candidate process as plain
  data and its answer comes back as plain data (:func:`agent_kit.judge_runtime.judge`).

The problem passes only when the judge ran ``check`` to its end: its exit status is 0 **and** its
last line on a pipe of its own (never the candidate's output) is ``pass <token>``, with a token
only the grader and the judge know. Any exit, signal, malformed or missing answer of the candidate,
or the timeout (one wall-clock limit, ``timeout_s``, for the whole problem; both processes are
killed after it) fails the problem. The judge's directories are hidden from every candidate (an
empty tmpfs over them), and the candidate's PID namespace shows none of the judge's processes.
Nested in another sandbox, where a run cannot mount a /proc of its own, the candidate gets an
empty /proc rather than the enclosing one. And the candidate is started only once the judge has
deleted its program file (which holds the tests) and made itself undumpable, so that no /proc
gives either away. In rlimit mode (no namespaces) as a user other than root the
candidate runs as the grader's own uid, so nothing keeps it from the judge (the sandbox logs
that mode as unisolated).
"""

from __future__ import annotations

import os
import secrets
import select
import shutil
import tempfile
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from agent_kit import judge_runtime
from agent_kit.sandbox import Sandbox, SandboxError, SandboxRun, fresh_proc_allowed

# Both programs start with this source (stdlib only), then call one of its entry points.
RUNTIME_SOURCE = Path(judge_runtime.__file__).read_text(encoding="utf-8")
_MAX_STATUS_BYTES = 64 << 10


@dataclass(frozen=True)
class Problem:
    """What the judge needs of one problem (all of it trusted: it never comes from the candidate).

    Attributes:
        prompt: The problem's original prompt: imports, helpers and the entry point's signature and
            docstring.
        test: Code defining ``check(candidate)``, which calls the function and asserts on its
            results.
        entry_point: The name of the function under test.
    """

    prompt: str
    test: str
    entry_point: str


@dataclass(frozen=True)
class Verdict:
    """How one problem went.

    Attributes:
        passed: The judge ran ``check`` to its end (see the module docstring).
        timed_out: The problem ran out of its wall-clock time.
        reason: Why it failed (``"passed"`` when it did not), e.g. the assertion or the candidate's
            exit.
        output: The candidate's stdout and stderr (capped like any sandboxed run's).
        judge_output: The judge's stdout and stderr: tracebacks that quote the tests; never show it
            to an agent.
        elapsed_s: Wall-clock seconds for the whole problem.
    """

    passed: bool
    timed_out: bool
    reason: str
    output: str
    judge_output: str
    elapsed_s: float


class FunctionJudge:
    """Judges solutions with the processes, limits and isolation mode of one :class:`Sandbox`.

    Use it as a context manager (or call :meth:`close`) to remove its private directory.

    Example:
        >>> test = "def check(c):\\n    assert c(2) == 4\\n"
        >>> problem = Problem("def f(x):\\n    'Twice x.'\\n", test, "f")
        >>> with FunctionJudge(Sandbox()) as judge:  # a solution is the prompt with the code
        ...     [judge.judge(problem, problem.prompt + body).passed
        ...      for body in ("    return 2 * x\\n", "    import os\\n    os._exit(0)\\n")]
        [True, False]
    """

    def __init__(self, sandbox: Sandbox, *, max_message_bytes: int = 8 << 20) -> None:
        """Create the private directory the judge processes run in.

        Args:
            sandbox: Limits (``timeout_s`` is the whole problem's), mode, interpreter and hidden
                directories.
            max_message_bytes: Largest answer (one encoded return value) the judge reads.
        """
        self.sandbox = sandbox
        self.max_message_bytes = max_message_bytes
        # The judges' runs live here, hidden from every candidate (an empty tmpfs over it); 0711
        # lets the rlimit mode's uid nobody reach its own run directory inside without listing the
        # others.
        self.root = Path(tempfile.mkdtemp(prefix="autorl-judge-", dir=sandbox.tmp_root))
        self.root.chmod(0o711)
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.root, True)
        # Nested in another sandbox a run cannot have a /proc of its own and would see the enclosing
        # one (the grader's processes among them): the candidate gets none at all there.
        no_own_proc = sandbox.mode == "namespaces" and not fresh_proc_allowed()
        self._candidate_hidden = (self.root, *([Path("/proc")] if no_own_proc else []))

    def close(self) -> None:
        """Remove the private directory (idempotent)."""
        self._cleanup()

    def __enter__(self) -> FunctionJudge:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def check(self) -> None:
        """Fail loudly unless a trivial correct solution passes (a broken judge must never score 0).

        Raises:
            SandboxError: naming the mode, the reason and both processes' output.
        """
        self.sandbox.check()
        problem = Problem(
            'def double(x):\n    """Twice x."""\n',
            "def check(candidate):\n    assert candidate(2) == 4\n",
            "double",
        )
        verdict = self.judge(problem, problem.prompt + "    return 2 * x\n")
        if not verdict.passed:
            raise SandboxError(
                f"the function judge ({self.sandbox.mode} mode, python {self.sandbox.python}) "
                f"fails a trivial correct solution: {verdict.reason}; judge output "
                f"{verdict.judge_output[-800:]!r}; candidate output {verdict.output[-500:]!r}"
            )

    def judge_many(self, cases: list[tuple[Problem, str]], *, workers: int) -> list[Verdict]:
        """:meth:`judge` each ``(problem, solution)``, ``workers`` at a time; verdicts in input
        order.
        """
        with ThreadPoolExecutor(
            max(1, workers)
        ) as pool:  # threads suffice: the work is in subprocesses
            return list(pool.map(lambda case: self.judge(*case), cases))

    def judge(self, problem: Problem, solution: str) -> Verdict:
        """Run ``problem``'s tests against ``solution``'s ``problem.entry_point``.

        Args:
            problem: The trusted problem.
            solution: The candidate's program: the prompt with the candidate's code (it must define
                the entry point).
        """
        started = time.monotonic()
        deadline = started + self.sandbox.limits.timeout_s
        token = secrets.token_hex(16)
        request_r, request_w = os.pipe()  # judge -> candidate
        answer_r, answer_w = os.pipe()  # candidate -> judge
        status_r, status_w = os.pipe()  # judge -> here
        open_fds = {request_r, request_w, answer_r, answer_w, status_r, status_w}

        def close(*fds: int) -> None:
            for fd in fds:
                if fd in open_fds:
                    open_fds.discard(fd)
                    os.close(fd)

        payload = {
            "prompt": problem.prompt,
            "test": problem.test,
            "entry_point": problem.entry_point,
            "token": token,
            "max_message_bytes": self.max_message_bytes,
        }
        judge_run: SandboxRun | None = None
        candidate_run: SandboxRun | None = None
        try:
            judge_run = self.sandbox.start_python(
                f"{RUNTIME_SOURCE}\njudge({payload!r}, {request_w}, {answer_r}, {status_w})\n",
                pass_fds=(request_w, answer_r, status_w),
                tmp_root=self.root,
            )
            close(request_w, answer_r, status_w)  # the judge's ends: its exit must close them
            status = _StatusReader(status_r, deadline)
            if status.next_line() == "ready":
                candidate_run = self.sandbox.start_python(
                    f"{RUNTIME_SOURCE}\nserve({solution!r}, {problem.entry_point!r}, {request_r}, "
                    f"{answer_w})\n",
                    pass_fds=(request_r, answer_w),
                    hidden=self._candidate_hidden,
                )
            close(request_r, answer_w)  # the candidate's ends: its exit must close them
            lines = status.all_lines()
            returncode = (
                None if status.timed_out else judge_run.wait(max(0.0, deadline - time.monotonic()))
            )
            timed_out = returncode is None
            judged = judge_run.finish(timed_out=timed_out)
        finally:
            close(*list(open_fds))
            if judge_run is not None:
                judge_run.finish(timed_out=True)  # no-op when finished above
            ran = candidate_run.finish() if candidate_run is not None else None
        passed = returncode == 0 and not timed_out and lines[-1:] == [f"pass {token}"]
        if passed:
            reason = "passed"
        elif timed_out:
            reason = f"timed out after {self.sandbox.limits.timeout_s:g} s"
        elif lines[-1:] and lines[-1].startswith("fail "):
            reason = lines[-1][5:]
        elif candidate_run is None:
            reason = f"the judge did not start (exit status {returncode})"
        else:
            reason = f"the judge exited with status {returncode} without a verdict"
        return Verdict(
            passed,
            timed_out,
            reason,
            ran.output if ran is not None else "",
            judged.output,
            time.monotonic() - started,
        )


class _StatusReader:
    """Lines from the judge's status pipe, read until its end or the deadline (then
    ``timed_out``).
    """

    def __init__(self, fd: int, deadline: float) -> None:
        self.fd, self.deadline = fd, deadline
        self.buffer = b""
        self.lines: list[str] = []
        self.eof = self.timed_out = False

    def _read(self) -> bool:
        """Read what is there, waiting until the deadline; ``False`` at the end of the pipe or the
        deadline.
        """
        if self.eof or self.timed_out:
            return False
        left = self.deadline - time.monotonic()
        poller = (
            select.poll()
        )  # not select(): a busy grader's descriptors may be numbered above 1024
        poller.register(self.fd, select.POLLIN)
        if left <= 0 or not poller.poll(left * 1000):
            self.timed_out = True
            return False
        chunk = os.read(self.fd, 4096)
        if not chunk or len(self.buffer) > _MAX_STATUS_BYTES:
            self.eof = True
            return False
        self.buffer += chunk
        *complete, self.buffer = self.buffer.split(b"\n")
        self.lines += [line.decode("utf-8", "replace") for line in complete]
        return True

    def next_line(self) -> str | None:
        """The first line, or ``None`` if the pipe ended or the deadline passed first."""
        while not self.lines and self._read():
            pass
        return self.lines[0] if self.lines else None

    def all_lines(self) -> list[str]:
        """Every line, once the pipe has ended (or the deadline has passed)."""
        while self._read():
            pass
        return self.lines
