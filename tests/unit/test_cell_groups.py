"""The grouped view of a big sweep: what a group adds up to, and the live table that shows it."""

from __future__ import annotations

from rich.console import Console

from autorl.cell_groups import group_cells
from autorl.progress import GROUPED_ABOVE, live_table
from autorl.records.types import CellRecord


def _cell(n: int, task: str, agent: str, status: str, best: float | None = None) -> CellRecord:
    return CellRecord(
        sweep_id="s", cell_id=f"{task}.{agent}.gpt-5.tiny.s{n}", agent=agent, driver="gpt-5",
        task=task, task_version=1, model="tiny", seed=n, budget_s=60.0, status=status,
        baseline=0.1, best_score=best, improvement=None if best is None else best - 0.1,
    )  # fmt: skip


def _sweep() -> list[CellRecord]:
    cells = [_cell(n, "gsm8k", "codex", "completed", 0.2 + n / 100) for n in range(20)]
    cells += [_cell(n, "gsm8k", "codex", "running") for n in range(20, 23)]
    cells += [_cell(n, "webshop", "opencode", "pending") for n in range(25)]
    return cells


def test_a_group_counts_its_states_and_keeps_its_best_and_running_cells() -> None:
    gsm8k, webshop = group_cells(_sweep())
    assert gsm8k.key == ("gsm8k", "codex", "gpt-5")
    assert gsm8k.counts == {"completed": 20, "running": 3} and gsm8k.done == 20
    assert gsm8k.best == 0.39
    assert gsm8k.mean_improvement is not None
    assert abs(gsm8k.mean_improvement - (0.1 + 0.095)) < 1e-9
    assert gsm8k.running == [f"gsm8k.codex.gpt-5.tiny.s{n}" for n in (20, 21, 22)]
    assert webshop.total == 25 and webshop.done == 0 and webshop.best is None


def test_a_big_sweep_is_shown_one_line_per_group() -> None:
    cells = _sweep()
    assert len(cells) > GROUPED_ABOVE
    console = Console(record=True, width=200)
    console.print(live_table("sweep s", cells))
    text = console.export_text()
    assert "20/23" in text and "0.39" in text and "gsm8k.codex.gpt-5.tiny.s21" in text
    assert "gsm8k.codex.gpt-5.tiny.s3 " not in text  # finished cells get no line of their own
    small = Console(record=True, width=200)
    small.print(live_table("sweep s", cells[:5]))
    assert "gsm8k.codex.gpt-5.tiny.s3" in small.export_text()
