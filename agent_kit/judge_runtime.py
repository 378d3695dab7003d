"""What runs inside the two sandboxed processes of :mod:`agent_kit.function_judge`.

This file's source is the start of both programs (it imports only the standard library and is run
with ``python -I -S``); each program then calls one of its two entry points:

- :func:`serve` in the **candidate** process: executes the candidate's solution (prompt + code) as a
  module, then answers calls of its entry point read from one pipe, writing each answer to another.
- :func:`judge` in the **judge** process, where no candidate code ever runs: executes the problem's
  original prompt and its test code, then runs ``check(candidate)`` where ``candidate`` forwards
  each call to the candidate process. It reports to the grader on a third pipe and by its exit
  status.

Values cross the process boundary as plain data only: a type-tagged encoding (:func:`encode`) of
``None``, ``bool``, ``int``, ``float`` (nan and inf included), ``complex``, ``str``, ``bytes``,
``list``, ``tuple``, ``dict``, ``set`` and ``frozenset``, in length-prefixed frames on the pipes.
An instance of a subclass of one of these (a ``Counter``, a ``namedtuple``, an ``int`` subclass
with a forged ``__eq__``) crosses as the plain value its base type stores, read with the base
type's own methods, so no method of the candidate's ever runs in the judge. Anything else (a
generator, an object of the candidate's own class) cannot be sent, and the problem fails.

Everything the candidate process sends is untrusted: the judge decodes it strictly (:func:`decode`
builds nothing but those plain types) and fails the problem on anything but a well-formed answer to
the call it made (matched by a random call id). An exception the candidate raises comes back as its
class name and message; the judge raises the builtin exception of that name (a test may expect
``ValueError``), else (and for ``StopIteration``, which would end the test's iteration early)
:class:`CandidateError`.

At run time the module imports only ``builtins``, ``os`` and ``sys``: the encoding is its own rather
than JSON, because importing ``json`` (which brings ``re`` and ``enum``) and ``typing`` would add
their start-up to each of the two processes of every problem.
"""

from __future__ import annotations

import builtins
import os
import sys

# Typing is not imported at run time (its import costs every process milliseconds).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, BinaryIO, NoReturn

MAX_DEPTH = 100  # nesting of a value that may cross (a self-containing list is caught by this)
MAX_MESSAGE_CHARS = 2000  # an exception message is cut to this
_MAX_HEADER = 20  # digits of a frame's length, and its newline


class Unsendable(TypeError):
    """A value that cannot cross as plain data; the message says what it is."""


class CandidateError(Exception):
    """The candidate raised an exception that is not a builtin one (its class name and message)."""


class JudgeAbort(BaseException):
    """The candidate broke the protocol (exited, sent something malformed or not plain): the problem
    fails.

    A ``BaseException``, so that a test's ``except Exception`` does not swallow it; :func:`judge`
    also remembers it, so that not even a bare ``except:`` does.
    """


# ---- the plain-data codec ------------------------------------------------------------------------
#
# A value is ``n`` (None), ``T`` or ``F`` (bools), a scalar ``<tag><byte length>:<body>`` (``i`` int
# in hex, ``f`` float.hex, ``c`` two float.hex joined by a comma, ``s`` UTF-8 str, ``y`` bytes), or
# a container ``<tag><item count>:<items>`` (``l`` list, ``t`` tuple, ``e`` set, ``z`` frozenset,
# ``d`` dict: its keys and values alternate). Lengths make escaping needless; nothing is evaluated.


def _complex_body(value: complex) -> bytes:
    number = complex.__complex__(value)
    return f"{number.real.hex()},{number.imag.hex()}".encode("ascii")


# Each reads the value its base type stores, with the base type's own methods: a subclass's
# overrides never run.
_SCALARS: dict[type, tuple[bytes, Callable[[Any], bytes]]] = {
    int: (
        b"i",
        lambda v: format(int.__int__(v), "x").encode("ascii"),
    ),  # hex: no digit limit, unlike str(int)
    float: (
        b"f",
        lambda v: float.hex(float.__float__(v)).encode("ascii"),
    ),  # exact; nan, inf, -0.0 survive
    complex: (b"c", _complex_body),
    str: (b"s", lambda v: str.__str__(v).encode("utf-8", "surrogatepass")),
    bytes: (b"y", lambda v: bytes.__bytes__(v)),
}
_ITEMS: dict[type, tuple[bytes, Callable[[Any], Any]]] = {
    list: (b"l", list.__iter__),
    tuple: (b"t", tuple.__iter__),
    set: (b"e", set.__iter__),
    frozenset: (b"z", frozenset.__iter__),
}
_BUILD: dict[bytes, Callable[[list[Any]], Any]] = {
    b"l": list,
    b"t": tuple,
    b"e": set,
    b"z": frozenset,
}
_PLAIN = (bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)


def _base(value: Any) -> type | None:
    """The plain type ``value`` is (or derives from); ``type()`` cannot be faked like ``__class__``
    can.
    """
    for kind in type(value).__mro__:
        if kind in _PLAIN:
            return kind
    return None


def encode(value: Any) -> bytes:
    """``value`` as plain data (see the format above).

    Raises:
        Unsendable: ``value`` holds something that is not plain data, or nests deeper than
            ``MAX_DEPTH``.

    >>> encode([1, (2.5, None), {"a": {True}}])
    b'l3:i1:1t2:f20:0x1.4000000000000p+1nd1:s1:ae1:T'
    """
    out: list[bytes] = []
    _encode(value, 0, out)
    return b"".join(out)


def _encode(value: Any, depth: int, out: list[bytes]) -> None:
    if depth > MAX_DEPTH:
        raise Unsendable(f"a value nested deeper than {MAX_DEPTH} levels")
    kind = _base(value)
    if value is None:
        out.append(b"n")
    elif kind is bool:
        out.append(b"T" if value is True else b"F")
    elif kind in _SCALARS:
        tag, read = _SCALARS[kind]
        body = read(value)
        out.append(b"%s%d:%s" % (tag, len(body), body))
    elif kind is dict:
        pairs = list(dict.items(value))
        out.append(b"d%d:" % len(pairs))
        for key, item in pairs:
            _encode(key, depth + 1, out)
            _encode(item, depth + 1, out)
    elif kind in _ITEMS:
        tag, iterate = _ITEMS[kind]
        items = list(iterate(value))
        out.append(b"%s%d:" % (tag, len(items)))
        for item in items:
            _encode(item, depth + 1, out)
    else:
        raise Unsendable(
            f"an object of type {type(value).__name__!r} (only None, bool, int, float, complex, "
            "str, bytes, list, tuple, dict, set and frozenset can be sent)"
        )


def decode(data: bytes) -> Any:
    """The value :func:`encode` gave ``data`` for, built from plain types only.

    Raises:
        ValueError: ``data`` is malformed, cut off, has bytes left over or nests deeper than
            ``MAX_DEPTH``.
        TypeError: a set item or a dict key is unhashable (a list, say).

    >>> decode(encode({1: [float("inf"), b"x", frozenset({-3})], "s": (1j, False)}))
    {1: [inf, b'x', frozenset({-3})], 's': (1j, False)}
    """
    value, end = _decode(bytes(data), 0, 0)
    if end != len(data):
        raise ValueError(f"{len(data) - end} bytes left over after the value")
    return value


def _decode(data: bytes, at: int, depth: int) -> tuple[Any, int]:
    """The value starting at byte ``at``, and where it ends."""
    if depth > MAX_DEPTH:
        raise ValueError(f"a value nested deeper than {MAX_DEPTH} levels")
    tag = data[at : at + 1]
    if tag in (b"n", b"T", b"F"):
        return {b"n": None, b"T": True, b"F": False}[tag], at + 1
    colon = data.find(b":", at + 1, at + _MAX_HEADER)
    if not tag or colon < 0 or not data[at + 1 : colon].isdigit():
        raise ValueError(f"malformed value at byte {at}")
    size, at = int(data[at + 1 : colon]), colon + 1
    if tag in _BUILD or tag == b"d":
        count = 2 * size if tag == b"d" else size
        if count > len(data) - at:  # each item takes at least one byte
            raise ValueError(f"{count} items announced, fewer bytes left")
        items = []
        for _ in range(count):
            item, at = _decode(data, at, depth + 1)
            items.append(item)
        return (
            dict(zip(items[::2], items[1::2], strict=True)) if tag == b"d" else _BUILD[tag](items)
        ), at
    body, end = data[at : at + size], at + size
    if end > len(data):
        raise ValueError("a value is cut off")
    if tag == b"i":
        return int(body.decode("ascii"), 16), end
    if tag == b"f":
        return float.fromhex(body.decode("ascii")), end
    if tag == b"c":
        real, _, imag = body.decode("ascii").partition(",")
        return complex(float.fromhex(real), float.fromhex(imag)), end
    if tag == b"s":
        return body.decode("utf-8", "surrogatepass"), end
    if tag == b"y":
        return body, end
    raise ValueError(f"unknown tag {tag!r} at byte {at}")


def send(stream: BinaryIO, message: bytes) -> None:
    """Write one frame: the message's length in decimal, a newline, the message."""
    stream.write(b"%d\n%s" % (len(message), message))
    stream.flush()


def receive(stream: BinaryIO, limit: int) -> bytes | None:
    """Read one frame's message; ``None`` at the end of the stream.

    Raises:
        ValueError: a malformed header, a message over ``limit`` bytes, or one cut off by the end of
            the stream.
    """
    header = stream.readline(_MAX_HEADER)
    if not header:
        return None
    if not header.endswith(b"\n") or not header[:-1].isdigit():
        raise ValueError("malformed frame header")
    size = int(header)
    if size > limit:
        raise ValueError(f"a message of {size} bytes, more than the {limit} allowed")
    message = stream.read(size)
    if len(message) != size:
        raise ValueError("a message cut off by the end of the stream")
    return message


def _describe(error: BaseException) -> str:
    """``str(error)``, cut to ``MAX_MESSAGE_CHARS``; a ``__str__`` that fails gives a
    placeholder.
    """
    try:
        text = str(error)
    except Exception:  # noqa: BLE001 - the candidate's exception may define any __str__
        text = "<the exception's message could not be read>"
    return text if type(text) is str else "<not a string>"


# ---- the candidate process -----------------------------------------------------------------------


def serve(solution: str, entry_point: str, request_fd: int, answer_fd: int) -> None:
    """Run the candidate's ``solution``, then answer each call request until the judge closes the
    pipe.

    A request is ``(call id, args tuple, kwargs dict)``; an answer ``(call id, "value", value)``,
    ``(call id, "raised", (class name, message))`` or ``(call id, "abort", reason)`` (no such
    function, a value that cannot be sent, or a ``BaseException`` such as ``SystemExit``). The
    solution's prints go to this process's stdout, never to the pipes.
    """
    requests, answers = os.fdopen(request_fd, "rb"), os.fdopen(answer_fd, "wb")
    module = type(sys)(
        "solution"
    )  # not __main__: like human-eval, a main block in the code does not run
    sys.modules["solution"] = module
    function: Callable[..., Any] | None = None
    problem = ""
    try:
        exec(compile(solution, "<solution>", "exec"), module.__dict__)  # noqa: S102 - sandboxed untrusted code
        function = module.__dict__.get(entry_point)
        if not callable(function):
            function, problem = None, f"the solution defines no function {entry_point!r}"
    except BaseException as error:  # noqa: BLE001 - SystemExit too: loading must not end the process unseen
        _print_traceback()
        problem = f"the solution failed to load: {type(error).__name__}: {_describe(error)}"[
            :MAX_MESSAGE_CHARS
        ]
    while (message := receive(requests, 1 << 40)) is not None:  # the judge's requests: trusted
        call_id, args, kwargs = decode(message)
        answer: tuple[str, str, Any] = (call_id, "abort", problem)
        if function is not None:
            try:
                value = function(*args, **kwargs)
            except Exception as error:  # noqa: BLE001 - the judge re-raises it on its side
                answer = (
                    call_id,
                    "raised",
                    (type(error).__name__, _describe(error)[:MAX_MESSAGE_CHARS]),
                )
            except BaseException as error:  # noqa: BLE001 - SystemExit, KeyboardInterrupt, GeneratorExit
                answer = (
                    call_id,
                    "abort",
                    f"the function raised {type(error).__name__} instead of returning",
                )
            else:
                answer = (call_id, "value", value)
        try:
            encoded = encode(answer)
        except Exception as error:  # noqa: BLE001 - Unsendable, or a container changed while it was read
            encoded = encode(
                (call_id, "abort", f"the function returned {_describe(error)}"[:MAX_MESSAGE_CHARS])
            )
        sys.stdout.flush()
        send(answers, encoded)


# ---- the judge process ---------------------------------------------------------------------------


class _Calls:
    """The judge's end of the pipes: sends a call, reads and checks its answer."""

    def __init__(self, request_fd: int, answer_fd: int, max_message_bytes: int) -> None:
        self.requests: BinaryIO = os.fdopen(request_fd, "wb")
        self.answers: BinaryIO = os.fdopen(answer_fd, "rb")
        self.max_message_bytes = max_message_bytes
        self.aborted = ""

    def abort(self, reason: str) -> NoReturn:
        """Fail the problem for good (see :class:`JudgeAbort`)."""
        self.aborted = self.aborted or reason
        raise JudgeAbort(reason)

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call the candidate's function with copies of ``args`` and ``kwargs``; its plain
        answer.
        """
        if self.aborted:
            raise JudgeAbort(self.aborted)
        call_id = os.urandom(
            16
        ).hex()  # unguessable: an answer written ahead of the call cannot match
        try:
            request = encode((call_id, args, kwargs))
        except Unsendable as error:
            self.abort(
                f"the test passes {error} to the candidate, which cannot cross to its process"
            )
        try:
            send(self.requests, request)
            message = receive(self.answers, self.max_message_bytes)
        except OSError as error:
            self.abort(f"the candidate process is gone ({error})")
        except ValueError as error:
            self.abort(f"malformed answer from the candidate: {error}")
        if message is None:
            self.abort(
                "the candidate process closed its end before answering (it exited or was killed)"
            )
        try:
            answer = decode(message)
        except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as error:
            self.abort(f"malformed answer from the candidate: {error}")
        if not (
            type(answer) is tuple
            and len(answer) == 3
            and answer[0] == call_id
            and type(answer[1]) is str
        ):
            self.abort("the candidate's answer is not an answer to this call")
        _, kind, content = answer
        if kind == "value":
            return content
        if kind == "abort":
            self.abort(str(content)[:MAX_MESSAGE_CHARS])
        if not (
            kind == "raised"
            and type(content) is tuple
            and len(content) == 2
            and all(type(part) is str for part in content)
        ):
            self.abort("malformed answer from the candidate")
        name, text = content
        error_type = getattr(builtins, name, None) if name.isidentifier() else None
        generic = CandidateError(f"{name}: {text}"[:MAX_MESSAGE_CHARS])
        # Not StopIteration: raised in the test's `all(map(candidate, cases))` it would end the map
        # early and make the all() vacuously true.
        if (
            isinstance(error_type, type)
            and issubclass(error_type, Exception)
            and not issubclass(error_type, (StopIteration, StopAsyncIteration))
        ):
            try:
                same = error_type(text[:MAX_MESSAGE_CHARS])
            except Exception:  # noqa: BLE001 - builtins such as UnicodeDecodeError take other arguments
                raise generic from None
            raise same
        raise generic


def _print_traceback(sources: dict[str, str] | None = None) -> None:
    """Print the current exception's traceback to stderr, showing the lines of ``sources`` (name:
    source).

    traceback is imported only here: it costs every process a few milliseconds at start.
    """
    import linecache
    import traceback

    for name, source in (sources or {}).items():
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    traceback.print_exc()


def _fail(status: Any, reason: str) -> NoReturn:
    """Report ``fail <reason>`` (one line) and exit 1."""
    status.write("fail " + " ".join(reason.split())[:MAX_MESSAGE_CHARS] + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def judge(payload: dict[str, Any], request_fd: int, answer_fd: int, status_fd: int) -> NoReturn:
    """Run ``check(candidate)`` of the problem in ``payload``; report on ``status_fd`` and by the
    exit status.

    ``payload``: ``prompt`` (the problem's original prompt, which provides the helpers and imports
    the tests use), ``test`` (defines ``check``), ``entry_point``, ``token`` (the grader's secret
    for the final line) and ``max_message_bytes``. Status lines: ``ready`` once this process can
    no longer be read by others and its program file is gone (the grader starts the candidate only
    then), then ``pass <token>`` (exit 0) or ``fail <reason>`` (exit 1).
    """
    import ctypes  # here, not at the top: the candidate process does not need it

    # Not dumpable: a process of the same uid cannot read this one's memory or open its files
    # through /proc (where the candidate sees another /proc than its own, e.g. nested sandboxes).
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    os.unlink(sys.argv[0])  # this program holds the hidden tests
    status = os.fdopen(status_fd, "w", buffering=1)
    status.write("ready\n")
    calls = _Calls(request_fd, answer_fd, int(payload["max_message_bytes"]))
    try:
        namespace: dict[str, Any] = {"__name__": "judged"}
        exec(compile(payload["prompt"], "<prompt>", "exec"), namespace)  # noqa: S102 - the problem's own prompt
        exec(compile(payload["test"], "<test>", "exec"), namespace)  # noqa: S102 - and its tests

        def candidate(*args: Any, **kwargs: Any) -> Any:
            return calls.call(args, kwargs)

        candidate.__name__ = candidate.__qualname__ = payload["entry_point"]
        # A test naming the function calls the candidate too.
        namespace[payload["entry_point"]] = candidate
        namespace["check"](candidate)
    except BaseException as error:  # noqa: BLE001 - whatever stops the tests fails the problem
        _print_traceback({"<prompt>": payload["prompt"], "<test>": payload["test"]})
        _fail(status, calls.aborted or f"{type(error).__name__}: {_describe(error)}")
    if calls.aborted:  # the tests swallowed the abort with a bare except
        _fail(status, calls.aborted)
    status.write(f"pass {payload['token']}\n")
    sys.stdout.flush()
    os._exit(0)
