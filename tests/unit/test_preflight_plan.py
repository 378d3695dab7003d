"""The pre-flight plan's figures on a sweep with known history (a real record store, no Ray)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from autorl.config import plan_sweep
from autorl.preflight_plan import history, make_plan, makespan, seeds_for, welch_power
from autorl.records.store import RecordStore
from autorl.records.types import CellRecord


def _past(tmp: Path, cells: list[dict[str, object]]) -> None:
    """An earlier sweep's store under ``tmp`` with these completed cells."""
    (tmp / "earlier").mkdir(parents=True)
    with RecordStore(tmp / "earlier" / "records.sqlite") as store:
        for n, fields in enumerate(cells):
            base: dict[str, object] = dict(
                sweep_id="earlier",
                cell_id=f"c{n}",
                agent="codex",
                driver="gpt-5",
                task="gsm8k",
                task_version=1,
                model="tiny",
                seed=n,
                budget_s=3600.0,
                status="completed",
            )
            base.update(fields)
            store.upsert_cell(CellRecord(**base))  # type: ignore[arg-type]


def test_welch_power_matches_the_textbook_sample_sizes() -> None:
    # Cohen's d = 1 needs 17 per group, d = 0.5 needs 64 (two-sided, alpha 0.05, power 0.8)
    assert seeds_for(1.0, 1.0, 0.05, 0.8) == 17
    assert seeds_for(0.5, 1.0, 0.05, 0.8) == 64
    assert welch_power(16, 1.0, 1.0, 0.05) < 0.8 <= welch_power(17, 1.0, 1.0, 0.05)
    assert seeds_for(0.001, 1.0, 0.05, 0.8) is None  # past the cap: said, not looped forever


def test_the_plan_learns_tokens_cost_and_spread_from_earlier_cells(tmp_path: Path) -> None:
    # two hours of codex × gpt-5 × gsm8k used 4M input and 0.2M output tokens: 2M / 0.1M per hour
    _past(
        tmp_path,
        [
            dict(duration_s=3600.0, tokens_in=1_000_000, tokens_out=50_000, improvement=0.10),
            dict(duration_s=3600.0, tokens_in=3_000_000, tokens_out=150_000, improvement=0.20),
            dict(agent="opencode", improvement=0.30, duration_s=3600.0, tokens_in=1, tokens_out=1),
            dict(agent="opencode", improvement=0.50, duration_s=3600.0, tokens_in=1, tokens_out=1),
            dict(status="failed", tokens_in=10**9, duration_s=1.0, improvement=9.0),
        ],
    )
    plan = plan_sweep(
        ["agent=codex", "driver=gpt-5", "task=gsm8k,humaneval", "seed=0,1", "cell.gpus=1"]
        + ["budget.seconds=7200", f"out_dir={tmp_path}", "plan.delta=0.1", "plan.prior_sd=0.2"]
    )
    past = history(tmp_path)
    assert len(past) == 4  # the failed cell teaches nothing
    estimate = make_plan(plan.cells, past)
    gsm8k, humaneval = estimate.groups
    assert gsm8k.key == ("gsm8k", "codex", "gpt-5") and gsm8k.rate is not None
    assert gsm8k.rate.source == "measured (2 cells)"
    assert gsm8k.input_tokens == pytest.approx(2 * 2 * 2_000_000)  # 2 cells × 2 h × 2M/h
    assert gsm8k.output_tokens == pytest.approx(2 * 2 * 100_000)
    price = plan.cells[0].config.driver.price_per_mtok
    assert price is not None
    assert gsm8k.cost_usd == pytest.approx(8 * price.input + 0.4 * price.output)
    assert humaneval.rate is not None and humaneval.rate.source == "assumed"
    settings = plan.base_config.plan
    assert humaneval.input_tokens == pytest.approx(4 * settings.assumed_input_tokens_per_hour)
    assert estimate.gpu_hours == pytest.approx(4 * 2.0)  # 4 cells × 1 GPU × 2 h
    # gsm8k's spread: pooled over codex (0.1, 0.2) and opencode (0.3, 0.5)
    pooled = math.sqrt((0.005 * 1 + 0.02 * 1) / 2)
    by_task = {need.task: need for need in estimate.seeds}
    assert by_task["gsm8k"].sd == pytest.approx(pooled) and by_task["gsm8k"].sd_cells == 4
    assert by_task["gsm8k"].seeds == seeds_for(0.1, pooled, 0.05, 0.8)
    assert by_task["humaneval"].sd == 0.2 and by_task["humaneval"].sd_cells == 0
    assert by_task["humaneval"].seeds == seeds_for(0.1, 0.2, 0.05, 0.8)
    assert by_task["gsm8k"].planned == 2


def test_the_makespan_packs_cells_into_the_clusters_gpus(tmp_path: Path) -> None:
    plan = plan_sweep(
        ["task=gsm8k", "seed=0,1,2,3,4", "cell.gpus=2", "budget.seconds=3600"]
        + [f"out_dir={tmp_path}", "plan.cluster_gpus=4", "plan.cluster_cpus=64"]
        + ["scheduler.max_concurrent_cells=100"]
    )
    estimate = make_plan(plan.cells, [])
    # two cells at a time on 4 GPUs: 5 cells take 3 rounds of an hour; the bound is 10 GPU-h / 4
    assert estimate.makespan_s == pytest.approx(3 * 3600)
    assert estimate.packing_bound_s == pytest.approx(10 * 3600 / 4)
    span, unplaceable = makespan(plan.cells, 64, 1, 100)
    assert span is None and len(unplaceable) == 5  # a 2-GPU cell fits on no 1-GPU cluster
