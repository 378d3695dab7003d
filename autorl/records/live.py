"""The record store's live records: the agent's trace events, resource samples and checkpoints.

A running cell's Workspace actor sends them to the Recorder every few seconds, so the viewer on
the driver's node follows a cell that runs on another node. :class:`LiveRecords` is a part of
:class:`autorl.records.store.RecordStore`, kept here so that each module stays small. Standard
library only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from autorl.records.live_types import CheckpointRecord, ResourceSample, TraceEvent
from autorl.records.store_part import StorePart

_EVENT_FIELDS = tuple(f.name for f in dataclasses.fields(TraceEvent))
_SAMPLE_FIELDS = tuple(f.name for f in dataclasses.fields(ResourceSample))
# A replay (at-least-once delivery) carries the same event or sample: keep the first.
_INSERT_EVENT = (
    f"INSERT INTO trace_events ({', '.join(_EVENT_FIELDS)}) "
    f"VALUES ({', '.join('?' for _ in _EVENT_FIELDS)}) ON CONFLICT (cell_id, attempt, seq) "
    "DO NOTHING"
)
_INSERT_SAMPLE = (
    f"INSERT INTO resource_samples ({', '.join(_SAMPLE_FIELDS)}) "
    f"VALUES ({', '.join('?' for _ in _SAMPLE_FIELDS)}) ON CONFLICT (cell_id, attempt, t) "
    "DO NOTHING"
)
_CHECKPOINT_FIELDS = tuple(f.name for f in dataclasses.fields(CheckpointRecord))
_INSERT_CHECKPOINT = (
    f"INSERT INTO checkpoints ({', '.join(_CHECKPOINT_FIELDS)}) "
    f"VALUES ({', '.join('?' for _ in _CHECKPOINT_FIELDS)}) ON CONFLICT (cell_id, attempt, t) "
    "DO NOTHING"
)
# A page of events or samples, unless the caller asks for fewer.
DEFAULT_LIMIT = 200


class LiveRecords(StorePart):
    """The store's methods for trace events and resource samples (mixed into ``RecordStore``)."""

    def _add_stamped(self, sql: str, records: list[Any], fields: tuple[str, ...]) -> None:
        """Insert ``records`` in one transaction, each filed under its cell's current attempt
        unless it names one."""
        self._check_writable()
        if not records:
            return
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                attempts: dict[str, int] = {}
                rows = []
                for rec in records:
                    attempt = rec.attempt
                    if attempt is None:
                        if rec.cell_id not in attempts:
                            attempts[rec.cell_id] = self._current_attempt(rec.cell_id)
                        attempt = attempts[rec.cell_id]
                    values = (attempt if f == "attempt" else getattr(rec, f) for f in fields)
                    rows.append(tuple(values))
                self._conn.executemany(sql, rows)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def add_trace_events(self, events: list[TraceEvent]) -> None:
        """Store trace events (a replay of a stored ``(cell_id, attempt, seq)`` is a no-op)."""
        self._add_stamped(_INSERT_EVENT, events, _EVENT_FIELDS)

    def list_trace_events(
        self,
        cell_id: str,
        attempt: int | None = None,
        after_seq: int = 0,
        limit: int = DEFAULT_LIMIT,
        *,
        latest: bool = False,
    ) -> list[TraceEvent]:
        """One attempt's (the current by default) trace events after ``after_seq``, in order.

        Args:
            cell_id: The cell.
            attempt: Its attempt; None: the current one.
            after_seq: Only events with a larger ``seq``.
            limit: At most this many.
            latest: The last ``limit`` events instead of the first (still in order).
        """
        if not self._has_table("trace_events"):
            return []
        where, params = self._of_attempt("trace_events", cell_id, attempt)
        order = "DESC" if latest else "ASC"
        rows = self._read(
            f"SELECT * FROM trace_events WHERE {where} AND seq > ? ORDER BY seq {order} LIMIT ?",
            (*params, after_seq, limit),
        )
        events = [TraceEvent(**{f: row[f] for f in _EVENT_FIELDS}) for row in rows]
        return events[::-1] if latest else events

    def add_resource_sample(self, sample: ResourceSample) -> None:
        """Store one resource sample (a replay is a no-op)."""
        self.add_resource_samples([sample])

    def add_resource_samples(self, samples: list[ResourceSample]) -> None:
        """Store resource samples in one transaction (replays are no-ops)."""
        self._add_stamped(_INSERT_SAMPLE, samples, _SAMPLE_FIELDS)

    def list_resource_samples(
        self, cell_id: str, attempt: int | None = None, limit: int = DEFAULT_LIMIT
    ) -> list[ResourceSample]:
        """One attempt's (the current by default) last ``limit`` resource samples, oldest first."""
        if not self._has_table("resource_samples"):
            return []
        where, params = self._of_attempt("resource_samples", cell_id, attempt)
        rows = self._read(
            f"SELECT * FROM resource_samples WHERE {where} ORDER BY t DESC LIMIT ?",
            (*params, limit),
        )
        return [ResourceSample(**{f: row[f] for f in _SAMPLE_FIELDS}) for row in rows][::-1]

    def add_checkpoint(self, record: CheckpointRecord) -> None:
        """Store one checkpoint's record (a replay is a no-op)."""
        self._add_stamped(_INSERT_CHECKPOINT, [record], _CHECKPOINT_FIELDS)

    def list_checkpoints(self, cell_id: str, attempt: int | None = None) -> list[CheckpointRecord]:
        """One attempt's (the current by default) checkpoints, oldest first."""
        if not self._has_table("checkpoints"):
            return []
        where, params = self._of_attempt("checkpoints", cell_id, attempt)
        rows = self._read(f"SELECT * FROM checkpoints WHERE {where} ORDER BY t", params)
        return [
            CheckpointRecord(
                **{f: row[f] for f in _CHECKPOINT_FIELDS} | {"frozen": bool(row["frozen"])}
            )
            for row in rows
        ]
