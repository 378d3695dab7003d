"""Live progress of a sweep's cells in the terminal (rich), and the final results table."""

from __future__ import annotations

import sys
from collections import Counter
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from autorl.cell_groups import group_cells
from autorl.records.types import CellRecord

# A sweep with more cells than this is shown live one line per task × agent × driver.
GROUPED_ABOVE = 40


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def cells_table(title: str, cells: list[CellRecord]) -> Table:
    """A table with one row per cell: status, baseline, best so far, improvement (Δ), submissions
    (valid of all), the agent's exit class and the cell's duration in seconds."""
    table = Table(title=title, title_justify="left")
    table.add_column("cell", overflow="fold")
    for column in ("status", "baseline", "best", "Δ", "subs", "exit", "s"):
        table.add_column(
            column, justify="left" if column in ("status", "exit") else "right", no_wrap=True
        )
    style = {"completed": "green", "failed": "red", "cancelled": "yellow", "running": "cyan"}
    for cell in cells:
        table.add_row(
            cell.cell_id,
            f"[{style.get(cell.status, '')}]{cell.status}[/]"
            if cell.status in style
            else cell.status,
            _fmt(cell.baseline),
            _fmt(cell.best_score),
            _fmt(cell.improvement),
            f"{cell.valid_submissions}/{cell.submissions}",
            cell.exit_class or "-",
            _fmt(cell.duration_s, 0),
        )
    counts = Counter(cell.status for cell in cells)
    table.caption = "  ".join(f"{status}: {n}" for status, n in sorted(counts.items()))
    return table


def groups_table(title: str, cells: list[CellRecord]) -> Table:
    """A table with one row per task × agent × driver: cells per state, best score so far, mean
    improvement, and the cells running now (:func:`autorl.cell_groups.group_cells`)."""
    table = Table(title=title, title_justify="left")
    for column in ("task", "agent", "driver", "done", "states", "best", "mean Δ", "running"):
        table.add_column(column, overflow="fold" if column == "running" else "ellipsis")
    for group in group_cells(cells):
        table.add_row(
            *(escape(part) for part in group.key),
            f"{group.done}/{group.total}",
            " ".join(f"{state} {n}" for state, n in sorted(group.counts.items())),
            _fmt(group.best),
            _fmt(group.mean_improvement),
            escape(", ".join(group.running)) or "-",
        )
    counts = Counter(cell.status for cell in cells)
    table.caption = "  ".join(f"{status}: {n}" for status, n in sorted(counts.items()))
    return table


def live_table(title: str, cells: list[CellRecord]) -> Table:
    """The sweep's live table: one row per cell, or per group for a big sweep."""
    if len(cells) > GROUPED_ABOVE:
        return groups_table(title, cells)
    return cells_table(title, cells)


class CellBoard:
    """A live table of the sweep's cells, refreshed by the scheduler loop.

    Falls back to one line per status change when stdout is not a terminal (CI logs).
    """

    def __init__(self, sweep_id: str, *, enabled: bool) -> None:
        """Create the board; it draws nothing until entered."""
        self.sweep_id = sweep_id
        self.console = Console(width=None if sys.stdout.isatty() else 160)
        self.enabled = enabled
        self.live: Live | None = None
        self._last: dict[str, str] = {}

    def __enter__(self) -> CellBoard:
        if self.enabled and self.console.is_terminal:
            self.live = Live(
                cells_table(f"sweep {self.sweep_id}", []),
                console=self.console,
                refresh_per_second=2,
            )
            self.live.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.live is not None:
            self.live.__exit__(kind, error, tb)
            self.live = None

    def note(self, message: str) -> None:
        """Print a one-off message above the table."""
        self.console.print(f"[bold]autorl[/]: {message}")

    def refresh(self, cells: list[CellRecord]) -> None:
        """Redraw the table (terminal) or print status changes (non-terminal)."""
        if self.live is not None:
            self.live.update(live_table(f"sweep {self.sweep_id}", cells))
            return
        if not self.enabled:
            return
        for cell in cells:
            state = f"{cell.status} best={_fmt(cell.best_score)} subs={cell.submissions}"
            if self._last.get(cell.cell_id) != state:
                self._last[cell.cell_id] = state
                print(f"[autorl] {cell.cell_id}: {state}", file=sys.stdout, flush=True)
