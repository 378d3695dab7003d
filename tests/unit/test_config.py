"""Axis parsing, grid expansion, config composition and the cheap CLIs (no Ray, no torch)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from autorl import ls, sweep
from autorl.config import compose, expand_axes, parse_argv, plan_sweep, sweep_id_for
from autorl.errors import ConfigError
from autorl.registry import GROUPS, list_options, option_names


def test_parse_argv_splits_axes_from_passthrough() -> None:
    axes, rest = parse_argv(["task=gsm8k", "seed=0,1", "budget.seconds=60", "agent=all"])
    assert axes == {"task": ["gsm8k"], "seed": ["0", "1"], "agent": ["all"]}
    assert rest == ["budget.seconds=60"]


def test_comma_list_on_a_non_axis_is_refused() -> None:
    with pytest.raises(ConfigError, match="only the axes"):
        parse_argv(["budget.seconds=60,120"])


def test_all_expands_to_every_registered_option() -> None:
    grid = expand_axes({"task": ["all"], "model": ["all"]}, {"agent": "scripted", "driver": "none", "task": "gsm8k", "model": "tiny", "seed": 0})
    assert grid["task"] == option_names("task")
    assert grid["model"] == option_names("model") and "tiny" in grid["model"]
    assert grid["seed"] == ["0"]


def test_unknown_name_fails_with_suggestion_and_valid_names() -> None:
    with pytest.raises(ConfigError) as error:
        plan_sweep(["task=gsm8kk"])
    message = str(error.value)
    assert "Did you mean: gsm8k" in message
    assert f"Valid task names: {', '.join(option_names('task'))}" in message


def test_bad_seed_and_bad_override_fail_before_anything_starts() -> None:
    with pytest.raises(ConfigError, match="seed must be an integer"):
        plan_sweep(["seed=x"])
    with pytest.raises(ConfigError, match="invalid override"):
        plan_sweep(["no_such_key=1"])


@pytest.mark.parametrize("group", GROUPS)
def test_every_option_of_every_group_composes(group: str) -> None:
    for option in list_options(group):
        cfg = compose([f"{group}={option.name}"])
        assert cfg[group]["name"] == option.name, f"conf/{group}/{option.name}.yaml must set name: {option.name}"
        assert option.description, f"conf/{group}/{option.name}.yaml needs a description"


def test_plan_expands_the_cartesian_product() -> None:
    plan = plan_sweep(["seed=0,1,2", "model=tiny,qwen2.5-7b", "dry_run=true"])
    assert len(plan.cells) == 6
    assert len({c.cell_id for c in plan.cells}) == 6
    assert {c.config["model"]["name"] for c in plan.cells} == {"tiny", "qwen2.5-7b"}
    assert all(c.config["sweep_id"] == plan.sweep_id for c in plan.cells)


def test_sweep_id_is_stable_and_ignores_presentation_overrides() -> None:
    assert plan_sweep([]).sweep_id == "default"
    assert plan_sweep(["out_dir=/tmp/elsewhere", "progress=false", "cluster.num_cpus=2"]).sweep_id == "default"
    changed = plan_sweep(["budget.seconds=60"]).sweep_id
    assert changed != "default" and changed == sweep_id_for(None, ["budget.seconds=60"])


def test_passthrough_reaches_every_cell() -> None:
    plan = plan_sweep(["seed=0,1", "budget.seconds=77"])
    assert [c.budget_s for c in plan.cells] == [77.0, 77.0]


def test_dry_run_prints_the_cells_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert sweep.main(["task=gsm8k", "seed=0,1", "dry_run=true"]) == 0
    out = capsys.readouterr().out
    assert "2 cell(s)" in out and out.count("scripted") >= 2


def test_sweep_cli_reports_unknown_names_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert sweep.main(["agent=nope"]) == 2
    assert "unknown agent 'nope'" in capsys.readouterr().out


def test_ls_lists_each_kind(capsys: pytest.CaptureFixture[str]) -> None:
    for kind, expected in [("tasks", "gsm8k"), ("agents", "scripted"), ("drivers", "none"), ("models", "tiny")]:
        assert ls.main([kind]) == 0
        assert expected in capsys.readouterr().out


def test_cli_modules_import_nothing_heavy() -> None:
    code = (
        "import sys, autorl.sweep, autorl.ls, autorl.config, autorl.tasks;"
        "heavy=[m for m in ('torch','ray','transformers','trl','vllm','datasets') if m in sys.modules];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
