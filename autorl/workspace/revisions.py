"""Code revisions of the agent's ``code/``: commits in a git repository outside the workspace."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from autorl.records.types import CodeRevision

logger = logging.getLogger(__name__)
_MAX_DIFF_CHARS = 200_000  # a diff is a record, not an archive: the repository keeps everything
PERIODIC_INTERVAL_S = 60.0  # between two snapshots while the agent runs (besides each submission)


class CodeRevisions:
    """Snapshots ``code_dir`` into ``repo_dir`` (a bare-style git dir the agent cannot see).

    Each snapshot that changed something becomes a commit; its id and diff against the previous
    snapshot go to ``sink`` (the Recorder).
    """

    def __init__(
        self,
        repo_dir: Path,
        code_dir: Path,
        cell_id: str,
        sink: Callable[[CodeRevision], None],
        contain: Callable[[list[str]], list[str]] | None = None,
        owner: int | None = None,
    ) -> None:
        """Create the repository.

        Args:
            repo_dir: The git folder (outside the workspace).
            code_dir: The agent's ``code/``.
            cell_id: The cell.
            sink: Receives each new revision.
            contain: Wraps each git command line so that it runs where only the workspace and the
                repository exist (a sealed cell's :meth:`autorl.seal.launch.CellSeal.contain`):
                ``code/`` is the agent's, and a link in it must lead nowhere on the host.
            owner: The uid git runs as under ``contain`` (it owns the repository).
        """
        self.repo_dir = repo_dir
        self.code_dir = code_dir
        self.cell_id = cell_id
        self.sink = sink
        self.contain = contain
        self._lock = threading.Lock()
        # No user or system git config: contained, root's HOME is not there (and none is wanted).
        self._env = os.environ | {
            "GIT_DIR": str(repo_dir),
            "GIT_WORK_TREE": str(code_dir),
            "HOME": str(repo_dir),
            "GIT_CONFIG_NOSYSTEM": "1",
            "XDG_CONFIG_HOME": str(repo_dir),
        }
        if not repo_dir.exists():
            repo_dir.mkdir(parents=True)
            if owner is not None:
                os.chown(repo_dir, owner, owner)
            self._git("init", "-q")
        self._head: str | None = self._rev_parse()

    def _git(self, *args: str) -> str:
        # safe.directory: a sealed cell's code/ belongs to the agent's uid, not to the user running
        # git.
        command = [
            "git",
            "-c",
            "user.name=autorl",
            "-c",
            "user.email=autorl@localhost",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "safe.directory=*",
            *args,
        ]
        if self.contain is not None:
            command = self.contain(command)
        result = subprocess.run(command, env=self._env, capture_output=True, text=True, check=True)
        return result.stdout

    def _rev_parse(self) -> str | None:
        try:
            return self._git("rev-parse", "--verify", "-q", "HEAD").strip() or None
        except subprocess.CalledProcessError:
            return None

    def snapshot(self, reason: str) -> str | None:
        """Commit the current ``code/`` if it changed; return the current revision (or None if
        empty)."""
        with self._lock:
            # The agent may replace code/ by a link (to the task cache, to /): never follow it.
            if self.code_dir.is_symlink() or not self.code_dir.is_dir():
                logger.warning(
                    "code snapshot skipped: %s is not a folder of the workspace (a link or "
                    "missing)",
                    self.code_dir,
                )
                return self._head
            try:
                self._git("add", "-A")
                if self._head is not None and not self._git("status", "--porcelain"):
                    return self._head
                if self._head is None and not self._git("status", "--porcelain"):
                    return None
                self._git("commit", "-q", "-m", reason)
                previous, self._head = self._head, self._rev_parse()
                base = previous or "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's empty tree
                diff = self._git("diff", base, str(self._head))
                files = len(self._git("diff", "--name-only", base, str(self._head)).split())
            except (subprocess.CalledProcessError, OSError) as error:
                logger.warning("code snapshot failed: %s", error)
                return self._head
        assert self._head is not None
        self.sink(
            CodeRevision(
                self.cell_id, self._head, time.time(), reason, diff[:_MAX_DIFF_CHARS], files
            )
        )
        return self._head

    def every(self, interval_s: float = PERIODIC_INTERVAL_S) -> Callable[[], None]:
        """Take a ``periodic`` snapshot every ``interval_s`` on a thread; returns its stop."""
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(interval_s):
                self.snapshot("periodic")

        threading.Thread(target=run, name="code-revisions", daemon=True).start()
        return stop.set
