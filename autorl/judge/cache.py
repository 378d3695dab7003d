"""On-disk cache of judge answers, keyed by (judge, request).

One JSON file per answer under ``<root>/<judge>/<key[:2]>/<key>.json``, written to a temporary
file and renamed into place, so concurrent graders (threads or processes) never read a partial
answer and the worst race costs one duplicate judge call. An empty answer is never stored, and
one found on disk (written by an older version) reads as a miss, so it is asked again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any


def request_key(judge: str, request: dict[str, Any]) -> str:
    """Digest of the judge's identity and everything in the request that decides its answer.

    >>> request_key("gpt-5.2", {"messages": [{"role": "user", "content": "hi"}]}) == request_key(
    ...     "gpt-5.2", {"messages": [{"content": "hi", "role": "user"}]})
    True
    >>> request_key("a", {"x": 1}) != request_key("b", {"x": 1})
    True
    """
    blob = json.dumps({"judge": judge, "request": request}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class JudgeCache:
    """Answers of one judge, stored under ``root``."""

    def __init__(self, root: Path, judge: str) -> None:
        """Use ``root/<judge, made filename-safe>/`` for this judge's answers."""
        self.judge = judge
        self.dir = Path(root) / re.sub(r"[^A-Za-z0-9._-]+", "_", judge)

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.json"

    def get(self, request: dict[str, Any]) -> str | None:
        """The cached answer to ``request``, or ``None`` (also for an empty cached answer)."""
        path = self._path(request_key(self.judge, request))
        try:
            answer = str(json.loads(path.read_text(encoding="utf-8"))["answer"])
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return None
        return answer if answer.strip() else None

    def put(self, request: dict[str, Any], answer: str) -> None:
        """Store ``answer`` atomically.

        Raises:
            ValueError: ``answer`` is empty (an empty judge reply is a failure, never an answer to
                keep).
        """
        if not answer.strip():
            raise ValueError(f"judge {self.judge}: refusing to cache an empty answer")
        key = request_key(self.judge, request)
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{key}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_text(
            json.dumps(
                {"judge": self.judge, "request": request, "answer": answer}, ensure_ascii=False
            ),
            encoding="utf-8",
        )
        os.replace(tmp, path)
