"""Resuming an agent that stops before its budget is spent (``agent.reprompt``, off by default).

A CLI agent often declares itself done long before its budget ends. PostTrainBench's re-prompt
agents (``agents/*_reprompt/solve.sh``) then start the CLI again on the same session with a short
message stating the time left, as long as at least 30 minutes remain. Here the same loop is a
setting of the agent, so it is part of the cell's config and of what is measured:

- ``agent.reprompt.max``: resumes per cell at most (0: off, the agent runs once);
- ``agent.reprompt.min_remaining_s``: resume only while more than this is left.

The Workspace actor asks :func:`should_resume` after each run and launches the adapter again
with :attr:`autorl.agents.base.LaunchContext.continuation_prompt` set to
:func:`continuation_prompt`; each CLI adapter then continues its last session in the cell's HOME
(Claude Code ``--continue``, Codex ``exec resume --last``, Gemini CLI ``--resume latest``,
OpenCode ``run --continue``, OpenHands ``--resume --last``) with that message as its prompt.
"""

from __future__ import annotations

from autorl.agent_schema import RepromptConfig

# Only an agent that ended by itself is resumed: a budget timeout, a cancel, a resource limit or
# a crash by signal ends the cell as before.
RESUMABLE_EXITS = frozenset({"exited"})


def should_resume(
    exit_class: str, remaining_s: float, cfg: RepromptConfig, resumes_done: int
) -> bool:
    """Whether an agent that just ended with ``exit_class`` is started again.

    Yes when reprompting is on, fewer than ``cfg.max`` resumes were made, the agent ended by itself
    (:data:`RESUMABLE_EXITS`, whatever its exit code) and more than ``cfg.min_remaining_s`` of the
    budget is left.

    >>> cfg = RepromptConfig(max=2, min_remaining_s=600)
    >>> should_resume("exited", 3600, cfg, 0), should_resume("exited", 3600, cfg, 2)
    (True, False)
    >>> should_resume("timeout", 3600, cfg, 0), should_resume("exited", 600, cfg, 0)
    (False, False)

    Raises:
        ConfigError: see :meth:`autorl.agent_schema.RepromptConfig.check`.
    """
    cfg.check()
    return (
        cfg.max > 0
        and resumes_done < cfg.max
        and exit_class in RESUMABLE_EXITS
        and remaining_s > cfg.min_remaining_s
    )


def _clock(seconds: float) -> str:
    hours, minutes = divmod(int(seconds) // 60, 60)
    return f"{hours}h {minutes:02d}m"


def continuation_prompt(remaining_s: float, budget_s: float, resumes_done: int) -> str:
    """What a resumed agent is told: the time left, that its work is where it left it, and to go on.

    It stands on its own (where the task and the grading API are), in case the CLI cannot find
    its earlier session.

    >>> print(continuation_prompt(5430, 7200, 0).splitlines()[0].split(": ", 1)[1])
    1h 30m (5430 seconds) of 7200 seconds remain (resume 1).

    Raises:
        ValueError: a negative ``remaining_s`` or ``resumes_done``, or a budget that is not
            positive.
    """
    if remaining_s < 0 or budget_s <= 0 or resumes_done < 0:
        raise ValueError(
            f"continuation_prompt needs remaining_s >= 0, budget_s > 0 and resumes_done >= 0; "
            f"got {remaining_s}, {budget_s}, {resumes_done}"
        )
    return (
        f"You stopped, but your time budget is not used up: {_clock(remaining_s)} "
        f"({remaining_s:.0f} seconds) of "
        f"{budget_s:.0f} seconds remain (resume {resumes_done + 1}).\n"
        "Your workspace is as you left it: the task in description.md and instructions.md, your "
        "code in code/, "
        "your models in output/; your earlier submissions still count and the best valid one is "
        "your score.\n"
        "Keep working: improve the model and submit better versions through the grading API "
        '(`curl -s -X POST "$GRADING_SERVER_URL/submit" -H "Authorization: Bearer $GRADING_TOKEN" '
        "-H 'Content-Type: application/json' -d '{\"model_path\": \"output/vN\"}'`). "
        'Check the time left with `curl -s -H "Authorization: Bearer $GRADING_TOKEN" '
        "$GRADING_SERVER_URL/time`; "
        "every process you start is stopped when the time is up.\n"
    )
