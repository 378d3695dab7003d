r"""The eval side of the contamination check: what counts as an eval item's text, and its
distinctive n-grams.

This module owns the text handling both sides of the check share (decoding escapes, lowercasing,
cutting into word tokens, reading a file's text) and the index of an eval split's *distinctive*
n-grams (:class:`EvalIndex`, built and cached per process by :func:`eval_index`). The scanner that
looks for those n-grams in what an agent wrote is :mod:`autorl.integrity.contamination`.

Text on both sides is normalised the same way: JSON, Python, HTML and URL escapes are decoded
(``\n``, ``\"``, ``\u00e9``, ``&quot;``, ``%20``, behind any number of backslashes), then it is
lowercased and cut into word tokens (runs of letters and digits; ``_`` and punctuation separate), so
an eval item copied into a JSON string is found as well as one copied verbatim. Binary files are not
skipped (a NUL byte at the start would otherwise hide a text file, and datasets' Arrow caches hold
their text uncompressed): their printable ASCII runs are their text.

An n-gram is distinctive when it belongs to one eval item only and occurs nowhere in the public
training split: fixture splits share templates ("how many pencils does max have left") and an honest
agent writes its training data everywhere. An item left with no distinctive n-gram is not counted.

>>> normalize(r'"Caf\u00e9\\nNow" &amp; %41gain')
'"café now" & again'
>>> tokens(normalize("def add_25(x: int) -> int:"))
['def', 'add', '25', 'x', 'int', 'int']
"""

from __future__ import annotations

import html
import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import islice
from pathlib import Path
from typing import Any

__all__ = [
    "SHARED_WITH_TRAINING",
    "SHORT_LEAF_MIN_TOKENS",
    "SNIFF_BYTES",
    "EvalIndex",
    "Gram",
    "eval_index",
    "ngrams",
    "normalize",
    "text_of",
    "token_windows",
    "tokens",
]

# Files of a private split that the training environment also serves to the agent, so they are no
# eval items: deepsearchqa's fixture search corpus (training searches return its documents, eval
# towns' included; the eval *questions* are what must not leak).
SHARED_WITH_TRAINING = frozenset({"corpus.jsonl"})
# A JSON string (or file) shorter than ``ngram`` words but at least this long counts whole, as one
# shorter n-gram: fixture questions such as "Who founded the town of Kavtormar?" have 6 words.
SHORT_LEAF_MIN_TOKENS = 5
SNIFF_BYTES = 8192  # a NUL byte in the first block marks a binary file
_CHUNK_CHARS = 1 << 20  # text is tokenised in slices of this many characters (bounded memory)
_MIN_BINARY_RUN = 16  # printable ASCII bytes in a row that count as text inside a binary file
_MAX_WORD_CARRY = 256  # characters of an unfinished word carried from one slice to the next

# Escapes that would glue a word to the next one ("\nfrom" -> "nfrom") or hide a letter: JSON and
# Python (any number of backslashes, so JSON inside JSON decodes too), HTML entities, URL encoding.
# A backslash run is matched from its first backslash only, and possessively: otherwise a run of a
# million backslashes is tried from each of its positions (quadratic time, a hang of the grader).
_ESCAPE = re.compile(
    r"(?<!\\)\\++(?:u([0-9a-fA-F]{4})|x([0-9a-fA-F]{2})|[nrtbfv])"
    r"|&(#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[a-zA-Z]{2,8});|%([2-7][0-9a-fA-F])"
)
_WORD = re.compile(r"[^\W_]+")
_BREAK = re.compile(
    r"\s(?=\S*\Z)"
)  # the last whitespace of a slice: where a word can be cut safely
_BINARY_TEXT = re.compile(rb"[\x20-\x7e\t\n\r]{%d,}" % _MIN_BINARY_RUN)

Gram = tuple[str, ...]


def _unescape(match: re.Match[str]) -> str:
    code, byte, entity, percent = match.groups()
    if code is not None:
        char = chr(int(code, 16))
        return " " if 0xD800 <= ord(char) <= 0xDFFF else char  # a lone surrogate half: no letter
    if byte is not None or percent is not None:
        return chr(int(byte if byte is not None else percent, 16))
    if entity is not None:
        return html.unescape(f"&{entity};")
    return " "  # \n, \t, ...: whitespace


def normalize(text: str) -> str:
    """Decode escapes (JSON, Python, HTML, URL) and lowercase; both sides of the check use this."""
    return _ESCAPE.sub(_unescape, text).lower()


def tokens(text: str) -> list[str]:
    """Word tokens of normalised text: runs of letters and digits (``_`` and punctuation
    separate).
    """
    return _WORD.findall(text)


def ngrams(toks: Sequence[str], k: int) -> Iterator[Gram]:
    """Every ``k`` consecutive tokens, built in C (``zip`` of shifted iterators).

    Used to build the index and, by :mod:`autorl.integrity.contamination`, to match scanned text.

    Args:
        toks: Word tokens (:func:`tokens`).
        k: Tokens per n-gram.

    Returns:
        The n-grams in order, lazily; none when ``toks`` has fewer than ``k`` tokens.

    Examples:
        >>> list(ngrams(["a", "b", "c"], 2))
        [('a', 'b'), ('b', 'c')]
    """
    return zip(*(islice(toks, i, None) for i in range(k)), strict=False)


def text_of(data: bytes) -> str:
    """A file's text: UTF-8 (bad bytes replaced), or the printable ASCII runs of a binary file.

    Both the eval split and the scanned files are read this way. A file is binary when a NUL byte
    occurs in its first :data:`SNIFF_BYTES` bytes; its runs of at least 16 printable ASCII bytes are
    its text, one per line.

    Examples:
        >>> text_of("café".encode())
        'café'
        >>> text_of(b"\\0\\1" + b"sixteen letters!" + b"\\0")
        'sixteen letters!'
    """
    if b"\0" in data[:SNIFF_BYTES]:
        return "\n".join(run.decode("ascii") for run in _BINARY_TEXT.findall(data))
    return data.decode("utf-8", errors="replace")


def token_windows(text: str, overlap: int) -> Iterator[list[str]]:
    """Tokens of ``text`` in slices of about :data:`_CHUNK_CHARS` characters.

    Each slice is cut after its last whitespace (a word or escape is never split unless it is longer
    than :data:`_MAX_WORD_CARRY`) and starts with the last ``overlap`` tokens of the slice before,
    so every n-gram of up to ``overlap + 1`` tokens lies whole in some slice. Both the index build
    and the scanner (:mod:`autorl.integrity.contamination`) tokenise through this, so memory stays
    bounded.

    Args:
        text: Raw text (it is normalised slice by slice).
        overlap: Tokens repeated from one slice at the start of the next (the longest n-gram minus
            1).

    Yields:
        The normalised word tokens of each slice, ``overlap`` carried tokens first.
    """
    carry: list[str] = []
    start = 0
    while start < len(text):
        end = min(start + _CHUNK_CHARS, len(text))
        if end < len(text):
            tail = _BREAK.search(text, max(start, end - _MAX_WORD_CARRY), end)
            end = tail.end() if tail else end
        toks = carry + tokens(normalize(text[start:end]))
        yield toks
        carry = toks[-overlap:] if overlap else []
        start = end


def json_strings(value: Any) -> Iterator[str]:
    """The string values inside parsed JSON, in order (keys are schema, not item text).

    >>> list(json_strings({"a": "x", "b": [1, "y", {"c": "z"}]}))
    ['x', 'y', 'z']
    """
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for inner in value.values():
            yield from json_strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from json_strings(inner)


def _item_leaves(path: Path) -> Iterator[tuple[str, list[str]]]:
    """``(label, strings)`` of the eval items in one private file: a JSONL file's lines, else the
    file.
    """
    data = path.read_bytes()
    if path.suffix == ".jsonl":
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            if line.strip():
                try:
                    yield f"{path.name}:{number}", list(json_strings(json.loads(line)))
                except ValueError:
                    yield f"{path.name}:{number}", [line]
        return
    text = text_of(data)
    if path.suffix == ".json":
        try:
            yield path.name, list(json_strings(json.loads(text)))
            return
        except ValueError:
            pass
    yield path.name, [text]


@dataclass(eq=False)
class EvalIndex:
    """The distinctive n-grams of one eval split (built once per process, see :func:`eval_index`).

    Attributes:
        ngram: Words per n-gram; a string shorter than that (but of at least
            :data:`SHORT_LEAF_MIN_TOKENS` words) is one shorter n-gram.
        labels: Each counted item's place in the private split (``eval.jsonl:12``,
            ``games/x/trial_1``).
        grams: Per n-gram length, each distinctive n-gram and the one item it belongs to.
        excluded: Items with no distinctive n-gram (not counted): each occurs in the public split or
            in another eval item, or the item has no string of :data:`SHORT_LEAF_MIN_TOKENS` words.
        prefixes: The first :attr:`shortest` tokens of every n-gram, with the lengths of the n-grams
            they start: text none of them occurs in is done after one pass instead of one per
            length.
    """

    ngram: int
    labels: list[str]
    grams: dict[int, dict[Gram, int]]
    excluded: int
    prefixes: dict[Gram, set[int]] = field(init=False)

    def __post_init__(self) -> None:
        self.prefixes = {}
        for k, table in self.grams.items():
            for gram in table:
                self.prefixes.setdefault(gram[: self.shortest], set()).add(k)

    @property
    def shortest(self) -> int:
        """The shortest n-gram length in the index (1 when it is empty)."""
        return min(self.grams, default=1)

    def longest(self) -> int:
        """The longest n-gram length in the index (0 when it is empty)."""
        return max(self.grams, default=0)


def _private_items(private_dir: Path, shared: frozenset[str]) -> list[tuple[str, list[str]]]:
    """The eval items of a private split: each JSONL line; each top-level file; each sub-folder's
    files together (an ALFWorld game folder is one item). Symlinks are not followed."""
    grouped: dict[str, list[str]] = {}
    items: list[tuple[str, list[str]]] = []
    for folder, dirs, files in os.walk(private_dir):
        dirs.sort()
        here = Path(folder)
        for name in sorted(files):
            path = here / name
            if name in shared or path.is_symlink() or not path.is_file():
                continue
            rel = path.relative_to(private_dir)
            for label, leaves in _item_leaves(path):
                if path.suffix == ".jsonl" or here == private_dir:
                    items.append((rel.parent.joinpath(label).as_posix(), leaves))
                else:
                    grouped.setdefault(rel.parent.as_posix(), []).extend(leaves)
    return items + sorted(grouped.items())


def _item_grams(leaves: list[str], n: int) -> set[Gram]:
    """One eval item's n-grams: those of each string, or the whole string when it is shorter than
    ``n`` words but has at least :data:`SHORT_LEAF_MIN_TOKENS` (eval data is the grader's: read
    whole)."""
    grams: set[Gram] = set()
    for leaf in leaves:
        toks = tokens(normalize(leaf))
        if len(toks) >= n:
            grams.update(ngrams(toks, n))
        elif len(toks) >= min(SHORT_LEAF_MIN_TOKENS, n):
            grams.add(tuple(toks))
    return grams


def _found(texts: Iterable[str], grams: dict[int, set[Gram]]) -> set[Gram]:
    """Which of ``grams`` (by length) occur in ``texts``."""
    found: set[Gram] = set()
    if not grams:
        return found
    for text in texts:
        for toks in token_windows(text, max(grams) - 1):
            for k, wanted in grams.items():
                found |= wanted.intersection(ngrams(toks, k))
    return found


def _public_texts(public: Sequence[Path]) -> Iterator[str]:
    """The text of every file in ``public`` (files or folders; symlinks are not followed)."""
    for top in public:
        if top.is_file() and not top.is_symlink():
            yield text_of(top.read_bytes())
            continue
        for folder, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(files):
                path = Path(folder) / name
                if not path.is_symlink() and path.is_file():
                    yield text_of(path.read_bytes())


@lru_cache(maxsize=16)
def eval_index(
    private_dir: Path,
    public: tuple[Path, ...],
    ngram: int,
    shared: frozenset[str] = SHARED_WITH_TRAINING,
) -> EvalIndex:
    """The distinctive n-grams of the eval items in ``private_dir`` (cached per arguments in a
    process).

    An n-gram is *distinctive* when it belongs to one eval item only and occurs nowhere in
    ``public`` (the training split, and whatever else the benchmark hands the agent). One shared by
    several eval items is a template the public split happens to lack (or two near-duplicate items):
    a hit on it says nothing about which item was seen, so it never counts.

    Args:
        private_dir: The task's built private split (``build_task_data(...).private_dir``).
        public: The public split's folder, and other files or folders every agent is given.
        ngram: Words per n-gram.
        shared: File names in the private split that are no eval items
            (:data:`SHARED_WITH_TRAINING`).

    Raises:
        ValueError: ``ngram`` below 1, or ``private_dir`` is not a folder.
    """
    if ngram < 1:
        raise ValueError(f"integrity.contamination.ngram must be at least 1 word, got {ngram}")
    if not Path(private_dir).is_dir():
        raise ValueError(
            f"no private split at {private_dir}: build the task data first "
            "(autorl.tasks.build_task_data)"
        )
    items = _private_items(Path(private_dir), shared)
    per_item = [_item_grams(leaves, ngram) for _, leaves in items]
    owners = Counter(gram for grams in per_item for gram in grams)
    # A short item ("sure here they are 16") inside a longer one ("sure here they are 16 18 20") is
    # shared too, so every item's text is searched for the short grams of the others.
    short: dict[int, set[Gram]] = {}
    for gram in owners:
        if len(gram) < ngram:
            short.setdefault(len(gram), set()).add(gram)
    for (_, leaves), own in zip(items, per_item, strict=True):
        for gram in _found(leaves, short) - own:
            owners[gram] += 1
    candidates: dict[int, set[Gram]] = {}
    for grams in per_item:
        for gram in grams:
            if owners[gram] == 1:
                candidates.setdefault(len(gram), set()).add(gram)
    for gram in _found(_public_texts(public), candidates):
        candidates[len(gram)].discard(gram)
    labels: list[str] = []
    table: dict[int, dict[Gram, int]] = {}
    for (label, _), grams in zip(items, per_item, strict=True):
        distinctive = [gram for gram in grams if gram in candidates.get(len(gram), ())]
        if not distinctive:
            continue
        for gram in distinctive:
            table.setdefault(len(gram), {})[gram] = len(labels)
        labels.append(label)
    return EvalIndex(ngram, labels, dict(sorted(table.items())), len(items) - len(labels))
