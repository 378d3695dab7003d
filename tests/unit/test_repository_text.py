"""What the repository's text may point at and what its comments may say.

Two rules over the files git tracks (docs/design.md#code-conventions):

- **Nothing points outside the repository.** A clone has no product specification or reference
  notes beside it, so a reference to one of them (by name, or by the path of the folder that held
  them) is a dead link unless that file is in the repository. The design they describe is
  docs/design.md; a reference there, or the reason written out in place, replaces it.
- **Comments give reasons, not history.** A code comment or docstring of a ``.py`` file and a
  comment of a config file (YAML, TOML, Makefile, shell, requirement files) carries no date, no
  commit hash and no "it used to be N" note: history is in git and measurements are in
  ``bench/``, where dates belong.

Data files (recorded streams, fixtures, images, the record store) are not text anyone reads as
documentation, and ``bench/RESULTS.md`` and ``bench/README.md`` are measurement logs; none of them
is checked. Each failure prints ``path:line``, the rule and how to fix it.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Files that are data, not prose or code: never checked.
DATA_SUFFIXES = (
    ".json",
    ".jsonl",
    ".csv",
    ".tsv",
    ".sqlite",
    ".png",
    ".jpg",
    ".gz",
    ".safetensors",
)
# Measurement logs: a run's date and commit are what makes a measurement reproducible.
MEASUREMENT_LOGS = ("bench/RESULTS.md", "bench/README.md")
# This file spells out the names it looks for.
SELF = "tests/unit/test_repository_text.py"

# Files outside the repository that text must not point at, each with the patterns that name it.
OUTSIDE_FILES: dict[str, tuple[str, ...]] = {
    "SPEC.md": (r"\bSPEC\s*§", r"\bSPEC\.md\b", r"\bthe SPEC\b", r"\bSPEC's\b"),
    "house-style.md": (r"\bhouse-style(?:\.md)?\b",),
    "stack-notes.md": (r"\bstack-notes(?:\.md)?\b",),
    "ray-notes.md": (r"\bray-notes(?:\.md)?\b",),
    "reference-implementation.md": (r"\breference-implementation(?:\.md)?\b",),
    "peers.md": (r"\bpeers\.md\b",),
}
# The folder that holds them beside the checkout: never part of a clone.
OUTSIDE_FOLDER = re.compile(r"\.\./shared/")

DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
_HEX = r"(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}"
# A hex word next to the word "commit", or alone in parentheses ("(b0f3e95)", "(`b0f3e95`)").
COMMIT = re.compile(
    rf"\bcommit(?:s|ted)?\b\W{{1,4}}{_HEX}\b|\b{_HEX}\W{{1,4}}commit\b|\(`?{_HEX}`?[),;]",
    re.IGNORECASE,
)
# "; was 3", "(was 120 s)", "(was `hf`)", "(was: ...)": the value before a change.
WAS_N = re.compile(r"[;(,]\s*was\s*(?::|[-+~]?\d|[`'\"])", re.IGNORECASE)

HISTORY_FIX = {
    "date": "drop the date: history is in git, measurements with their dates in bench/RESULTS.md",
    "commit hash": "drop the hash: say what the code does and why; git log has the history",
    "'was N' history": "state the current value's reason instead of its previous value",
}

# Config files whose comments start with '#'.
HASH_COMMENT_NAMES = ("Makefile", ".ci/run")
HASH_COMMENT_SUFFIXES = (".yaml", ".yml", ".toml", ".sh", ".txt", ".cfg")


@dataclass(frozen=True)
class Finding:
    """One offending line."""

    path: str
    line: int
    rule: str
    fix: str
    text: str

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line}: {self.rule}: {self.text.strip()[:120]}\n    fix: {self.fix}"
        )


def tracked_files() -> list[str]:
    """The paths git tracks that exist in the working tree, relative to the repository root."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the rules are checked over the files git tracks")
    return [p for p in out.split("\0") if p and (ROOT / p).is_file()]


def checked(path: str) -> bool:
    """Whether ``path`` is text these rules apply to (not data, not a measurement log)."""
    return not path.endswith(DATA_SUFFIXES) and path not in MEASUREMENT_LOGS and path != SELF


def read_text(path: str) -> str | None:
    """The file's text, or None for a binary file."""
    try:
        return (ROOT / path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def outside_references(path: str, text: str, in_repo: set[str]) -> Iterator[Finding]:
    """References in ``text`` to files that are not in the repository.

    >>> [f.rule for f in outside_references("a.py", "x  # see SPEC §5\\ny = 1", set())]
    ['reference to SPEC.md (not in the repository)']
    >>> list(outside_references("a.md", "see SPEC §5", {"SPEC.md"}))
    []
    >>> [f.line for f in outside_references("a.md", "ok\\nsee ../shared/x", set())]
    [2]
    """
    patterns = [
        (name, re.compile(p))
        for name, ps in OUTSIDE_FILES.items()
        if name not in in_repo
        for p in ps
    ]
    for number, line in enumerate(text.splitlines(), 1):
        if OUTSIDE_FOLDER.search(line):
            yield Finding(
                path,
                number,
                "path outside the repository",
                "point at docs/design.md#<anchor>",
                line,
            )
        for name, pattern in patterns:
            if pattern.search(line):
                fix = "point at docs/design.md#<anchor>, or write the reason in place"
                yield Finding(
                    path, number, f"reference to {name} (not in the repository)", fix, line
                )
                break


def history(path: str, line: int, text: str) -> Iterator[Finding]:
    """Dates, commit hashes and 'was N' notes in one comment or docstring line.

    >>> [f.rule for f in history("a.py", 1, "# measured 2026-11-29")]
    ['date']
    >>> [f.rule for f in history("a.py", 1, "# since commit 8c5c5d9")]
    ['commit hash']
    >>> [f.rule for f in history("a.py", 1, "# v4 (b0f395e)")]
    ['commit hash']
    >>> [f.rule for f in history("a.py", 1, "# four retries; was 3")]
    ["'was N' history"]
    >>> list(history("a.py", 1, "# the cell (was it scored?) and deadbeef, face, sweep_b0f395e"))
    []
    """
    for rule, pattern in (("date", DATE), ("commit hash", COMMIT), ("'was N' history", WAS_N)):
        if pattern.search(text):
            yield Finding(path, line, rule, HISTORY_FIX[rule], text)


def python_comments(source: str) -> Iterator[tuple[int, str]]:
    """``(line, text)`` of every comment and every docstring line of a Python source.

    A docstring here is any string that stands alone as a statement: a module's, class's or
    function's docstring, or an attribute's.

    >>> list(python_comments("'''Doc.\\n\\nMore.'''\\nx = '# no'  # why\\n"))
    [(1, 'Doc.'), (2, ''), (3, 'More.'), (4, '# why')]
    """
    found: list[tuple[int, str]] = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        tokens = []
    found += [(t.start[0], t.string) for t in tokens if t.type == tokenize.COMMENT]
    try:
        tree = ast.parse(source)
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            found += [
                (node.lineno + i, line) for i, line in enumerate(node.value.value.splitlines())
            ]
    return iter(sorted(found))


def hash_comments(text: str) -> Iterator[tuple[int, str]]:
    """``(line, text)`` of every '#' comment of a YAML, TOML, shell or Makefile text.

    A '#' starts a comment at the start of a line or after a blank, outside quotes.

    >>> list(hash_comments("a: 1  # one\\nurl: 'x#y'\\n# whole\\nb: \\"#\\" # two\\n"))
    [(1, '# one'), (3, '# whole'), (4, '# two')]
    """
    for number, line in enumerate(text.splitlines(), 1):
        quote = ""
        for i, char in enumerate(line):
            if quote:
                quote = "" if char == quote else quote
            elif char in "'\"" and (i == 0 or not line[i - 1].isalnum()):
                quote = char
            elif char == "#" and (i == 0 or line[i - 1].isspace()):
                yield number, line[i:]
                break


def comment_lines(path: str, text: str) -> Iterator[tuple[int, str]]:
    """The comment (and docstring) lines of ``path`` that the history rule applies to."""
    if path.endswith(".py"):
        return python_comments(text)
    if path in HASH_COMMENT_NAMES or path.endswith(HASH_COMMENT_SUFFIXES):
        return hash_comments(text)
    return iter(())


def report(findings: list[Finding], what: str) -> str:
    """A failure message: every finding, then the count per file."""
    per_file: dict[str, int] = {}
    for finding in findings:
        per_file[finding.path] = per_file.get(finding.path, 0) + 1
    counts = "\n".join(f"  {n:4d}  {p}" for p, n in sorted(per_file.items()))
    body = "\n".join(str(f) for f in findings)
    return f"{len(findings)} {what} in {len(per_file)} files:\n{body}\n\nper file:\n{counts}"


def test_nothing_points_at_files_outside_the_repository() -> None:
    files = tracked_files()
    in_repo = {Path(p).name for p in files}
    findings = [
        finding
        for path in files
        if checked(path) and (text := read_text(path)) is not None
        for finding in outside_references(path, text, in_repo)
    ]
    assert not findings, report(findings, "references to files outside the repository")


def test_comments_and_config_carry_no_dates_hashes_or_history() -> None:
    findings = [
        finding
        for path in tracked_files()
        if checked(path) and (text := read_text(path)) is not None
        for line, comment in comment_lines(path, text)
        for finding in history(path, line, comment)
    ]
    assert not findings, report(findings, "dates, commit hashes or history notes in comments")
