"""Resuming an agent that stops early (``agent.reprompt``): when, with what prompt, and the setting
itself.

How each CLI adapter resumes its last session is in tests/unit/test_agents.py (the command lines)
and tests/unit/test_agents_real_cli.py (the real CLIs keeping their conversation).
"""

from __future__ import annotations

import re

import pytest

from autorl.agent_schema import RepromptConfig
from autorl.agents.reprompt import continuation_prompt, should_resume
from autorl.config import compose, plan_sweep
from autorl.errors import ConfigError
from autorl.registry import option_names

ON = RepromptConfig(max=2, min_remaining_s=1800)


def test_off_by_default_for_every_agent_and_part_of_the_cells_config() -> None:
    for agent in option_names("agent"):
        cfg = compose([f"agent={agent}"]).agent.reprompt
        assert (cfg.max, cfg.min_remaining_s) == (0, 1800), agent
        assert not should_resume("exited", 10_000, cfg, 0)
    plan = plan_sweep(
        [
            "agent=codex",
            "driver=gpt-5",
            "agent.reprompt.max=3",
            "agent.reprompt.min_remaining_s=600",
        ]
    )
    [cell] = plan.cells
    assert cell.config.agent.reprompt == RepromptConfig(max=3, min_remaining_s=600)
    # It changes what is measured: a sweep with it on is another sweep than one without.
    assert cell.sweep_id != plan_sweep(["agent=codex", "driver=gpt-5"]).cells[0].sweep_id
    with pytest.raises(ConfigError, match="reprompt"):
        compose(["agent=codex", "agent.reprompt.max=many"])


@pytest.mark.parametrize(
    ("exit_class", "remaining_s", "resumes_done", "expected"),
    [
        ("exited", 3600, 0, True),  # stopped by itself with an hour left
        ("exited", 3600, 1, True),
        ("exited", 3600, 2, False),  # agent.reprompt.max resumes made
        ("exited", 1800, 0, False),  # not more than min_remaining_s left
        ("exited", 1801, 0, True),
        ("timeout", 3600, 0, False),  # every limit ends the cell as before
        ("killed", 3600, 0, False),
        ("crashed", 3600, 0, False),
    ],
)
def test_should_resume(
    exit_class: str, remaining_s: float, resumes_done: int, expected: bool
) -> None:
    assert should_resume(exit_class, remaining_s, ON, resumes_done) is expected


def test_bad_settings_are_refused_naming_the_key() -> None:
    with pytest.raises(
        ConfigError, match=r"agent.reprompt.max must be 0 \(off\) or a positive number"
    ):
        should_resume("exited", 3600, RepromptConfig(max=-1, min_remaining_s=0), 0)
    with pytest.raises(ConfigError, match="agent.reprompt.min_remaining_s must be at least 0"):
        RepromptConfig(max=1, min_remaining_s=-5).check()


def test_continuation_prompt_states_the_time_left_and_how_to_go_on() -> None:
    text = continuation_prompt(remaining_s=5430.4, budget_s=7200, resumes_done=1)
    assert "1h 30m (5430 seconds) of 7200 seconds remain (resume 2)" in text
    assert "description.md" in text and "output/" in text and "$GRADING_SERVER_URL/submit" in text
    assert "$GRADING_SERVER_URL/time" in text
    assert re.search(r"0h 00m \(0 seconds\)", continuation_prompt(0, 60, 0))
    with pytest.raises(ValueError, match="remaining_s >= 0"):
        continuation_prompt(-1, 60, 0)
    with pytest.raises(ValueError, match="budget_s > 0"):
        continuation_prompt(10, 0, 0)
