"""The grid `all` makes, the pairs it leaves out, and cells composed once per part (no Ray)."""

from __future__ import annotations

import dataclasses

import pytest

from autorl import sweep
from autorl.config import compose, plan_sweep
from autorl.errors import ConfigError
from autorl.grid import AXES, CellSpec
from autorl.registry import grid_names, option_names


def _full(cell: CellSpec, passthrough: list[str]) -> object:
    """What composing the cell by itself gives (the slow path the splice must equal)."""
    values = {
        "agent": cell.agent,
        "driver": cell.driver,
        "task": cell.task,
        "model": cell.model,
        "seed": cell.seed,
    }
    composed = compose([f"{axis}={values[axis]}" for axis in AXES] + passthrough)
    return dataclasses.replace(composed, sweep_id=cell.sweep_id)


def test_all_is_the_benchmarks_agents_and_llm_drivers() -> None:
    agents, drivers = grid_names("agent"), grid_names("driver")
    assert "command" in option_names("agent") and "command" not in agents
    assert {"scripted", "codex", "claude-code", "gemini-cli", "opencode", "openhands"} <= set(
        agents
    )
    assert {"none", "local"} <= set(option_names("driver")) and not {"none", "local"} & set(drivers)
    assert "gpt-5" in drivers


def test_all_leaves_out_the_pairs_that_cannot_run_and_lists_them() -> None:
    plan = plan_sweep(["agent=all", "driver=all", "task=gsm8k", "dry_run=true"])
    pairs = {(c.agent, c.driver) for c in plan.cells}
    left = {(o.agent, o.driver): o.reason for o in plan.left_out}
    assert ("gemini-cli", "gemini-2.5-flash") in pairs
    assert ("gemini-cli", "gpt-5") in left and "does not serve" in left[("gemini-cli", "gpt-5")]
    assert ("scripted", "gpt-5") in left and "calls no driver" in left[("scripted", "gpt-5")]
    assert not pairs & set(left)
    assert len(pairs) + len(left) == len(grid_names("agent")) * len(grid_names("driver"))


def test_a_named_pair_that_cannot_run_is_still_refused() -> None:
    with pytest.raises(ConfigError, match="needs a driver LLM, but driver=none"):
        plan_sweep(["agent=codex", "driver=none"])
    with pytest.raises(ConfigError, match="does not serve"):
        plan_sweep(["agent=gemini-cli", "driver=gpt-5"])
    # a named agent that calls no LLM may still be given one (a probe of the gateway)
    plan = plan_sweep(["agent=command", "driver=gpt-5", "agent.command=[true]"])
    assert [(c.agent, c.driver) for c in plan.cells] == [("command", "gpt-5")]


def test_a_driver_axis_of_all_against_a_named_agent_leaves_out_its_impossible_drivers() -> None:
    plan = plan_sweep(["agent=gemini-cli", "driver=all"])
    assert {c.driver for c in plan.cells} == {"gemini-2.5-flash"}
    assert {o.driver for o in plan.left_out} == set(grid_names("driver")) - {"gemini-2.5-flash"}


def test_spliced_cells_equal_cells_composed_one_by_one() -> None:
    passthrough = ["budget.seconds=120", "driver.budget.max_tokens=5000"]
    plan = plan_sweep(
        ["agent=codex,opencode", "driver=gpt-5,claude-sonnet-4.5", "task=gsm8k,webshop"]
        + ["model=tiny,small", "seed=0,3", *passthrough]
    )
    assert len(plan.cells) == 32
    for cell in plan.cells:
        assert cell.config == _full(cell, passthrough), cell.cell_id
        assert cell.config.seed == cell.seed and cell.config.task.name == cell.task
    # each cell owns its config: changing one changes no other
    plan.cells[0].config.task.build["fixture"] = {"changed": True}
    assert plan.cells[1].config.task.build != {"fixture": {"changed": True}}


def test_an_override_that_interpolates_across_groups_composes_each_cell() -> None:
    passthrough = ["budget.seconds=${task.budget_s}"]
    plan = plan_sweep(["task=gsm8k,webshop", *passthrough])
    budgets = {c.task: c.config.budget.seconds for c in plan.cells}
    assert budgets["gsm8k"] != budgets["webshop"]
    for cell in plan.cells:
        assert cell.config == _full(cell, passthrough)


def test_a_big_grid_prints_one_line_per_group(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(key, "test")
    code = sweep.main(
        ["agent=codex,opencode", "driver=gpt-5", "task=all", "seed=0,1,2,3", "dry_run=true"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "48 cells in 12 groups" in out
    assert "gsm8k.codex.gpt-5.tiny.s3" not in out  # no per-cell lines
    assert "pre-flight plan" in out and "seeds for gsm8k" in out
