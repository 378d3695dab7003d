"""bench/node_loss.py: the node-loss simulation's figures on cases whose answer is known, and the
checkpoint cost's extrapolation."""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "node_loss.py"


def _script() -> ModuleType:
    if "node_loss" in sys.modules:
        return sys.modules["node_loss"]
    spec = importlib.util.spec_from_file_location("node_loss", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["node_loss"] = module  # its dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


def _model(**changes: float) -> object:
    figures = dict(
        work_s=36000.0,
        every_s=600.0,
        setup_s=100.0,
        restore_s=20.0,
        checkpoint_share=0.0,
        tokens_per_hour=3600.0,
    )
    return _script().LossModel(**{**figures, **changes})


def test_a_failure_keeps_the_work_up_to_the_last_checkpoint_only_on_resume() -> None:
    kept = _script().kept_after_failure
    assert kept("resume", 1799.0, 600.0) == 1200.0
    assert kept("resume", 599.0, 600.0) == 0.0
    assert kept("restart", 35999.0, 600.0) == 0.0
    with pytest.raises(ValueError, match="neither"):
        kept("retry", 10.0, 600.0)


def test_no_failures_lose_nothing_but_the_checkpoints_cost() -> None:
    script = _script()
    model = _model(checkpoint_share=0.01)
    restart = script.simulate("restart", model, 0.0, 5, 0)
    resume = script.simulate("resume", model, 0.0, 5, 0)
    assert restart.failures_per_cell == 0 and restart.lost_s_per_cell == 0.0
    assert resume.failures_per_cell == 0
    assert resume.checkpoint_s_per_cell == pytest.approx(360.0)
    assert resume.lost_s_per_cell == pytest.approx(360.0)


def test_one_failure_at_a_known_time_loses_what_each_mode_should() -> None:
    """A failure 5000 s into the first attempt, none after: restart redoes 4900 s of work and its
    setup; resume redoes the 100 s since the checkpoint at 4800 s, plus setup and restore."""
    script = _script()

    class OneFailure(random.Random):
        def __init__(self) -> None:
            super().__init__(0)
            self.draws = iter([5000.0])

        def expovariate(self, lambd: float) -> float:
            return next(self.draws, math.inf)

    model = _model()
    failures, wall, redone = script.simulate_cell("restart", model, 1.0, OneFailure())
    assert (failures, redone) == (1, 4900.0)
    assert wall == pytest.approx(5000.0 + 100.0 + 36000.0)
    failures, wall, redone = script.simulate_cell("resume", model, 1.0, OneFailure())
    assert (failures, redone) == (1, 100.0)
    assert wall == pytest.approx(5000.0 + 100.0 + 20.0 + (36000.0 - 4800.0))


def test_rare_failures_cost_resume_half_an_interval_and_restart_half_the_cell() -> None:
    """At a low rate a cell sees at most one failure, uniform over its work: resume redoes
    every_s / 2 on average, restart work_s / 2; tokens follow the redone hours."""
    script = _script()
    model = _model(setup_s=0.0, restore_s=0.0)
    resume = script.simulate("resume", model, 0.01, 20000, 1)
    restart = script.simulate("restart", model, 0.01, 20000, 1)
    assert resume.lost_work_s_per_failure == pytest.approx(300.0, rel=0.1)
    assert restart.lost_work_s_per_failure == pytest.approx(18000.0, rel=0.1)
    assert resume.lost_tokens_per_failure == pytest.approx(resume.lost_work_s_per_failure)
    assert resume.lost_s_per_failure == pytest.approx(resume.lost_work_s_per_failure)
    # Same seed, same figures: the printed table is reproducible.
    assert script.simulate("resume", model, 0.01, 20000, 1) == resume


def test_the_extrapolation_counts_one_full_copy_then_incremental_ones() -> None:
    extrapolate = _script().extrapolate
    assert extrapolate(30.0, 1.0, 600.0, 500.0) == 0.0  # no checkpoint within the cell
    assert extrapolate(30.0, 1.0, 600.0, 43200.0) == pytest.approx((30.0 + 71 * 1.0) / 43200.0)
