"""The scripted agent: a fixed SFT → RL recipe per task, run as ``python -m agent_kit.scripted``.

- :mod:`agent_kit.scripted.__main__`: the runner (imports the task's agent package, runs its
  recipe).
- :mod:`agent_kit.scripted.common`: the grading API client, logging and the TRL stages.
- :mod:`agent_kit.scripted.progress`: the record of finished stages that a resumed run goes on
  from.
- :mod:`agent_kit.scripted.policy`, :mod:`agent_kit.scripted.interactive`: the recipe of interactive
  tasks.

The adapter that builds its command line is ``autorl.agents.scripted.ScriptedAgent`` (grader side).
"""
