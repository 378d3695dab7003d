"""The scripted agent's settings file: TRL's names, the config's values, and clear refusals."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_kit.scripted.__main__ import parse_args
from agent_kit.scripted.settings import (
    SETTINGS_FILE,
    GrpoSettings,
    OnlineGrpoSettings,
    ScriptedSettings,
    SftSettings,
)
from autorl.agents.base import LaunchContext, load_adapter
from autorl.config import compose
from autorl.tasks import get_task
from autorl.workspace.layout import copy_agent_code

# The online stage's settings that TRL's GRPOConfig has no field for (the others mean what TRL's
# do).
NOT_TRL = {"batches", "episodes", "sft_mix", "sft_mix_weight", "probe"}


def _settings(tmp_path: Path, *overrides: str) -> ScriptedSettings:
    """What the adapter writes for a gsm8k cell with ``overrides``."""
    config = compose(["agent=scripted", *overrides])
    copy = copy_agent_code(get_task("gsm8k"), tmp_path / "agent_code")
    ctx = LaunchContext(tmp_path, config.agent, config.driver, {}, seed=3, task_agent_dir=copy)
    launch = load_adapter(config.agent).launch(ctx)
    assert launch.command[-2:] == ["--settings", str(tmp_path / SETTINGS_FILE)]
    return parse_args(launch.command[-2:])


def test_the_field_names_are_trls() -> None:
    from trl import GRPOConfig, SFTConfig

    sft = {f.name for f in dataclasses.fields(SFTConfig)}
    grpo = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert {f.name for f in dataclasses.fields(SftSettings)} <= sft
    assert {f.name for f in dataclasses.fields(GrpoSettings)} <= grpo
    online = {f.name for f in dataclasses.fields(OnlineGrpoSettings)}
    assert online - NOT_TRL <= grpo and not NOT_TRL & grpo


def test_the_adapter_writes_the_configs_values(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "agent.sft.max_steps=7", "agent.online_grpo.probe=0")
    assert settings.seed == 3 and settings.recipe == "recipe:run"
    assert settings.recipe_dir == str(tmp_path / "agent_code" / "task_agent")
    # conf/agent/scripted.yaml's values, which the default fixtures' scores were measured with.
    assert settings.sft == SftSettings(7, 32, 3.0e-3, 128)
    assert settings.grpo == GrpoSettings(12, 16, 4, 2.0e-5, 40, beta=0.0, temperature=1.0)
    assert settings.online_grpo == OnlineGrpoSettings(12, 32, 4, 1.5e-4, 4, 0.2, 0.7, 8, 16, 0.5, 0)
    assert isinstance(settings.sft.learning_rate, float)
    assert settings.flat()["sft_max_steps"] == 7 and settings.flat()["online_grpo_probe"] == 0


def test_with_sft_changes_only_the_sft_stage(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    longer = settings.with_sft(max_length=512)
    assert longer.sft.max_length == 512 and longer.grpo == settings.grpo
    assert settings.sft.max_length == 128


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["sft"].update(steps=5), r"unknown key\(s\) \['sft.steps'\]"),
        (lambda d: d["grpo"].pop("beta"), r"missing key\(s\) \['grpo.beta'\]"),
        (lambda d: d.update(seed="0"), r"seed must be int, got '0'"),
        (lambda d: d["online_grpo"].update(probe=True), r"online_grpo.probe must be int"),
        (lambda d: d.update(sft=[]), r"sft must be an object"),
    ],
)
def test_a_bad_file_is_refused_with_the_key(
    tmp_path: Path, change: Callable[[dict[str, Any]], object], message: str
) -> None:
    data = json.loads(_settings(tmp_path).to_json())
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        ScriptedSettings.load(path)


def test_the_agent_exits_with_the_files_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{")
    with pytest.raises(SystemExit):
        parse_args(["--settings", str(path)])
    assert "broken.json is not JSON" in capsys.readouterr().err


def test_online_check_names_the_key() -> None:
    settings = OnlineGrpoSettings(1, 2, 2, 1e-4, 1, 0.2, 0.7, -1, 0, 0.0, 0)
    with pytest.raises(KeyError, match=r"agent.online_grpo.episodes must be at least 0"):
        settings.check("agent.", KeyError)
