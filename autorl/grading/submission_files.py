"""What the grader reads from a submitted model folder, and how: bounded and inside the folder.

The limits (:data:`MAX_JSON_BYTES`, :data:`MAX_SUBMISSION_BYTES`, the sparse-file rule), the names
of the files loaders read, :class:`SubmissionRejected`, and the primitives every check of
:mod:`autorl.grading.model_checks` reads the folder through: the files' sizes
(:func:`check_sizes`), a file only if it resolves inside the folder (:func:`present_file`), a JSON
object of bounded size (:func:`load_json_object`), and where a link leads as the agent may be told
(:func:`shown_path`). They live apart from the checks so that each rule about reading an agent's
file is stated once, whichever check reads it. No Ray, no HTTP, no torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autorl.errors import AutorlError
from autorl.grading.weights import SAVE_HINT

# Largest config/tokenizer JSON read (real tokenizer.json files of large vocabularies are ~10-30
# MB).
MAX_JSON_BYTES = 256 << 20
# Largest model folder copied for grading: an 8B model in float32 with room to spare.
MAX_SUBMISSION_BYTES = 64 << 30
# A file over this size on disk at under 1/SPARSE_RATIO of its size is refused as sparse.
SPARSE_MIN_BYTES = 64 << 20
SPARSE_RATIO = 8
SAFE_INDEX = "model.safetensors.index.json"
BIN_INDEX = "pytorch_model.bin.index.json"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
# Files that, next to tokenizer_config.json, hold a tokenizer's vocabulary when tokenizer.json is
# absent.
VOCAB_FILES = (
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "vocab.json",
    "vocab.txt",
    "tiktoken.model",
    "qwen.tiktoken",
)
# Files transformers reads whole when it loads a tokenizer or a config: each at most MAX_JSON_BYTES.
WHOLE_READ_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "merges.txt",
    ADAPTER_CONFIG,
    SAFE_INDEX,
    BIN_INDEX,
    *VOCAB_FILES,
)


class SubmissionRejected(AutorlError):
    """A submission that is refused before it is queued; nothing is recorded as scored.

    Attributes:
        status_code: HTTP status the API answers with: 400 for a bad ``model_path``, 422 for a
            directory that is not a loadable model.
        message: What is wrong and how to fix it, ready to show to the agent.
    """

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


def check_sizes(root: Path) -> dict[str, int]:
    """The sizes of the top-level files; a folder too big to copy or a sparse file is refused.

    Sizes come from ``stat``: nothing is read. A sparse file (``truncate -s 100G``) costs its writer
    no disk but would cost the grader its size in copying and hashing; files written by
    ``save_pretrained`` occupy their size on disk (compressing file systems store weights at close
    to their size, so only a file on disk at under 1/:data:`SPARSE_RATIO` of its size is refused).

    Returns:
        File name -> size in bytes, for the regular files that resolve inside ``root``.

    Raises:
        SubmissionRejected: 422 when the files add up to over :data:`MAX_SUBMISSION_BYTES`, or
            one of over :data:`SPARSE_MIN_BYTES` is sparse.
    """
    sizes: dict[str, int] = {}
    for entry in sorted(root.iterdir()):
        try:
            source = entry.resolve()
            if not source.is_relative_to(root) or not source.is_file():
                continue
            info = source.stat()
        except (OSError, RuntimeError):
            continue  # not copied either: a broken or looping link
        allocated = getattr(info, "st_blocks", None)
        sparse = allocated is not None and allocated * 512 * SPARSE_RATIO < info.st_size
        if info.st_size > SPARSE_MIN_BYTES and sparse:
            raise SubmissionRejected(
                422,
                f"{entry.name} is a sparse file ({info.st_size} bytes, "
                f"{(allocated or 0) * 512} on disk): {SAVE_HINT} into an empty folder",
            )
        if entry.name in WHOLE_READ_FILES and info.st_size > MAX_JSON_BYTES:
            raise SubmissionRejected(
                422,
                f"{entry.name} is {info.st_size} bytes, over the {MAX_JSON_BYTES >> 20} MiB a "
                f"tokenizer or config file may have: {SAVE_HINT} instead of writing it by hand",
            )
        sizes[entry.name] = info.st_size
    total = sum(sizes.values())
    if total > MAX_SUBMISSION_BYTES:
        raise SubmissionRejected(
            422,
            f"the model folder's files add up to {total} bytes, over the "
            f"{MAX_SUBMISSION_BYTES >> 30} GiB a submission may have: submit only the model "
            f"({SAVE_HINT} into an empty folder)",
        )
    return sizes


def refuse_remote_code(data: dict[str, Any], name: str) -> None:
    """Refuses a config naming code of its own (``auto_map``): the grader runs no submitted code.

    Raises:
        SubmissionRejected: 422 naming the file.
    """
    if "auto_map" in data:
        raise SubmissionRejected(
            422,
            f'{name} has an "auto_map", which names Python code in the model folder: '
            "the grader loads only transformers' own classes and never runs submitted code; "
            f'delete "auto_map" (and any .py files) and {SAVE_HINT} with a built-in class',
        )


def present_file(root: Path, name: str) -> Path | None:
    """Returns ``root/name`` if it is a regular file that resolves inside ``root``.

    Raises:
        SubmissionRejected: 400 if it is a symlink that points outside ``root``: the grader copies
            only what is inside the folder, so the model would not load there.
    """
    path = root / name
    if not path.is_file():
        return None
    target = path.resolve()
    if not target.is_relative_to(root):
        shown = shown_path(target, root, "a path outside it")
        raise SubmissionRejected(
            400,
            f"{name} is a symlink that points outside the model folder (to {shown}): "
            "copy the file into the folder instead of linking to it",
        )
    return path


def shown_path(target: Path, base: Path, outside: str = "a path outside the workspace") -> str:
    """Where a symlink leads, as the agent may be told: relative to ``base`` (the workspace, or the
    model folder), else ``outside``; never the host's absolute path.

    >>> workspace = Path("/host/ws")
    >>> shown_path(Path("/host/ws/models/tiny"), workspace)
    'models/tiny'
    >>> shown_path(Path("/etc/passwd"), workspace)
    'a path outside the workspace'
    """
    for form in {base, base.absolute(), _resolve_or_keep(base)}:
        if target.is_relative_to(form):
            return target.relative_to(form).as_posix()
    return outside


def _resolve_or_keep(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path


def load_json_object(path: Path, name: str) -> dict[str, Any]:
    """Parses a JSON file that must hold an object.

    Raises:
        SubmissionRejected: 422 if it cannot be read, is larger than :data:`MAX_JSON_BYTES` (a
            sparse file of many GB would otherwise be read into the grader's memory), is not valid
            JSON, or is not an object.
    """
    try:
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise SubmissionRejected(
                422,
                f"{name} is {size} bytes, over the {MAX_JSON_BYTES >> 20} MiB a model's JSON file "
                f"may have: {SAVE_HINT} instead of writing it by hand",
            )
        data = json.loads(path.read_text(encoding="utf-8"))
    # ValueError: also JSONDecodeError, UnicodeDecodeError, and ints of over 4,300 digits;
    # RecursionError: deep nesting
    except OSError as exc:  # its text names the grader's copy of the file: the reason only
        raise SubmissionRejected(
            422, f"{name} cannot be read ({exc.strerror or type(exc).__name__}): {SAVE_HINT}"
        ) from exc
    except (ValueError, RecursionError) as exc:
        raise SubmissionRejected(
            422, f"{name} is not valid JSON ({exc}): {SAVE_HINT} instead of writing it by hand"
        ) from exc
    if not isinstance(data, dict):
        raise SubmissionRejected(
            422,
            f"{name} must hold a JSON object, got {type(data).__name__}: {SAVE_HINT} instead of "
            "writing it by hand",
        )
    return data
