"""The record store's resume events: a cell that lost its node and went on elsewhere.

A cell whose node is lost resumes on another node from its last checkpoint, in the same attempt
(docs/design.md#node-loss). Each resume is one :class:`ResumeEvent` row of ``cell_resumes``; the
cell's record counts them (``node_resumes``) and adds up the time they lost (``lost_s``). Whatever
the lost node was scoring when it died is marked ``interrupted`` (:meth:`ResumeRecords.
interrupt_submissions`): the snapshot it was scoring died with the node. :class:`ResumeRecords` is a
part of :class:`autorl.records.store.RecordStore`, kept here so that each module stays small.
Standard library only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from autorl.records.store_part import StorePart


@dataclass(frozen=True)
class ResumeEvent:
    """One resume of a cell on another node, from one of its checkpoints.

    Attributes:
        cell_id: The cell.
        seq: The resume's number in its attempt (from 1); with ``cell_id`` and ``attempt`` the key.
        t: Unix time the scheduler placed the resume.
        checkpoint_id: The checkpoint the workspace is restored from.
        checkpoint_t: Unix time that checkpoint was taken.
        time_used_s: The agent's time used up to that checkpoint (charged to its budget).
        lost_s: Wall time from that checkpoint to the loss being seen: the agent's work in it is
            lost, and not charged to its budget (driver tokens spent in it stay charged).
        from_node: The node that was lost, if known.
        to_node: The node the cell resumes on, once placed.
        reason: What the scheduler saw (the Ray error's last line).
        attempt: The cell's attempt (see :attr:`autorl.records.types.SubmissionRecord.attempt`).
    """

    cell_id: str
    seq: int
    t: float
    checkpoint_id: str
    checkpoint_t: float
    time_used_s: float
    lost_s: float
    from_node: str | None = None
    to_node: str | None = None
    reason: str = ""
    attempt: int | None = None


_RESUME_FIELDS = tuple(f.name for f in dataclasses.fields(ResumeEvent))
_UPSERT_RESUME = (
    f"INSERT INTO cell_resumes ({', '.join(_RESUME_FIELDS)}) "
    f"VALUES ({', '.join('?' for _ in _RESUME_FIELDS)}) ON CONFLICT (cell_id, attempt, seq) "
    "DO UPDATE SET to_node = excluded.to_node"
)
IN_FLIGHT_STATUSES = ("queued", "scoring")


class ResumeRecords(StorePart):
    """The store's methods for resume events (mixed into ``RecordStore``)."""

    def add_resume(self, event: ResumeEvent) -> None:
        """Store a resume event (filed under the cell's current attempt unless it names one) and
        count it on the cell's record; a replay only updates ``to_node``."""
        self._check_writable()
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                if event.attempt is None:
                    event = dataclasses.replace(event, attempt=self._current_attempt(event.cell_id))
                self._conn.execute(_UPSERT_RESUME, tuple(getattr(event, f) for f in _RESUME_FIELDS))
                self._conn.execute(
                    "UPDATE cells SET node_resumes = (SELECT COUNT(*) FROM cell_resumes r WHERE "
                    "r.cell_id = cells.cell_id AND r.attempt = ?), lost_s = (SELECT "
                    "COALESCE(SUM(lost_s), 0) FROM cell_resumes r WHERE r.cell_id = cells.cell_id "
                    "AND r.attempt = ?) WHERE cell_id = ?",
                    (event.attempt, event.attempt, event.cell_id),
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def list_resumes(self, cell_id: str, attempt: int | None = None) -> list[ResumeEvent]:
        """One attempt's (the current by default) resume events, first first."""
        if not self._has_table("cell_resumes"):
            return []
        where, params = self._of_attempt("cell_resumes", cell_id, attempt)
        rows = self._read(f"SELECT * FROM cell_resumes WHERE {where} ORDER BY seq", params)
        return [ResumeEvent(**{f: row[f] for f in _RESUME_FIELDS}) for row in rows]

    def interrupt_submissions(self, cell_id: str, error: str) -> list[int]:
        """Mark the current attempt's submissions still queued or being scored ``interrupted``
        with ``error``; returns their ids."""
        self._check_writable()
        where, params = self._of_attempt("submissions", cell_id, None)
        marks = ", ".join("?" for _ in IN_FLIGHT_STATUSES)
        with self._lock:
            rows = self._conn.execute(
                f"UPDATE submissions SET status = 'interrupted', error = ? WHERE {where} AND "
                f"status IN ({marks}) RETURNING submission_id",
                (error, *params, *IN_FLIGHT_STATUSES),
            ).fetchall()
        return sorted(int(r[0]) for r in rows)

    def last_trace_seq(self, cell_id: str) -> int:
        """The largest trace-event number the current attempt has stored (0: none)."""
        if not self._has_table("trace_events"):
            return 0
        where, params = self._of_attempt("trace_events", cell_id, None)
        rows = self._read(f"SELECT COALESCE(MAX(seq), 0) FROM trace_events WHERE {where}", params)
        return int(rows[0][0])

    def driver_usage_totals(self, cell_id: str) -> tuple[int, int, float] | None:
        """``(tokens_in, tokens_out, cost_usd)`` over the current attempt's driver calls (every
        node's gateway that served it); None when it made none."""
        where, params = self._of_attempt("driver_calls", cell_id, None)
        rows = self._read(
            "SELECT COUNT(*), COALESCE(SUM(tokens_in), 0), COALESCE(SUM(tokens_out), 0), "
            f"COALESCE(SUM(cost_usd), 0) FROM driver_calls WHERE {where}",
            params,
        )
        count, tokens_in, tokens_out, cost = rows[0]
        if not count:
            return None
        return int(tokens_in), int(tokens_out), float(cost)
