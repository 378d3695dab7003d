"""Base-model scores kept across sweeps, in the grader node's cache folder
(``grader.baseline_cache``).

A base model's score is its greedy decoding of a task's private eval split: the same wherever the
same weights meet the same eval options, engine, batch size, device and library versions. Each
sweep's record store keeps the baselines it used; this cache lets the next sweep on the node reuse
them instead of scoring the base again (minutes for a real model). The key covers the record store's
key (task, version, data source, eval options, weights) and what the grader scores with
(:meth:`autorl.actors.grader.Grader.engine_identity`), so a change of any of them scores anew.

The folder lives in the task cache (``AUTORL_CACHE_DIR``), outside every agent's sandbox, next to
the private eval splits themselves. One JSON file per key, written atomically: concurrent sweeps on
a node at worst both score the base and write the same file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def cross_sweep_key(record_key: str, engine_identity: dict[str, Any]) -> str:
    """The file name of a baseline: a digest of its record-store key and the grader's engine
    identity (plain JSON values, as :meth:`autorl.actors.grader.Grader.engine_identity` returns it).

    >>> a = cross_sweep_key("baseline:gsm8k:v2:fixture:abc:w1", {"engine": "hf", "batch_size": 64})
    >>> a == cross_sweep_key("baseline:gsm8k:v2:fixture:abc:w1", {"batch_size": 64, "engine": "hf"})
    True
    >>> a == cross_sweep_key("baseline:gsm8k:v2:fixture:abc:w1", {"engine": "hf", "batch_size": 32})
    False
    """
    payload = json.dumps({"key": record_key, "engine": engine_identity}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


class BaselineCache:
    """Baseline scores by :func:`cross_sweep_key`, one JSON file each under ``root``."""

    def __init__(self, root: Path) -> None:
        """``root``: the folder of the files (created on the first write)."""
        self.root = root

    def get(self, record_key: str, engine_identity: dict[str, Any]) -> tuple[float, str] | None:
        """The score and details JSON stored for this key, or None.

        A file that cannot be read or does not hold this exact key (damaged, or another key's digest
        collision) is a miss, logged: the base is then scored again and the file rewritten.
        """
        path = self._path(record_key, engine_identity)
        try:
            entry = json.loads(path.read_text())
            if entry["key"] != record_key or entry["engine"] != engine_identity:
                raise ValueError("it holds another key")
            return float(entry["score"]), str(entry["details_json"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as error:
            logger.warning(
                "ignoring the cached baseline %s (%s); scoring the base model again", path, error
            )
            return None

    def put(
        self, record_key: str, engine_identity: dict[str, Any], score: float, details_json: str
    ) -> Path | None:
        """Store a successful baseline (a failed one is never cached); returns its file, or None
        when it could not be written (logged: the cache only saves later sweeps work, so this
        sweep's baseline stands)."""
        path = self._path(record_key, engine_identity)
        entry = {
            "key": record_key,
            "engine": engine_identity,
            "score": score,
            "details_json": details_json,
        }
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
            with os.fdopen(handle, "w") as out:
                json.dump(entry, out)
            os.replace(temp, path)
        except OSError as error:
            logger.warning(
                "could not keep the baseline in %s (%s); later sweeps will score it again",
                path,
                error,
            )
            return None
        return path

    def _path(self, record_key: str, engine_identity: dict[str, Any]) -> Path:
        return self.root / f"{cross_sweep_key(record_key, engine_identity)}.json"
