"""The graders' busy fraction: busy time over the time the pool's queue was non-empty."""

from __future__ import annotations

from autorl.tracking.busy import BusyClock


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_busy_fraction_counts_only_time_with_work_waiting() -> None:
    clock = FakeClock()
    busy = BusyClock(2, clock)
    assert busy.fractions() == [None, None]  # nothing ever queued
    busy.begin(0)  # t=0: grader 0 takes a request
    clock.now = 2.0
    busy.begin(1)  # t=2: grader 1 too
    clock.now = 4.0
    busy.end(0)  # t=4: grader 0 done; grader 1 still busy
    clock.now = 6.0
    busy.end(1)  # t=6: queue empty
    clock.now = 100.0  # idle time with an empty queue counts for nobody
    busy.begin(0)
    busy.begin(0)  # two requests on one grader: busy once
    clock.now = 102.0
    busy.end(0)
    clock.now = 104.0
    summary = busy.summary()  # an open interval counts up to now
    assert summary["queue_nonempty_s"] == 10.0
    assert [(g["busy_s"], g["busy_fraction"], g["requests"]) for g in summary["graders"]] == [
        (8.0, 0.8, 3),
        (4.0, 0.4, 1),
    ]
    busy.end(0)
    busy.replaced(1)
    assert busy.fractions() == [0.8, 0.4] and busy.summary()["graders"][1]["replaced"] == 1
