"""Opening files an agent controls, from outside its sandbox, without being led anywhere else.

The harness reads the agent's workspace and HOME as root (the contamination scan, the cell
checkpoint copier). Every path component is opened relative to an open folder with ``O_NOFOLLOW``,
so a link planted anywhere on the way fails the open (``ELOOP``/``ENOTDIR``) instead of being
followed, and with ``O_NONBLOCK``, so a FIFO swapped in for a file cannot block the open; the caller
then ``fstat``\\ s the descriptor and reads only a regular file.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence

__all__ = ["OPEN_DIR", "OPEN_FILE", "open_failure", "open_under", "printable"]

OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_failure(error: OSError) -> str:
    """The skip reason for a failed open: ``O_NOFOLLOW`` on a link fails with ELOOP (or ENOTDIR for
    a folder).

    Examples:
        >>> open_failure(OSError(errno.ELOOP, "link"))
        'symlink'
        >>> open_failure(FileNotFoundError(errno.ENOENT, "gone"))
        'missing'
    """
    if error.errno in (errno.ELOOP, errno.EMLINK):
        return "symlink"
    if error.errno == errno.ENOENT:
        return "missing"
    return "unreadable"


def printable(path: str, limit: int = 300) -> str:
    """An agent-chosen file name made safe for JSON and the report: valid UTF-8, no control
    characters, capped.

    Examples:
        >>> printable("a\\x1b[31m\\udcff")
        'a?[31m�'
    """
    text = path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def open_under(root_fd: int, parts: Sequence[str], flags: int = OPEN_FILE) -> int:
    """Open ``root_fd/parts[0]/.../parts[-1]`` one component at a time, never through a link.

    Each folder on the way is opened with :data:`OPEN_DIR` relative to the one before, so a
    component the agent replaced by a link (to ``/``, to the private split) fails the open
    whichever component it is. The caller closes the returned descriptor and checks its type.

    Args:
        root_fd: An open folder the path is relative to.
        parts: The path's components (none may be empty, ``.`` or ``..``; the caller checks).
        flags: How the last component is opened (:data:`OPEN_FILE` or :data:`OPEN_DIR`).

    Raises:
        OSError: A component is missing, a link, not a folder, or unreadable.
    """
    if not parts:
        return os.dup(root_fd)
    fd = root_fd
    try:
        for name in parts[:-1]:
            parent, fd = fd, os.open(name, OPEN_DIR, dir_fd=fd)
            if parent != root_fd:
                os.close(parent)
        return os.open(parts[-1], flags, dir_fd=fd)
    finally:
        if fd != root_fd:
            os.close(fd)
