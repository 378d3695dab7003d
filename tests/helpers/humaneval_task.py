"""The humaneval task's modules, loaded from its folder."""

from __future__ import annotations

from types import ModuleType

from autorl.tasks import get_task, load_task_module

SPEC = get_task("humaneval")
EVAL: ModuleType = load_task_module(SPEC, "evaluate.py")
FIXTURE: ModuleType = load_task_module(SPEC, "fixture.py")
PROTOCOL: ModuleType = load_task_module(SPEC, "agent/protocol.py")
RECIPE: ModuleType = load_task_module(SPEC, "agent/recipe.py")
