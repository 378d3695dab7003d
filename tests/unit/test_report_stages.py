"""Scores per submission over seeds (`autorl.report.stages`): what the sweep prints after a
multi-seed run."""

from __future__ import annotations

import pytest
from rich.console import Console

from autorl.records.types import CellRecord, SubmissionRecord
from autorl.report.stages import stage_statistics, stages_table


def _cell(
    task: str,
    seed: int,
    baseline: float,
    best: float | None,
    *,
    status: str = "completed",
    feedback: str | None = "test",
) -> CellRecord:
    return CellRecord(
        sweep_id="s",
        cell_id=f"{task}.s{seed}",
        agent="scripted",
        driver="none",
        task=task,
        task_version=1,
        model="small",
        seed=seed,
        budget_s=60,
        status=status,
        baseline=baseline,
        best_score=best,
        improvement=None if best is None else best - baseline,
        feedback=feedback,
    )


def _sub(
    cell: CellRecord,
    index: int,
    path: str,
    score: float | None,
    *,
    status: str = "scored",
    test: float | None = None,
) -> SubmissionRecord:
    return SubmissionRecord(
        cell_id=cell.cell_id,
        submission_id=index,
        model_path=path,
        status=status,
        score=score,
        test_score=test,
    )


def test_stage_means_and_standard_errors_per_configuration() -> None:
    a = [_cell("gsm8k", 0, 0.0, 0.2), _cell("gsm8k", 1, 0.0, 0.3), _cell("gsm8k", 2, 0.0, 0.1)]
    failed = _cell("gsm8k", 3, 0.0, 0.9, status="failed")  # not a result: left out
    b = [_cell("webshop", 0, 0.1, None), _cell("webshop", 1, 0.1, 0.2, feedback="dev")]
    subs = {
        a[0].cell_id: [_sub(a[0], 1, "output/v1", 0.2), _sub(a[0], 2, "output/v2", 0.1)],
        a[1].cell_id: [
            _sub(a[1], 1, "output/v1", 0.3),
            _sub(a[1], 2, "output/v2", 0.3, status="duplicate"),
        ],
        a[2].cell_id: [
            _sub(a[2], 1, "output/v1", 0.1),
            _sub(a[2], 2, "output/v2", None, status="invalid"),
        ],
        failed.cell_id: [_sub(failed, 1, "output/v1", 0.9)],
        # dev feedback: the agent saw 0.7, the test split says 0.2; a submission not yet tested is
        # left out.
        b[1].cell_id: [_sub(b[1], 1, "output/v1", 0.7, test=0.2), _sub(b[1], 2, "output/v2", 0.9)],
    }
    gsm8k, webshop = stage_statistics([*a, failed, *b], subs)
    assert gsm8k.label == "gsm8k/scripted/none/small" and gsm8k.seeds == [0, 1, 2]
    assert gsm8k.stages["output/v1"].mean == pytest.approx(0.2) and gsm8k.stages["output/v1"].n == 3
    assert gsm8k.stages["output/v2"].n == 2 and gsm8k.stages["output/v2"].mean == pytest.approx(0.2)
    assert gsm8k.improvement.mean == pytest.approx(0.2) and gsm8k.improvement.se == pytest.approx(
        0.057735, rel=1e-4
    )
    assert gsm8k.clears_two_se is True
    assert (
        webshop.stages["output/v1"].mean == pytest.approx(0.2) and "output/v2" not in webshop.stages
    )
    assert webshop.improvement.mean == pytest.approx(0.05)  # no valid submission counts as 0
    assert webshop.clears_two_se is False  # 0.05 ± 0.05


def test_table_marks_stages_a_seed_missed() -> None:
    cells = [_cell("gsm8k", 0, 0.0, 0.2), _cell("gsm8k", 1, 0.0, 0.4)]
    subs = {
        cells[0].cell_id: [_sub(cells[0], 1, "output/v1", 0.2)],
        cells[1].cell_id: [
            _sub(cells[1], 1, "output/v1", 0.4),
            _sub(cells[1], 2, "output/v2", 0.3),
        ],
    }
    console = Console(width=200, record=True)
    console.print(stages_table("t", stage_statistics(cells, subs)))
    text = console.export_text()
    assert "0.30 ± 0.10" in text and "0.30 (n=1)" in text and "gsm8k/scripted/none/small" in text
