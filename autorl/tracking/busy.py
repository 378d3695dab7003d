"""Busy-time accounting of a pool of workers: how much of the time work waited was each worker busy.

The GraderPool marks each request it hands to a grader (:meth:`BusyClock.begin` /
:meth:`BusyClock.end`). A grader is *busy* while at least one request is in flight on it; the
pool's queue is *non-empty* while at least one request is in flight on any grader. A grader's busy
fraction is its busy time over the time the queue was non-empty: 1.0 for every grader means work
never waited on an idle grader; a low fraction next to a high one means the load was uneven (or
one grader was slow to start). Standard library only; one lock, O(graders) per event.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class BusyClock:
    """Busy time per worker and non-empty-queue time of the whole pool.

    Args:
        workers: How many workers the pool has (indices ``0 .. workers - 1``).
        clock: Seconds, monotonic (a test passes a fake one).
    """

    def __init__(self, workers: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._in_flight = [0] * workers
        self._busy_s = [0.0] * workers
        self._busy_since: list[float | None] = [None] * workers
        self._requests = [0] * workers
        self._replaced = [0] * workers
        self._nonempty_s = 0.0
        self._nonempty_since: float | None = None

    def begin(self, worker: int) -> None:
        """A request was handed to ``worker``."""
        with self._lock:
            now = self._clock()
            if self._nonempty_since is None:
                self._nonempty_since = now
            if self._in_flight[worker] == 0:
                self._busy_since[worker] = now
            self._in_flight[worker] += 1
            self._requests[worker] += 1

    def end(self, worker: int) -> None:
        """A request of ``worker`` came back (or failed)."""
        with self._lock:
            now = self._clock()
            self._in_flight[worker] -= 1
            since = self._busy_since[worker]
            if self._in_flight[worker] == 0 and since is not None:
                self._busy_s[worker] += now - since
                self._busy_since[worker] = None
            if not any(self._in_flight) and self._nonempty_since is not None:
                self._nonempty_s += now - self._nonempty_since
                self._nonempty_since = None

    def replaced(self, worker: int) -> None:
        """``worker`` died and was replaced by a new one (its slot keeps its history)."""
        with self._lock:
            self._replaced[worker] += 1

    def fractions(self) -> list[float | None]:
        """Each worker's busy fraction so far (None before the queue was ever non-empty)."""
        return [w["busy_fraction"] for w in self.summary()["graders"]]

    def summary(self) -> dict[str, Any]:
        """Everything so far, JSON-ready (intervals still open count up to now).

        Returns:
            ``{"queue_nonempty_s", "graders": [{"grader", "busy_s", "busy_fraction", "requests",
            "replaced"}, ...]}``; ``busy_fraction`` is None while ``queue_nonempty_s`` is 0.
        """
        with self._lock:
            now = self._clock()
            nonempty = self._nonempty_s + (
                now - self._nonempty_since if self._nonempty_since is not None else 0.0
            )
            graders = []
            for i, busy in enumerate(self._busy_s):
                since = self._busy_since[i]
                busy += now - since if since is not None else 0.0
                graders.append(
                    {
                        "grader": i,
                        "busy_s": round(busy, 3),
                        "busy_fraction": round(min(1.0, busy / nonempty), 4)
                        if nonempty > 0
                        else None,
                        "requests": self._requests[i],
                        "replaced": self._replaced[i],
                    }
                )
            return {"queue_nonempty_s": round(nonempty, 3), "graders": graders}
