"""Chat templates of submissions rendered in a child process, with a time limit and output caps.

A chat template is code the agent wrote (Jinja, in ``tokenizer_config.json`` or
``chat_template.jinja``). Rendered inside the grader it could not be stopped: nested loops run for
hours, a string product fills the node's memory, and the text of an exception it raises holds the
eval prompts it was given. So the grader takes only the template text and the tokenizer's special
tokens from the loaded tokenizer (attribute reads, nothing rendered) and a child process
(:mod:`autorl.engine._render_child`) renders with transformers' own renderer, under a memory
limit; the grader waits at most :attr:`RenderLimits.call_timeout_s` per call and kills it after.
Any failure is a :class:`ChatTemplateFailed`, which makes the submission invalid
(docs/threat-model.md).

The child lives as long as its engine, so an interactive task's many calls pay its start once.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from autorl.errors import AutorlError

logger = logging.getLogger(__name__)

_CHILD = Path(__file__).with_name("_render_child.py")
_CHILD_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR")


class ChatTemplateFailed(AutorlError):
    """The model's chat template could not render the conversations: the submission is invalid.

    ``str()`` carries the detail (the exception text of a raising template, which can hold the
    rendered prompts): for the grader's records and logs, never for the agent.

    Attributes:
        reason: ``raised``, ``timeout``, ``too_big``, ``not_text``, ``missing`` or ``budget``.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(
            f"chat template failed to render ({reason}): {detail}"
            if detail
            else f"chat template failed to render ({reason})"
        )
        self.reason = reason


class ChatRenderUnavailable(AutorlError):
    """The render process could not start or answered nonsense: the grader's failure."""


@dataclass(frozen=True)
class RenderLimits:
    """How long and how much a chat template may render.

    Attributes:
        call_timeout_s: Longest one call (a batch of conversations, e.g. a whole static eval set)
            may render.
        budget_s: Total render time of one tokenizer (one submission) over all its calls.
        max_prompt_bytes: Largest rendered prompt (UTF-8); real prompts are far below it.
        max_total_bytes: Largest sum of the prompts of one call.
        max_template_chars: Longest template text accepted.
        max_memory_bytes: Address-space limit of the child process.
        start_timeout_s: Longest the child may take to start (import the renderer); past it the
            grader fails, not the submission.
    """

    call_timeout_s: float = 60.0
    budget_s: float = 600.0
    max_prompt_bytes: int = 1 << 20
    max_total_bytes: int = 32 << 20
    max_template_chars: int = 1 << 20
    max_memory_bytes: int = 8 << 30
    start_timeout_s: float = 120.0


def template_inputs(tokenizer: Any, limits: RenderLimits) -> tuple[str, dict[str, Any]]:
    """What ``tokenizer.apply_chat_template`` would render with: the template and special tokens.

    Raises:
        ChatTemplateFailed: The tokenizer has no usable template (none, several without a default,
            not text, or longer than ``limits.max_template_chars``).
    """
    try:
        template = tokenizer.get_chat_template(None, None)
    except ValueError as error:  # no template, or named templates without a default
        raise ChatTemplateFailed("missing", str(error)) from error
    if not isinstance(template, str):
        raise ChatTemplateFailed(
            "missing", f"the chat template is a {type(template).__name__}, not text"
        )
    if len(template) > limits.max_template_chars:
        raise ChatTemplateFailed("too_big", f"a template of {len(template)} characters")
    try:
        kwargs = json.loads(json.dumps(dict(tokenizer.special_tokens_map), default=str))
    except (TypeError, ValueError) as error:
        raise ChatTemplateFailed("raised", f"special tokens are not text: {error}") from error
    return template, kwargs


class ChatRenderer:
    """One render child process, started on first use and restarted after a failure.

    Not thread-safe: an engine renders one batch at a time.
    """

    def __init__(self, limits: RenderLimits | None = None) -> None:
        """Start nothing yet; ``limits``: the defaults of :class:`RenderLimits` when None."""
        self.limits = limits or RenderLimits()
        self._proc: subprocess.Popen[bytes] | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._spent = 0.0
        self.starts = 0

    def render(self, tokenizer: Any, conversations: list[list[dict[str, str]]]) -> list[str]:
        """Each conversation as ``tokenizer.apply_chat_template`` renders it for generation.

        Raises:
            ChatTemplateFailed: The template raised, ran past the time limit or the tokenizer's
                render budget, or rendered something too big or not text.
            ChatRenderUnavailable: The child could not be started.
        """
        if not conversations:
            return []
        template, kwargs = template_inputs(tokenizer, self.limits)
        remaining = self.limits.budget_s - self._spent
        if remaining <= 0:
            raise ChatTemplateFailed("budget", f"{self.limits.budget_s:.0f} s of rendering used up")
        timeout = min(self.limits.call_timeout_s, remaining)
        request = {
            "template": template,
            "kwargs": kwargs,
            "conversations": conversations,
            "max_prompt_bytes": self.limits.max_prompt_bytes,
            "max_total_bytes": self.limits.max_total_bytes,
        }
        proc = self._child()
        started = time.monotonic()
        try:
            answer = self._exchange(proc, json.dumps(request).encode() + b"\n", timeout)
        finally:
            self._spent += time.monotonic() - started
        if not answer.get("ok"):
            reason = str(answer.get("reason", "raised"))
            raise ChatTemplateFailed(
                reason if reason in ("raised", "not_text", "too_big") else "raised",
                str(answer.get("detail", "")),
            )
        prompts = answer.get("prompts")
        if (
            not isinstance(prompts, list)
            or len(prompts) != len(conversations)
            or not all(isinstance(p, str) for p in prompts)
        ):
            self.close()
            raise ChatRenderUnavailable(
                "the render process answered without one prompt per conversation"
            )
        return [str(p) for p in prompts]

    def reset_budget(self) -> None:
        """Start a new render budget (:attr:`RenderLimits.budget_s`): another submission's."""
        self._spent = 0.0

    def close(self, *, kill: bool = False) -> None:
        """Stop the child (if any); ``kill``: at once, without letting it end on its own."""
        proc, self._proc = self._proc, None
        if proc is not None:
            _stop(proc, kill=kill)
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def _child(self) -> subprocess.Popen[bytes]:
        """The running child, started (and waited for) when there is none."""
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self.close()
        self._workdir = tempfile.TemporaryDirectory(prefix="autorl-render-")
        # Only what an interpreter needs: the grader's other variables (API keys of a judge, say)
        # have no business beside code the agent wrote, sandboxed or not.
        env = {name: os.environ[name] for name in _CHILD_ENV if name in os.environ}
        env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "0"}
        # -I: no PYTHONPATH, user site or script folder on sys.path: installed packages only.
        command = [sys.executable, "-I", str(_CHILD), str(self.limits.max_memory_bytes)]
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                cwd=self._workdir.name,
                env=env,
                bufsize=0,
            )
        except OSError as error:
            raise ChatRenderUnavailable(
                f"cannot start the chat template process: {error}"
            ) from error
        self._proc = proc
        self.starts += 1
        try:
            hello = _read_line(proc, self.limits.start_timeout_s, 1 << 10)
        except ChatTemplateFailed as failed:
            self.close(kill=True)
            raise ChatRenderUnavailable(
                f"the chat template process did not start ({failed.reason})"
            ) from None
        if hello is None or not hello.get("started"):
            self.close()
            raise ChatRenderUnavailable("the chat template process did not start")
        return proc

    def _exchange(
        self, proc: subprocess.Popen[bytes], request: bytes, timeout: float
    ) -> dict[str, Any]:
        """Send one request and read its answer within ``timeout``; a child that overruns is killed.

        Raises:
            ChatTemplateFailed: ``timeout`` passed, or the answer is over the wire cap.
            ChatRenderUnavailable: The child died without answering.
        """
        assert proc.stdin is not None
        try:
            proc.stdin.write(request)
            proc.stdin.flush()
        except OSError as error:  # BrokenPipeError: the child died
            self.close()
            raise ChatRenderUnavailable(f"the chat template process is gone: {error}") from error
        # JSON's ASCII escapes take at most 12 bytes a character (a surrogate pair), plus framing.
        cap = 12 * self.limits.max_total_bytes + (1 << 20)
        try:
            answer = _read_line(proc, timeout, cap)
        except ChatTemplateFailed:
            self.close(kill=True)  # it may still be rendering: the next call starts a fresh one
            raise
        if answer is None:
            code = proc.poll()
            self.close()
            if code is not None and code < 0:  # killed by a signal (the kernel's OOM killer, say)
                raise ChatTemplateFailed(
                    "raised", f"the render process was killed by signal {-code}"
                )
            raise ChatRenderUnavailable(
                f"the chat template process ended without answering (exit {code})"
            )
        return answer


def _read_line(proc: subprocess.Popen[bytes], timeout: float, cap: int) -> dict[str, Any] | None:
    """One JSON line from ``proc``'s stdout; None when it ends first.

    Raises:
        ChatTemplateFailed: ``timeout`` (``timeout``) or ``cap`` bytes (``too_big``) passed first.
    """
    stdout: IO[bytes] | None = proc.stdout
    assert stdout is not None
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    size = 0
    with selectors.DefaultSelector() as selector:
        selector.register(stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise ChatTemplateFailed("timeout", f"no answer within {timeout:.0f} s")
            chunk = os.read(stdout.fileno(), 1 << 20)
            if not chunk:
                return None
            end = chunk.find(b"\n")
            chunks.append(chunk if end < 0 else chunk[:end])
            size += len(chunk)
            if size > cap:
                raise ChatTemplateFailed("too_big", f"an answer over {cap} bytes")
            if end >= 0:
                break
    try:
        answer = json.loads(b"".join(chunks))
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _stop(proc: subprocess.Popen[bytes], *, kill: bool) -> None:
    """Close the child's pipes and kill it (at once with ``kill``, else if it lives on a second)."""
    if kill:
        proc.kill()
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=1)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    logger.debug("chat template process %s ended", proc.pid)
