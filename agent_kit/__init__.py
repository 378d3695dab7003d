"""What runs on the agent's side of a cell: the scripted agent, the rollout loop, the code sandbox.

A sealed agent trains with a Python environment of its own (:mod:`autorl.seal.toolchain`) in which
neither ``autorl`` nor ``tasks/`` exists. This package is what the scripted agent's runner
(``python -m agent_kit.scripted``) and the tasks' ``agent/`` packages import instead; the cell gets
a read-only copy of it beside the task's agent package
(:func:`autorl.workspace.layout.copy_agent_code`). So it imports nothing from ``autorl`` or
``tasks`` (``tests/unit/test_architecture.py`` checks); autorl imports from it where the two sides
share a definition.

- :mod:`agent_kit.protocol`: the types both sides speak (``ChatMessage``, ``StepResult``,
  ``GenerationEngine``).
- :mod:`agent_kit.rollout`: playing many episodes with one model (the eval protocol of interactive
  tasks).
- :mod:`agent_kit.hf_prefix`, :mod:`agent_kit.hf_stop`: HF generation that reuses encoded prompt
  prefixes and stops at stop strings (the grader's engine and the agent's policy both generate with
  them).
- :mod:`agent_kit.sandbox`: running untrusted Python (code rewards and graders), nested in a sandbox
  or not.
- :mod:`agent_kit.confinement`: the namespaces and the task cap that the sandbox's runs are confined
  by.
- :mod:`agent_kit.scripted`: the scripted agent (its runner and the recipes' shared stages).
"""
