"""What an agent is told about a submission that could not be scored, and nothing more.

The grader's own errors carry whatever raised them: an exception from a chat template can hold the
rendered eval prompts, a library error can name the grader's host paths. The full text stays in the
records and the logs (the report shows it); the agent gets a :class:`PublicError`: a fixed message
per error class, the class, and the name of the submitted file that caused it when one is known
(docs/threat-model.md lists what may flow back through each channel).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Error classes an agent may see (``error_class`` of a submission's answer).
CHAT_TEMPLATE = "chat_template"
MODEL_LOAD = "model_load"
EVALUATION = "evaluation"
CORRUPT_WEIGHTS = "corrupt_weights"
REJECTED = "rejected"
UNREADABLE = "unreadable_file"
GRADING = "grading_failed"

_DETAIL_KEYS = ("error_class", "error_file", "error_message")
_MAX_MESSAGE_CHARS = 600

CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json", "tokenizer_config.json")
"""Where transformers reads a chat template from, the file that wins first."""

_FIXED = {
    CHAT_TEMPLATE: (
        "the chat template in {file} failed to render the evaluation prompts (it raised an "
        "error, ran past the time limit, wrote more than the size limit, or returned no text): "
        "render your own "
        "conversations with tokenizer.apply_chat_template(messages, tokenize=False, "
        "add_generation_prompt=True) to find out why"
    ),
    MODEL_LOAD: (
        "the grader could not load the model: load the folder with "
        "AutoModelForCausalLM.from_pretrained(path) and AutoTokenizer.from_pretrained(path) (an "
        "adapter with PeftModel.from_pretrained on the base model) to see why"
    ),
    EVALUATION: (
        "the model failed while generating the evaluation answers: check that "
        "model.generate works on a few prompts of your own, with the saved tokenizer"
    ),
    UNREADABLE: (
        "the grader could not read {file} of the submitted folder: save the model again and "
        "submit it again"
    ),
    GRADING: "the grader failed to score this submission; submit it again",
}


@dataclass(frozen=True)
class PublicError:
    """The agent-facing view of why a submission is invalid.

    Attributes:
        message: Text for the agent: fixed per class, or (``rejected``, ``corrupt_weights``) the
            grader's own check message with host paths removed.
        error_class: One of the class names above.
        file: The submitted file that caused it (a name inside the submitted folder), if known.
    """

    message: str
    error_class: str
    file: str | None = None

    def as_details(self) -> dict[str, Any]:
        """The record's ``details`` keys that keep this error (read by :func:`from_details`)."""
        return {
            "error_class": self.error_class,
            "error_file": self.file,
            "error_message": self.message,
        }

    def as_answer(self) -> dict[str, Any]:
        """The fields of the grading API's answer: ``error``, ``error_class`` and ``file``."""
        return {"error": self.message, "error_class": self.error_class, "file": self.file}


def fixed(error_class: str, file: str | None = None) -> PublicError:
    """The fixed message of ``error_class`` (naming ``file``).

    >>> fixed(CHAT_TEMPLATE, "tokenizer_config.json").message[:42]
    'the chat template in tokenizer_config.json'
    """
    message = _FIXED[error_class].format(file=file or "a file")
    return PublicError(message, error_class, file)


def from_details(details: dict[str, Any], error: str | None) -> PublicError | None:
    """The public error a record keeps in its details; a generic one for an error without it.

    >>> from_details({}, "evaluation failed: TemplateError: what is 2+2?").message
    'the grader failed to score this submission; submit it again'
    >>> from_details({}, None) is None
    True
    """
    error_class = details.get("error_class")
    message = details.get("error_message")
    if isinstance(error_class, str) and isinstance(message, str):
        file = details.get("error_file")
        return PublicError(message, error_class, file if isinstance(file, str) else None)
    return fixed(GRADING) if error else None


def strip_details(details: dict[str, Any]) -> dict[str, Any]:
    """``details`` without the keys :meth:`PublicError.as_details` writes (the service's only)."""
    return {k: v for k, v in details.items() if k not in _DETAIL_KEYS}


def checked(
    error_class: str, message: str, files: Iterable[str], roots: Iterable[Path]
) -> PublicError:
    """A check's own message (written for the agent) without ``roots``, naming the file it names.

    >>> checked(REJECTED, "file model.safetensors cannot be read (/srv/g/3/model.safetensors)",
    ...         ["config.json", "model.safetensors"], [Path("/srv/g/3")]).as_answer()["error"]
    'file model.safetensors cannot be read (model.safetensors)'
    """
    names = list(files)
    text = scrub_paths(message, roots)[:_MAX_MESSAGE_CHARS]
    return PublicError(text, error_class, mentioned_file(text, names))


def mentioned_file(text: str, names: Iterable[str]) -> str | None:
    """The first of ``names`` in ``text``, longest first (``model.safetensors.index.json`` beats
    its prefix)."""
    for name in sorted(names, key=len, reverse=True):
        if re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", text):
            return name
    return None


def scrub_paths(text: str, roots: Iterable[Path]) -> str:
    """``text`` with every ``root`` (as given and resolved) cut off the paths below it.

    A path inside a root becomes the part below it (``<root>/output/v1`` -> ``output/v1``); the root
    itself becomes ``.``.

    >>> scrub_paths("no file /w/ws/output/v1/x.json (in /w/ws)", [Path("/w/ws")])
    'no file output/v1/x.json (in .)'
    """
    forms: set[str] = set()
    for root in roots:
        forms.update(str(path).rstrip("/") for path in (root, root.absolute(), _resolved(root)))
    for form in sorted((f for f in forms if f), key=len, reverse=True):
        text = text.replace(form + "/", "").replace(form, ".")
    return text


_ABSOLUTE = re.compile(r"(?<![\w.~:/-])/(?:[^\s'\"()<>,;:/]+/)*[^\s'\"()<>,;:/]+/?")
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>()]+", re.IGNORECASE)


def scrub_any_paths(text: str, limit: int = _MAX_MESSAGE_CHARS) -> str:
    """``text`` with every absolute path and URL replaced, cut at ``limit`` characters: for
    messages the grader did not write itself (an environment's errors), which may name the host's
    folders or servers.

    >>> scrub_any_paths("no ALFWorld game file /cache/alfworld/v4/g.tw (http://127.0.0.1:3000/x)")
    'no ALFWorld game file <path> (<url>)'
    >>> scrub_any_paths('"action" must be a string, got int')
    '"action" must be a string, got int'
    """
    text = _URL.sub("<url>", text)
    return _ABSOLUTE.sub("<path>", text)[:limit]


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path
