"""A sweep that has spent its ``budget.sweep_max_cost_usd`` starts no new cell, says so, and
leaves the cells it did not start resumable (a real Ray sweep and record store)."""

from __future__ import annotations

from pathlib import Path

from autorl.records.store import RecordStore
from autorl.records.types import CellRecord
from tests.integration.conftest import query, run_sweep_cli


def test_a_sweep_at_its_spend_cap_starts_no_new_cell(
    tmp_path: Path, ray_tmp: Path, cache_dir: Path
) -> None:
    out = tmp_path / "out"
    (out / "capped").mkdir(parents=True)
    # An earlier run of this sweep already spent $5 with its driver.
    with RecordStore(out / "capped" / "records.sqlite") as store:
        store.upsert_cell(
            CellRecord(
                sweep_id="capped", cell_id="earlier.cell", agent="codex", driver="gpt-5",
                task="gsm8k", task_version=1, model="tiny", seed=9, budget_s=60.0,
                status="completed", cost_usd=5.0,
            )
        )  # fmt: skip
    done = run_sweep_cli(
        out, ray_tmp, cache_dir,
        "sweep_id=capped", "sandbox.mode=none", "seed=0,1", "progress=false",
        "budget.sweep_max_cost_usd=4",
    )  # fmt: skip
    log = done.stdout + done.stderr
    assert done.returncode == 1, log  # the cells it did not start did not complete
    assert "at its cap budget.sweep_max_cost_usd=4: no new cell starts" in log
    assert f"watch it live: python -m autorl.view {out / 'capped'}" in log
    rows = query(
        out / "capped" / "records.sqlite",
        "SELECT cell_id, status, attempts, error FROM cells WHERE cell_id != 'earlier.cell'",
    )
    assert len(rows) == 2
    for cell_id, status, attempts, error in rows:
        assert status == "cancelled" and attempts == 0, (cell_id, status, attempts)
        assert "sweep_max_cost_usd" in str(error)
