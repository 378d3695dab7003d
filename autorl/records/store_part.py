"""What a part of the record store kept in a module of its own (:mod:`autorl.records.live`,
:mod:`autorl.records.resumes`) uses of :class:`autorl.records.store.RecordStore`. Standard library
only."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any


class StorePart:
    """A mixin of ``RecordStore``: its connection, lock and helpers, declared for the type
    checker (the store provides them)."""

    if TYPE_CHECKING:
        _conn: sqlite3.Connection
        _lock: threading.Lock

        def _check_writable(self) -> None: ...
        def _has_table(self, table: str) -> bool: ...
        def _current_attempt(self, cell_id: str) -> int: ...
        def _read(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]: ...
        def _of_attempt(
            self, table: str, cell_id: str, attempt: int | None
        ) -> tuple[str, tuple[Any, ...]]: ...
