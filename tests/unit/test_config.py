"""Axis parsing, grid expansion, typed config composition, errors before Ray, and the cheap CLIs
(no Ray, no torch)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autorl import ls, sweep
from autorl.agent_schema import AgentMode, ApiProtocol, CliAgentConfig, ScriptedAgentConfig
from autorl.config import (
    check_combinations,
    compose,
    expand_axes,
    load_driver_config,
    parse_argv,
    plan_sweep,
    sweep_id_for,
)
from autorl.errors import ConfigError
from autorl.registry import CONF_DIR, GROUPS, list_options, option_names
from autorl.schema import DriverConfig, Provider, RunConfig, WandbMode
from autorl.tasks import get_task


def test_parse_argv_splits_axes_from_passthrough() -> None:
    axes, rest = parse_argv(["task=gsm8k", "seed=0,1", "budget.seconds=60", "agent=all"])
    assert axes == {"task": ["gsm8k"], "seed": ["0", "1"], "agent": ["all"]}
    assert rest == ["budget.seconds=60"]


def test_comma_list_on_a_non_axis_is_refused() -> None:
    with pytest.raises(ConfigError, match="only the axes"):
        parse_argv(["budget.seconds=60,120"])


def test_all_expands_to_every_registered_option() -> None:
    grid = expand_axes(
        {"task": ["all"], "model": ["all"]},
        {"agent": "scripted", "driver": "none", "task": "gsm8k", "model": "tiny", "seed": 0},
    )
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
    with pytest.raises(
        ConfigError, match="invalid override 'no_such_key=1': unknown key no_such_key"
    ):
        plan_sweep(["no_such_key=1"])


@pytest.mark.parametrize("group", GROUPS)
def test_every_option_of_every_group_composes(group: str) -> None:
    for option in list_options(group):
        cfg = compose([f"{group}={option.name}"])
        assert getattr(cfg, group).name == option.name, (
            f"conf/{group}/{option.name}.yaml must set name: {option.name}"
        )
        assert option.description, f"conf/{group}/{option.name}.yaml needs a description"


def test_a_cell_carries_the_typed_config() -> None:
    plan = plan_sweep(["agent=scripted,codex,claude-code", "driver=gpt-5", "dry_run=true"])
    configs = {cell.agent: cell.config for cell in plan.cells}
    assert all(isinstance(c, RunConfig) and c.sweep_id == plan.sweep_id for c in configs.values())
    scripted, codex, claude = (
        configs["scripted"].agent,
        configs["codex"].agent,
        configs["claude-code"].agent,
    )
    assert (
        isinstance(scripted, ScriptedAgentConfig)
        and scripted.sft.max_steps > 0
        and scripted.protocol is None
    )
    assert (
        type(codex) is CliAgentConfig
        and codex.mode == AgentMode.free
        and codex.protocol == ApiProtocol.responses
    )
    assert type(claude) is CliAgentConfig and claude.tool_timeout_s is None  # the budget's
    driver = configs["codex"].driver
    assert (
        driver.provider == Provider.openai and driver.provider == "openai"
    )  # a StrEnum equals its value
    assert driver.protocols[ApiProtocol.chat] == driver.base_url  # ${driver.base_url} resolved
    assert (
        configs["codex"].tracking.wandb.mode == WandbMode.offline
        and configs["codex"].cell.cpus == 1.0
    )
    # Plain data for the record store: enums become their values.
    stored = json.loads(json.dumps(dataclasses.asdict(configs["codex"])))
    assert (
        stored["agent"]["mode"] == "free"
        and stored["driver"]["protocols"]["chat"] == driver.base_url
    )


def test_plan_expands_the_cartesian_product() -> None:
    plan = plan_sweep(["seed=0,1,2", "model=tiny,qwen2.5-7b", "dry_run=true"])
    assert len(plan.cells) == 6
    assert len({c.cell_id for c in plan.cells}) == 6
    assert {c.config.model.name for c in plan.cells} == {"tiny", "qwen2.5-7b"}
    assert all(c.config.sweep_id == plan.sweep_id for c in plan.cells)


def test_sweep_id_is_stable_and_ignores_presentation_overrides() -> None:
    assert plan_sweep([]).sweep_id == "default"
    assert (
        plan_sweep(["out_dir=/tmp/elsewhere", "progress=false", "cluster.num_cpus=2"]).sweep_id
        == "default"
    )
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
    assert "unknown agent 'nope'" in capsys.readouterr().err
    assert (
        sweep.main(["cluster=nowhere"]) == 2
    )  # a group that is not an axis is checked by name too
    assert (
        "unknown cluster 'nowhere'. Valid cluster names: gpu, jobs-local, local"
        in capsys.readouterr().err
    )


# ---- mistakes are refused before Ray starts, naming the key and the fix
# ---------------------------


def test_a_value_for_a_group_of_settings_exits_2_before_ray_naming_the_switch(
    tmp_path: Path,
) -> None:
    # `python -m autorl.sweep tracking=wandb`, with a report of what the process had imported when
    # it exited.
    code = (
        "import runpy, sys\n"
        "try:\n"
        "    runpy.run_module('autorl.sweep', run_name='__main__', alter_sys=True)\n"
        "finally:\n"
        "    print('imported ray:', 'ray' in sys.modules, file=sys.stderr)\n"
    )
    out_dir = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", code, "tracking=wandb", f"out_dir={out_dir}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        "tracking.wandb.enabled=true" in done.stderr
        and "tracking is a group of settings" in done.stderr
    )
    assert "imported ray: False" in done.stderr and "Traceback" not in done.stderr
    assert not out_dir.exists()  # nothing was written either
    # The same as the literal command.
    literal = subprocess.run(
        [sys.executable, "-m", "autorl.sweep", "tracking=wandb", f"out_dir={out_dir}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert literal.returncode == 2 and "tracking.wandb.enabled" in literal.stderr


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["tracking.wandb=true"], "Did you mean tracking.wandb.enabled=true?"),
        (["tracking.report=off"], "Did you mean tracking.report.enabled=false?"),
        (
            ["budget=60"],
            "budget is a group of settings (seconds, kill_grace_s, sweep_max_cost_usd), "
            "not a single value; set one of its settings instead, e.g. budget.seconds=60",
        ),
    ],
)
def test_a_value_for_a_group_names_what_to_set_instead(overrides: list[str], expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        plan_sweep(overrides)
    assert expected in str(error.value)


def test_a_misspelled_key_names_the_full_key_and_the_right_one() -> None:
    with pytest.raises(ConfigError) as error:
        plan_sweep(["budget.secnds=10"])
    assert "unknown key budget.secnds. Did you mean budget.seconds?" in str(error.value)
    assert "The keys of budget are: seconds, kill_grace_s" in str(error.value)
    with pytest.raises(
        ConfigError,
        match=r"unknown key agent\.sft\.max_stepz\. Did you mean agent\.sft\.max_steps\?",
    ):
        plan_sweep(["agent.sft.max_stepz=3"])
    # A key the scripted agent's settings renamed to TRL's name gets the new one.
    with pytest.raises(
        ConfigError, match=r"unknown key agent\.sft\.steps\. Did you mean agent\.sft\.max_steps\?"
    ):
        plan_sweep(["agent.sft.steps=3"])
    # A task's own option dicts are open (their keys are the task's), but a typo still gets its fix.
    with pytest.raises(
        ConfigError,
        match=r"unknown key task\.eval\.fixture\.max_new_tokns\. "
        r"Did you mean task\.eval\.fixture\.max_new_tokens\?",
    ):
        plan_sweep(["task.eval.fixture.max_new_tokns=8"])


def test_a_wrong_type_names_the_type() -> None:
    with pytest.raises(ConfigError) as error:
        plan_sweep(["cell.cpus=many"])
    assert "cell.cpus must be a number (float), got 'many'" in str(error.value)
    with pytest.raises(
        ConfigError,
        match=r"model\.kind must be one of tiny, small, hub, got 'hubb'\. "
        r"Did you mean model\.kind=hub\?",
    ):
        plan_sweep(["model.kind=hubb"])
    with pytest.raises(ConfigError, match=r"tracking\.wandb\.enabled must be true or false"):
        plan_sweep(["tracking.wandb.enabled=maybe"])


def test_a_key_of_another_kind_of_agent_is_refused_per_cell() -> None:
    (cell,) = plan_sweep(["agent=scripted", "agent.sft.max_steps=3"]).cells
    assert cell.config.agent.sft.max_steps == 3  # type: ignore[attr-defined]
    with pytest.raises(
        ConfigError,
        match=r"agent=codex: invalid override 'agent\.sft\.max_steps=3': "
        r"unknown key agent\.sft",
    ):
        plan_sweep(["agent=scripted,codex", "agent.sft.max_steps=3"])


def _plugin_option(root: Path, group: str, name: str, body: dict[str, object], schema: str) -> None:
    folder = root / "conf" / group
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(
        yaml.safe_dump(
            {"defaults": [schema, "_self_"], "name": name, "description": "test option", **body}
        )
    )


def test_an_unknown_key_inside_a_driver_or_agent_option_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good_driver = yaml.safe_load((CONF_DIR / "driver" / "gpt-5.yaml").read_text())
    del good_driver["defaults"], good_driver["name"], good_driver["description"]
    _plugin_option(
        tmp_path, "driver", "typo-driver", good_driver | {"gateway": {"max_atempts": 3}}, "_base"
    )
    # codex.yaml's fields with those of the CLI base it lists, on the bare schema.
    codex = {
        k: v
        for k, v in yaml.safe_load((CONF_DIR / "agent" / "_cli_base.yaml").read_text()).items()
        if k != "defaults"
    } | yaml.safe_load((CONF_DIR / "agent" / "_base.yaml").read_text())
    codex |= yaml.safe_load((CONF_DIR / "agent" / "codex.yaml").read_text())
    del codex["defaults"], codex["name"], codex["description"]
    _plugin_option(tmp_path, "agent", "typo-agent", codex | {"sft": {"steps": 3}}, "_cli")
    _plugin_option(
        tmp_path, "agent", "short-agent", {k: v for k, v in codex.items() if k != "mode"}, "_cli"
    )
    monkeypatch.setenv("AUTORL_PLUGIN_PATH", str(tmp_path))
    with pytest.raises(ConfigError) as error:
        plan_sweep(["driver=typo-driver"])
    message = str(error.value)
    assert (
        "typo-driver.yaml" in message
        and "unknown key driver.gateway.max_atempts. Did you mean driver.gateway.max_attempts?"
        in message
    )
    with pytest.raises(ConfigError, match=r"typo-agent\.yaml\): unknown key agent\.sft\."):
        plan_sweep(["agent=typo-agent", "driver=gpt-5"])
    with pytest.raises(
        ConfigError, match=r"agent\.mode has no value: set it in .*short-agent\.yaml"
    ):
        plan_sweep(["agent=short-agent", "driver=gpt-5"])


def test_drivers_share_one_base_and_load_through_one_loader() -> None:
    assert "_base" not in option_names("driver")  # a shared part, not an option
    for path in sorted((CONF_DIR / "driver").glob("[!_]*.yaml")):
        raw = yaml.safe_load(path.read_text())
        assert raw["defaults"] == ["_base", "_self_"], (
            f"{path} must start with defaults: [_base, _self_]"
        )
        assert "gateway" not in raw and "budget" not in raw, (
            f"{path} repeats the shared block of conf/driver/_base.yaml"
        )
    driver = load_driver_config("gpt-5.2")
    base = yaml.safe_load((CONF_DIR / "driver" / "_base.yaml").read_text())
    assert isinstance(driver, DriverConfig) and driver.model == "gpt-5.2"
    assert (
        driver.gateway.max_attempts == base["gateway"]["max_attempts"]
        and driver.budget.max_tokens is None
    )
    assert driver.chat_root() == "https://api.openai.com/v1" and driver.price_per_mtok is not None
    assert (
        load_driver_config("gemini-2.5-flash").chat_root()
        == "https://generativelanguage.googleapis.com/v1beta/openai"
    )
    with pytest.raises(ConfigError, match="Did you mean: gpt-5"):
        load_driver_config("gpt5")


def test_task_source_and_hub_models_are_checked_when_planning() -> None:
    with pytest.raises(
        ConfigError, match="task.source=hubb: task 'gsm8k' has the sources fixture, hub"
    ):
        plan_sweep(["task.source=hubb"])
    with pytest.raises(ConfigError, match="has kind hub but no hub_id"):
        plan_sweep(["model=qwen2.5-7b", "model.hub_id=null"])


def test_ls_lists_each_kind(capsys: pytest.CaptureFixture[str]) -> None:
    for kind, expected in [
        ("tasks", "gsm8k"),
        ("agents", "scripted"),
        ("drivers", "none"),
        ("models", "tiny"),
    ]:
        assert ls.main([kind]) == 0
        assert expected in capsys.readouterr().out


def test_cli_modules_import_nothing_heavy() -> None:
    code = (
        "import sys, autorl.sweep, autorl.ls, autorl.config, autorl.tasks;"
        "heavy=[m for m in ('torch','ray','transformers','trl','vllm','datasets') if m in "
        "sys.modules];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_price_can_be_given_for_a_driver_whose_price_is_unknown() -> None:
    """A mapping override onto a typed setting that is null (OmegaConf cannot merge into it)."""
    from autorl.config import compose

    local = compose(["driver=local", "driver.price_per_mtok={input: 1.0, output: 4.0}"]).driver
    assert (local.price_per_mtok.input, local.price_per_mtok.output) == (1.0, 4.0)  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="Did you mean output"):
        compose(["driver=local", "driver.price_per_mtok={input: 1.0, outpt: 4.0}"])


def test_command_agent_without_a_command_is_refused_before_anything_starts() -> None:
    with pytest.raises(ConfigError, match=r"runs agent.command, which is empty"):
        plan_sweep(["agent=command"])
    with pytest.raises(
        ConfigError, match=r"agent.reprompt.max must be 0 \(off\) or a positive number"
    ):
        plan_sweep(["agent.reprompt.max=-1"])
    with pytest.raises(
        ConfigError,
        match=r"agent.online_grpo.episodes must be at least 0 \(0: a fresh draw every batch\)",
    ):
        plan_sweep(["agent.online_grpo.episodes=-8"])
    with pytest.raises(
        ConfigError, match=r"agent.online_grpo.probe must be at least 0 \(0: no probe\), got -1"
    ):
        plan_sweep(["agent.online_grpo.probe=-1"])


def test_integrity_settings_are_checked_before_anything_starts() -> None:
    plan = plan_sweep([])
    assert (
        plan.cells[0].config.integrity.allow_substitution is False
    )  # flagged submissions never count silently
    assert (
        plan.cells[0].config.integrity.judge.enabled is False
        and plan.cells[0].config.integrity.contamination.enabled
    )
    with pytest.raises(
        ConfigError, match=r"integrity.judge.enabled=true needs integrity.judge.driver"
    ):
        plan_sweep(["integrity.judge.enabled=true"])
    with pytest.raises(ConfigError, match=r"integrity.contamination.threshold is a fraction"):
        plan_sweep(["integrity.contamination.threshold=5"])
    with pytest.raises(ConfigError, match=r"ngram must be at least 3"):
        plan_sweep(["integrity.contamination.ngram=1"])


def test_an_unknown_integrity_judge_driver_stops_the_sweep_before_anything_starts(
    tmp_path: Path,
) -> None:
    from autorl.sweep import main

    code = main(
        [
            "integrity.judge.enabled=true",
            "integrity.judge.driver=no-such-driver",
            f"out_dir={tmp_path}",
        ]
    )
    assert code == 2 and not any(tmp_path.iterdir())


def test_budget_is_the_tasks_unless_budget_seconds_is_given() -> None:
    tasks = {c.task: c for c in plan_sweep(["task=gsm8k,alfworld", "dry_run=true"]).cells}
    for name, cell in tasks.items():
        run = get_task(name).run  # tasks/<name>/task.yaml run.budget_s
        assert cell.config.budget.seconds is None and cell.budget_s == run.budget_s, name
    assert {
        c.budget_s
        for c in plan_sweep(["task=gsm8k,alfworld", "budget.seconds=60", "dry_run=true"]).cells
    } == {60.0}
    assert (
        plan_sweep(["task=alfworld", "task.budget_s=90", "dry_run=true"]).cells[0].budget_s == 90.0
    )
    with pytest.raises(
        ConfigError,
        match=r"budget is -5 s .*budget.seconds > 0, or a positive run.budget_s in "
        r".*tasks/gsm8k/task.yaml",
    ):
        check_combinations(plan_sweep(["budget.seconds=-5", "dry_run=true"]).cells)


def test_dev_feedback_on_a_source_without_dev_split_is_refused_before_anything_starts() -> None:
    for task in ("gsm8k", "alfworld"):
        with pytest.raises(
            ConfigError,
            match=rf"grading.feedback=dev: task '{task}' has no dev split from its 'hub' "
            r"source.*grading.feedback=test, or with task.source=fixture",
        ):
            plan_sweep([f"task={task}", "task.source=hub", "grading.feedback=dev", "dry_run=true"])
    assert plan_sweep(
        ["task=gsm8k", "grading.feedback=dev", "dry_run=true"]
    ).cells  # the fixture has one
