"""``run_meta.json``: the budget facts the agent reads (docs/design.md#a-cells-life, step 6)."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# The harness's copy of run_meta.json in the cell folder (RunMeta.record_path).
RECORD_NAME = "run_meta.json"


class RunMeta:
    """Thread-safe owner of a workspace's ``run_meta.json``.

    Fields: ``start_time`` (set when the agent starts, not before the baseline), ``timeout_s``,
    ``last_submit_time`` and ``end_time`` (epoch seconds).
    """

    def __init__(self, path: Path, timeout_s: float, scratch_dir: Path) -> None:
        """Create the file with the budget and no times yet.

        Args:
            path: ``run_meta.json`` in the workspace.
            timeout_s: The agent's budget.
            scratch_dir: A folder of the same filesystem that the agent cannot reach (the cell
                folder): each new version is written there, then renamed over ``path``. Written in
                the workspace, a link the agent planted at the temporary name would lead this
                process to write wherever it points; a rename replaces a link and never follows it.
        """
        self.path = path
        self.scratch_dir = scratch_dir
        self._lock = threading.Lock()
        self._data: dict[str, Any] = {
            "start_time": None,
            "timeout_s": timeout_s,
            "last_submit_time": None,
            "end_time": None,
        }
        self._write()

    def update(self, **fields: Any) -> None:
        """Set fields and rewrite the file atomically."""
        with self._lock:
            self._data.update(fields)
            self._write()

    def snapshot(self) -> dict[str, Any]:
        """The current fields."""
        with self._lock:
            return dict(self._data)

    def remaining(self, now: float | None = None) -> float | None:
        """Seconds of budget left, or None before the agent started."""
        data = self.snapshot()
        if data["start_time"] is None:
            return None
        now = time.time() if now is None else now
        return max(0.0, float(data["timeout_s"]) - (now - float(data["start_time"])))

    @property
    def record_path(self) -> Path:
        """The harness's own copy, in the scratch folder: what the report reads. The workspace's
        copy is the agent's to rewrite (or to replace by a FIFO) once it runs."""
        return self.scratch_dir / RECORD_NAME

    def _write(self) -> None:
        text = json.dumps(self._data, indent=2)
        for target, mode in ((self.path, 0o644), (self.record_path, 0o600)):
            fd, tmp = tempfile.mkstemp(prefix=".run_meta-", suffix=".json", dir=self.scratch_dir)
            with os.fdopen(fd, "w") as out:
                out.write(text)
            os.chmod(tmp, mode)  # the agent reads the workspace's copy (mkstemp makes it 0600)
            os.replace(tmp, target)
