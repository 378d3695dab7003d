"""The package's layering, checked from the source with ``ast`` (imports inside functions included).

- Ray is imported only by the modules that run the sweep on it: the actors, the scheduler, the
  cluster connection and the dashboard metrics. Everything else takes plain callables or sinks.
- The packages under ``autorl/`` (``agents``, ``gateway``, ``records``, …; a top-level module is
  its own node) import each other without cycles.
- Nothing under ``autorl/`` is named after a task folder or imports one by name: task code lives
  in ``tasks/<id>/`` and is reached through its manifest's entry points.
- The agent side (``agent_kit/`` and every ``tasks/<id>/agent/``) imports nothing from ``autorl`` or
  ``tasks`` (a task's agent package only its own modules): it runs with a toolchain that has
  neither.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "autorl"
TASKS = ROOT / "tasks"
AGENT_KIT = ROOT / "agent_kit"

# Paths (relative to ROOT) whose modules may import ray; a folder allows everything under it.
RAY_ALLOWED = (
    "autorl/actors/",
    "autorl/scheduler.py",
    "autorl/cluster.py",
    "autorl/tracking/metrics.py",
)
_DYNAMIC_IMPORTERS = {"import_module", "__import__", "load_object"}


@dataclass(frozen=True)
class Import:
    """One import statement (or a dynamic import of a literal module name) in a module."""

    source: str  # the importing module, e.g. "autorl.agents.cli"
    target: str  # the imported module (or module.name for ``from m import name``)
    path: Path
    line: int

    def where(self) -> str:
        """``path:line`` for messages."""
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def module_name(path: Path) -> str:
    """``autorl/agents/cli.py`` -> ``autorl.agents.cli``; a package's ``__init__.py`` -> the
    package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(path: Path, source: str, level: int, module: str | None) -> str:
    """The absolute module of a (possibly relative) ``from`` import."""
    if level == 0:
        return module or ""
    package = source if path.name == "__init__.py" else source.rpartition(".")[0]
    base = package.split(".")[: len(package.split(".")) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imports_of(path: Path) -> Iterator[Import]:
    """Every import in the module at ``path``, at any depth (functions, ``if TYPE_CHECKING:``)."""
    source = module_name(path)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(source, alias.name, path, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(path, source, node.level, node.module)
            for alias in node.names:
                # ``from autorl import tasks`` imports the module autorl.tasks; ``from m import f``
                # is m.f.
                yield Import(
                    source, f"{base}.{alias.name}" if base else alias.name, path, node.lineno
                )
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            first = node.args[0]
            if (
                name in _DYNAMIC_IMPORTERS
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                yield Import(source, first.value.partition(":")[0], path, node.lineno)


def all_modules() -> list[Path]:
    """Every ``.py`` file under ``autorl/``."""
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def all_imports() -> list[Import]:
    """The imports of every module under ``autorl/``."""
    return [imp for path in all_modules() for imp in imports_of(path)]


def node_of(module: str) -> str | None:
    """The package-graph node of an ``autorl`` module: its first component under ``autorl``.

    >>> node_of("autorl.agents.cli"), node_of("autorl.tasks"), node_of("autorl"), node_of("json")
    ('agents', 'tasks', None, None)
    """
    parts = module.split(".")
    if parts[0] != "autorl" or len(parts) < 2:
        return None
    return parts[1]


def package_graph(imports: list[Import]) -> dict[str, dict[str, Import]]:
    """node -> {imported node: the first import that makes the edge}; edges within a node are left
    out."""
    graph: dict[str, dict[str, Import]] = {}
    for imp in imports:
        src, dst = node_of(imp.source), node_of(imp.target)
        if src is None or dst is None:
            continue
        graph.setdefault(src, {})
        if src != dst:
            graph[src].setdefault(dst, imp)
    return graph


def find_cycle(graph: dict[str, dict[str, Import]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None when it has none.

    >>> find_cycle(
    ...     {"a": {"b": None}, "b": {"c": None}, "c": {"a": None}}  # type: ignore[dict-item]
    ... )
    ['a', 'b', 'c', 'a']
    >>> find_cycle({"a": {"b": None}, "b": {}}) is None  # type: ignore[dict-item]
    True
    """
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def _ray_allowed(path: Path) -> bool:
    rel = path.relative_to(ROOT).as_posix()
    return any(
        rel.startswith(allowed) if allowed.endswith("/") else rel == allowed
        for allowed in RAY_ALLOWED
    )


def test_only_the_sweep_runtime_imports_ray() -> None:
    offenders = [
        f"{imp.where()}: {imp.target}"
        for imp in all_imports()
        if (imp.target == "ray" or imp.target.startswith("ray.")) and not _ray_allowed(imp.path)
    ]
    assert not offenders, (
        f"ray is imported outside {', '.join(RAY_ALLOWED)}; take a plain callable or sink there "
        "and let the "
        "actor or scheduler wrap the actor call:\n" + "\n".join(offenders)
    )


def test_the_allowed_list_names_modules_that_exist() -> None:
    for allowed in RAY_ALLOWED:
        assert (ROOT / allowed).exists(), f"{allowed} no longer exists: update RAY_ALLOWED"


def test_packages_import_each_other_without_cycles() -> None:
    graph = package_graph(all_imports())
    assert {"agents", "gateway", "records", "grading"} <= set(graph)  # the parse found the packages
    cycle = find_cycle(graph)
    if cycle is not None:
        edges = [
            f"  {a} -> {b}: {graph[a][b].where()} imports {graph[a][b].target}"
            for a, b in zip(cycle, cycle[1:], strict=False)
        ]
        pytest.fail(
            "import cycle between packages under autorl/: "
            + " -> ".join(cycle)
            + "\n"
            + "\n".join(edges)
        )


def task_ids() -> list[str]:
    """The task folders under ``tasks/`` (each holds a ``task.yaml``)."""
    return sorted(p.parent.name for p in TASKS.glob("*/task.yaml"))


def _defined_names(path: Path) -> set[str]:
    """The names a module defines at its top level (functions, classes, assignments)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_nothing_under_autorl_is_named_after_a_task_or_imports_one_by_name() -> None:
    ids = task_ids()
    assert ids, f"no task folders found under {TASKS}"
    named = re.compile(rf"(^|_)({'|'.join(map(re.escape, ids))})(_|$)")
    offenders = []
    for path in sorted(PACKAGE.rglob("*")):
        if "__pycache__" in path.parts or not (path.is_dir() or path.suffix == ".py"):
            continue
        match = named.search(path.stem if path.is_file() else path.name)
        if match:
            offenders.append(f"{path.relative_to(ROOT)}: named after task {match.group(2)!r}")
    own = _defined_names(
        PACKAGE / "task_code" / "__init__.py"
    )  # add_tasks_dir, TASKS_DIR: not task code
    for imp in all_imports():
        if imp.target.startswith("autorl.task_code.") and imp.target.split(".")[2] not in own:
            offenders.append(f"{imp.where()}: imports {imp.target} by name")
    assert not offenders, (
        "task code belongs in tasks/<id>/ and is reached through its manifest's entry points:\n"
        + "\n".join(offenders)
    )


def agent_side_modules() -> list[Path]:
    """Every ``.py`` file of the agent side: ``agent_kit/`` and each ``tasks/<id>/agent/``."""
    found = [*AGENT_KIT.rglob("*.py"), *TASKS.glob("*/agent/**/*.py")]
    return sorted(p for p in found if "__pycache__" not in p.parts)


def test_the_agent_side_imports_nothing_of_autorl_or_tasks() -> None:
    paths = agent_side_modules()
    names = {module_name(p) for p in paths}
    assert {
        "agent_kit.sandbox",
        "agent_kit.scripted.__main__",
        "tasks.gsm8k.agent.recipe",
    } <= names, names
    offenders = []
    for path in paths:
        own = (
            module_name(path).split(".agent", 1)[0] + ".agent."
            if path.is_relative_to(TASKS)
            else "agent_kit."
        )
        for imp in imports_of(path):
            if imp.target.split(".")[0] in ("autorl", "tasks") and not imp.target.startswith(own):
                offenders.append(f"{imp.where()}: {imp.target}")
    assert not offenders, (
        "agent-side code runs with the agent's toolchain, where neither autorl nor tasks/ exists; "
        "move what it needs into agent_kit/ (autorl may import it from there):\n"
        + "\n".join(offenders)
    )
