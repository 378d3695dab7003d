"""The task contract, checked for every folder under tasks/ (fixture source only, no network)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from autorl.errors import TaskError
from autorl.tasks import (
    EvalContext,
    EvalResult,
    TaskData,
    TaskOptions,
    TaskSpec,
    build_task_data,
    discover_tasks,
    get_task,
    load_entry_point,
    load_evaluator,
    load_task_module,
)
from tests.helpers.task_folders import SMALL, TASKS, GarbageEngine, write_task
from tests.helpers.task_folders import files as _files
from tests.helpers.task_folders import rows as _rows

# Interactive tasks are played, not answered in one batch: their oracle and garbage runs live in
# tests/unit/test_{alfworld,webshop,deepsearchqa}.py.
STATIC = sorted(t for t, spec in TASKS.items() if spec.kind == "static")


def _last_user(conversation: list[dict[str, str]]) -> str:
    return next(m["content"] for m in reversed(conversation) if m["role"] == "user")


def _context(task_id: str, data: TaskData, cache_dir: Path) -> EvalContext:
    """The evaluator's context a sweep gives a static task built from the fixture (the conf's
    options)."""
    return EvalContext.for_task(TASKS[task_id], "fixture", data.private_dir, cache_dir=cache_dir)


def _gold_reply(item: dict[str, Any], task_id: str | None = None) -> str:
    """A perfect reply for one eval item: the task's ``oracle_reply`` (judge-based tasks, whose eval
    data holds no gold answer) or the item's ``answer`` (extend here for other answer formats)."""
    oracle = (
        getattr(load_task_module(TASKS[task_id], "evaluate.py"), "oracle_reply", None)
        if task_id
        else None
    )
    if oracle is not None:
        return str(oracle(item))
    answer = str(item["answer"])
    match = re.search(r"####\s*(\S+)\s*$", answer)
    if match:
        return f"{answer[: match.start()].strip()}\nThe answer is {match.group(1)}"
    return answer


class OracleEngine:
    """Answers each conversation with the gold reply of the eval item it asks about."""

    def __init__(self, items: list[dict[str, Any]], task_id: str | None = None) -> None:
        self.items = sorted(items, key=lambda it: -len(str(it["question"])))
        self.task_id = task_id
        self.calls = 0

    def _reply(self, prompt: str) -> str:
        item = next((it for it in self.items if str(it["question"]) in prompt), None)
        assert item is not None, f"prompt matches no eval item: {prompt[-200:]!r}"
        return _gold_reply(item, self.task_id)

    def generate_chat(
        self,
        conversations: list[list[dict[str, str]]],
        *,
        max_new_tokens: int,
        stop: list[str] | None = None,
    ) -> list[str]:
        self.calls += 1
        return [self._reply(_last_user(c)) for c in conversations]

    def generate_text(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str] | None = None
    ) -> list[str]:
        self.calls += 1
        return [self._reply(p) for p in prompts]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TaskData]:
    root = tmp_path_factory.mktemp("cache")
    return {
        tid: build_task_data(spec, "fixture", root, seed=0, options=SMALL)
        for tid, spec in TASKS.items()
    }


def test_gsm8k_is_discovered() -> None:
    assert "gsm8k" in TASKS


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_manifest_valid(task_id: str) -> None:
    spec = TASKS[task_id]
    assert spec.id == task_id == spec.folder.name
    assert spec.version >= 1
    assert spec.level in ("L1", "L2", "L3") and spec.kind in ("static", "interactive")
    assert "fixture" in spec.sources
    assert spec.description and "\n" not in spec.description
    for name in ("build.py", "evaluate.py", "README.md", "__init__.py", "agent/__init__.py"):
        assert (spec.folder / name).is_file(), name
    assert get_task(task_id) == spec


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_entry_points_resolve(task_id: str) -> None:
    spec = TASKS[task_id]
    assert callable(load_evaluator(spec))
    for name in spec.entry_points:
        target = load_entry_point(spec, name)
        assert isinstance(target, TaskOptions) if name == "options" else callable(target), name
    assert (spec.kind == "interactive") == ("env" in spec.entry_points)


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_task_doctests_pass(task_id: str) -> None:
    """Every module of the task folder (``tasks/`` is not under pytest's --doctest-modules
    paths)."""
    import doctest

    spec = TASKS[task_id]
    attempted = 0
    for path in sorted(spec.folder.rglob("*.py")):
        result = doctest.testmod(load_task_module(spec, path.relative_to(spec.folder).as_posix()))
        assert result.failed == 0, f"{path}: {result.failed} doctest(s) failed"
        attempted += result.attempted
    assert attempted > 0, f"tasks/{task_id} has no doctests"


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_agent_side_never_imports_its_grader_side(task_id: str) -> None:
    """The agent/ package imports its siblings only; the scripted agent loads a copy of it alone."""
    import ast

    grader_side = ("autorl.tasks", "autorl.task_code", "autorl.grading", "autorl.judge")
    for path in sorted(TASKS[task_id].agent_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert node.level <= 1, (
                    f"{path}: imports outside agent/ ({'.' * node.level}{node.module})"
                )
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                assert not name.startswith(grader_side), f"{path}: imports grader-side {name}"


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_description_non_empty(task_id: str) -> None:
    assert len(TASKS[task_id].description_md.read_text(encoding="utf-8").strip()) > 200


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_fixture_build_is_deterministic(
    task_id: str, tmp_path: Path, built: dict[str, TaskData]
) -> None:
    again = build_task_data(TASKS[task_id], "fixture", tmp_path, seed=0, options=SMALL)
    first = built[task_id]
    assert again.digest == first.digest and again.source == "fixture"
    assert _files(again.public_dir) == _files(first.public_dir)
    assert _files(again.private_dir) == _files(first.private_dir)
    assert _rows(again.public_dir) and _rows(again.private_dir)


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_build_is_cached(task_id: str, built: dict[str, TaskData]) -> None:
    data = built[task_id]
    marker = data.public_dir.parent / "COMPLETE.json"
    mtime = marker.stat().st_mtime_ns
    root = data.public_dir.parents[3]
    assert build_task_data(TASKS[task_id], "fixture", root, seed=0, options=SMALL) == data
    assert marker.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_public_reveals_nothing_private(task_id: str, built: dict[str, TaskData]) -> None:
    data = built[task_id]
    public_rows = _rows(data.public_dir)
    public_values = {v for row in public_rows for v in row.values() if isinstance(v, str)}
    public_text = "\n".join(b.decode("utf-8", "replace") for b in _files(data.public_dir).values())
    for row in _rows(data.private_dir):
        for value in row.values():
            if isinstance(value, str) and len(value) >= 16:
                assert value not in public_values, value
                assert value not in public_text, value


@pytest.mark.parametrize("task_id", STATIC)
def test_oracle_scores_100(task_id: str, built: dict[str, TaskData], tmp_path: Path) -> None:
    data = built[task_id]
    items = _rows(data.private_dir)
    engine = OracleEngine(items, task_id)
    result = load_evaluator(TASKS[task_id])(engine, _context(task_id, data, tmp_path))
    assert isinstance(result, EvalResult)
    assert result.score == 100.0 and result.num_examples == len(items)
    assert engine.calls <= 4, "the evaluator must batch its engine calls"


@pytest.mark.parametrize("task_id", STATIC)
def test_garbage_scores_0(task_id: str, built: dict[str, TaskData], tmp_path: Path) -> None:
    data = built[task_id]
    result = load_evaluator(TASKS[task_id])(GarbageEngine(), _context(task_id, data, tmp_path))
    assert isinstance(result, EvalResult)
    assert result.score == 0.0 and result.num_examples == len(_rows(data.private_dir))


def test_unknown_source_lists_sources(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="fixture"):
        build_task_data(get_task("gsm8k"), "nope", tmp_path)


def test_unknown_task_lists_tasks() -> None:
    with pytest.raises(TaskError, match="gsm8k"):
        get_task("no_such_task")


def test_missing_key_names_file_and_key(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    manifest = tmp_path / "broken" / "task.yaml"
    manifest.write_text(
        "id: broken\nname: B\nversion: 1\nlevel: L1\nkind: static\nsources: {fixture: "
        "'build:build'}\n"
    )
    with pytest.raises(TaskError, match=r"broken/task\.yaml.*'description'"):
        discover_tasks(tmp_path)


def test_new_folder_is_discovered(tmp_path: Path) -> None:
    write_task(tmp_path / "toy")
    spec = discover_tasks(tmp_path)["toy"]
    assert isinstance(spec, TaskSpec) and spec.version == 1 and spec.sources == ("fixture",)
    assert spec.run.source == "fixture" and spec.run.budget_s == 60 and spec.run.env_pool is None


def test_manifest_entry_point_mistakes_are_named(tmp_path: Path) -> None:
    base = (
        "id: bad\nname: B\nversion: 1\nlevel: L1\nkind: static\ndescription: B.\n"
        "run: {source: fixture, budget_s: 9}\n"
    )
    (tmp_path / "bad").mkdir()
    manifest = tmp_path / "bad" / "task.yaml"
    manifest.write_text(
        base + "sources: [fixture]\nentry_points: {evaluate: 'evaluate:evaluate'}\n"
    )
    with pytest.raises(TaskError, match=r"'sources' must map names to 'module:attr'"):
        discover_tasks(tmp_path)
    manifest.write_text(
        base + "sources: {fixture: 'build:build'}\nentry_points: {evaluate: 'evaluate:evaluate', "
        "grade: 'g:g'}\n"
    )
    with pytest.raises(TaskError, match="unknown entry point.*grade"):
        discover_tasks(tmp_path)
    manifest.write_text(
        base + "sources: {fixture: 'build:build'}\nentry_points: {evaluate: 'evaluate:evaluate', "
        "options: 'o:O', env: 'env:E'}\n"
    )
    with pytest.raises(TaskError, match="interactive task names an 'env'"):
        discover_tasks(tmp_path)
    manifest.write_text(
        base + "sources: {fixture: 'build:build'}\nfixed_sources: [hub]\n"
        "entry_points: {evaluate: 'evaluate:evaluate', options: 'o:O'}\n"
    )
    with pytest.raises(
        TaskError, match=r"'fixed_sources' must list some of the sources \(fixture\), got \['hub'\]"
    ):
        discover_tasks(tmp_path)
    manifest.write_text(
        base + "sources: {fixture: 'build:build'}\nentry_points: {evaluate: 'evaluate:evaluate'}\n"
    )
    with pytest.raises(
        TaskError, match=r"'entry_points'.*needs options \(e\.g\..*options: 'options:OPTIONS'\)"
    ):
        discover_tasks(tmp_path)
    manifest.write_text(
        base + "sources: {fixture: 'build:build'}\n"
        "entry_points: {evaluate: 'nowhere:evaluate', options: 'options:OPTIONS'}\n"
    )
    with pytest.raises(TaskError, match="no module 'autorl.task_code.bad.nowhere'"):
        load_evaluator(discover_tasks(tmp_path)["bad"])
    manifest.write_text(
        base.replace("fixture, budget_s: 9", "hub, budget_s: nine")
        + "sources: {fixture: 'build:build'}\n"
        "entry_points: {evaluate: 'evaluate:evaluate', options: 'options:OPTIONS'}\n"
    )
    with pytest.raises(TaskError, match=r"'run\.budget_s': Input should be a valid number"):
        discover_tasks(tmp_path)
    manifest.write_text(
        base.replace("fixture, budget_s", "hub, budget_s") + "sources: {fixture: 'build:build'}\n"
        "entry_points: {evaluate: 'evaluate:evaluate', options: 'options:OPTIONS'}\n"
    )
    with pytest.raises(TaskError, match=r"run\.source 'hub' is not one of the sources \(fixture\)"):
        discover_tasks(tmp_path)


def test_a_second_folder_with_a_taken_task_id_is_refused(tmp_path: Path) -> None:
    shutil.copytree(get_task("gsm8k").folder, tmp_path / "gsm8k")
    shadow = discover_tasks(tmp_path)["gsm8k"]
    with pytest.raises(TaskError, match="task id 'gsm8k' is taken"):
        load_evaluator(shadow)
    assert get_task("gsm8k").folder != shadow.folder and callable(load_evaluator(get_task("gsm8k")))


def test_failed_build_leaves_no_cache(tmp_path: Path) -> None:
    write_task(
        tmp_path / "tasks" / "flaky",
        "fail: bool = option(False, 'raise in the build')",
        build=(
            "def build(public, private, *, seed, options):\n"
            "    (public / 'x.txt').write_text('x')\n"
            "    if options.fail:\n"
            "        raise RuntimeError('boom')\n"
        ),
    )
    spec = discover_tasks(tmp_path / "tasks")["flaky"]
    cache = tmp_path / "cache"
    with pytest.raises(TaskError, match="boom"):
        build_task_data(spec, "fixture", cache, options={"fail": True})
    leftovers = [p.name for p in (cache / "flaky" / "v1").iterdir() if not p.name.endswith(".lock")]
    assert leftovers == []
    assert (build_task_data(spec, "fixture", cache).public_dir / "x.txt").read_text() == "x"


def test_concurrent_builders_share_one_build(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    spec = get_task("gsm8k")
    with ThreadPoolExecutor(4) as pool:
        results = list(
            pool.map(lambda _: build_task_data(spec, "fixture", tmp_path, options=SMALL), range(4))
        )
    assert len({r.digest for r in results}) == 1 and len({r.public_dir for r in results}) == 1
    assert [
        p.name
        for p in (tmp_path / "gsm8k" / f"v{spec.version}").iterdir()
        if not p.name.endswith(".lock")
    ] == [results[0].public_dir.parent.name]
