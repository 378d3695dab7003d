"""The child process of :mod:`autorl.engine.chat_render`: renders chat templates, nothing else.

Run as a script (``python -I _render_child.py MAX_MEMORY_BYTES``), so that it imports only the
standard library and ``transformers.utils.chat_template_utils`` (not torch, not autorl). It reads
one JSON request a line on stdin and writes one JSON answer a line on stdout:

* request: ``{"template": str, "kwargs": {...}, "conversations": [[message, ...], ...],
  "max_prompt_bytes": int, "max_total_bytes": int}``
* answer: ``{"ok": true, "prompts": [str, ...]}`` or
  ``{"ok": false, "reason": R, "detail": str}``, ``R`` one of ``raised``, ``not_text``,
  ``too_big``. ``detail`` (the exception's type and text, which can hold the rendered messages) is
  for the grader's records only.

Each conversation is rendered as ``tokenizer.apply_chat_template(conversation, tokenize=False,
add_generation_prompt=True)`` renders it (transformers' own normalisation and renderer, with the
tokenizer's special tokens as template variables), so prompts are the same as in the grader's
process.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from typing import Any

_MAX_DETAIL_CHARS = 4000


def _answer(payload: dict[str, Any]) -> None:
    # ASCII escapes carry any str, lone surrogates included, and the parent reads back the same str.
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def _normalizer() -> Any:
    """transformers' own message normalisation where this version has one (apply_chat_template calls
    it first); older versions render the messages as given."""
    from transformers.utils import chat_template_utils

    return getattr(
        chat_template_utils, "_normalize_chat_messages", lambda conversation: conversation
    )


def _render(request: dict[str, Any]) -> dict[str, Any]:
    from transformers.utils.chat_template_utils import render_jinja_template

    normalize = _normalizer()
    template = request["template"]
    kwargs = dict(request["kwargs"])
    max_prompt = int(request["max_prompt_bytes"])
    max_total = int(request["max_total_bytes"])
    prompts: list[str] = []
    total = 0
    for conversation in request["conversations"]:
        try:
            # As apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
            # with its defaults: one unbatched conversation, no tools, documents or assistant mask.
            # Annotated as str, it returns (rendered texts, generation indices).
            result: Any = render_jinja_template(
                conversations=[normalize(conversation)],
                tools=None,
                documents=None,
                chat_template=template,
                return_assistant_tokens_mask=False,
                continue_final_message=False,
                add_generation_prompt=True,
                **kwargs,
            )
            text = result[0][0]
        # MemoryError and RecursionError too: whatever the template does is its own failure.
        except BaseException as error:  # noqa: BLE001
            return {
                "ok": False,
                "reason": "raised",
                "detail": f"{type(error).__name__}: {error}"[:_MAX_DETAIL_CHARS],
            }
        if not isinstance(text, str):
            return {
                "ok": False,
                "reason": "not_text",
                "detail": f"rendered a {type(text).__name__}",
            }
        size = len(text.encode("utf-8", "surrogatepass"))
        total += size
        if size > max_prompt or total > max_total:
            return {
                "ok": False,
                "reason": "too_big",
                "detail": f"a prompt of {size} bytes, {total} bytes so far "
                f"(limits {max_prompt}, {max_total})",
            }
        prompts.append(text)
    return {"ok": True, "prompts": prompts}


def _exit_with_parent() -> None:
    """End this process once its parent is gone: a grader killed mid-render must not leave a
    template looping here for hours (the parent's timeout kills it only while the parent lives)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main() -> None:
    """Serve render requests until stdin closes."""
    _exit_with_parent()
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    if limit > 0:  # a template that builds a giant string hits this, not the node's memory
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # Imported before "started", so the import is not part of any render's time.
    import transformers.utils.chat_template_utils  # noqa: F401

    _answer({"started": True})
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except ValueError as error:
            _answer({"ok": False, "reason": "raised", "detail": f"bad request: {error}"})
            continue
        _answer(_render(request))


if __name__ == "__main__":
    main()
