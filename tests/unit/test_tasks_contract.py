"""The task contract, checked for every folder under tasks/ (fixture source only, no network)."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

import autorl.task_code
from autorl.errors import TaskError
from autorl.task_options import option_class
from autorl.tasks import (
    EvalContext,
    EvalResult,
    TaskData,
    TaskOptions,
    TaskSpec,
    build_task_data,
    discover_tasks,
    eval_options,
    get_task,
    load_entry_point,
    load_evaluator,
    load_task_module,
    task_options,
)

TASKS = discover_tasks()
# Interactive tasks are played, not answered in one batch: their oracle and garbage runs live in
# tests/unit/test_{alfworld,webshop,deepsearchqa}.py.
STATIC = sorted(t for t, spec in TASKS.items() if spec.kind == "static")
SMALL = {"train_size": 300, "eval_size": 40}
# The data a sweep builds by default (options.py's fixture build defaults, seed 0). Changing a
# fixture generator or a default size changes every score: bump the task's version and pin the new
# digest.
PINNED_FIXTURE_DIGESTS = {
    # v4: smaller rooms
    "alfworld": "dc896c64099d413617e970b420b43ef141f6569753b6bcb032329566edfdb2d5",
    # v3: 200 eval instructions
    "alpacaeval": "f1e0996e16a5285d292c028cb69520d8d96148da0857bba54c194c9d46aa48f3",
    # v3: hyphenated names, 400 train
    "deepsearchqa": "0ab976adc891f37316be07086aae89bab4d9100622131822237b96e4f6f8d3ff",
    "gsm8k": "f130f382b0150c0529e955ad1cb81fbce31df121edee987e2884a2f6c3a228cf",
    "humaneval": "406a46853ec907bf56d5a41f446cb4273c1664e6c3a55e3463e29d180caa9bc8",
    "webshop": "bfa1c481aab9694ee9400e306bb89b493e7e2d607e72ac3964ab45284502b0fe",
}


def _rows(folder: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in sorted(folder.rglob("*.jsonl")):
        rows += [
            json.loads(line)
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
    return rows


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _last_user(conversation: list[dict[str, str]]) -> str:
    return next(m["content"] for m in reversed(conversation) if m["role"] == "user")


def write_task(folder: Path, options: str = "", *, manifest: str = "", build: str = "") -> Path:
    """A minimal static task folder: ``task.yaml`` (with ``manifest`` appended), ``options.py``
    (dataclasses ``Build``, with ``options`` as its field, and ``Eval``) and ``build.py``."""
    folder.mkdir(parents=True)
    (folder / "task.yaml").write_text(
        f"id: {folder.name}\nname: T\nversion: 1\nlevel: L1\nkind: static\ndescription: A toy.\n"
        "sources: {fixture: 'build:build'}\nrun: {source: fixture, budget_s: 60}\n"
        "entry_points: {evaluate: 'evaluate:evaluate', options: 'options:OPTIONS'}\n" + manifest
    )
    (folder / "options.py").write_text(
        "from dataclasses import dataclass\nfrom autorl.task_options import TaskOptions, option\n\n"
        f"@dataclass\nclass Build:\n    {options or 'pass'}\n\n@dataclass\nclass Eval:\n    "
        "pass\n\n"
        "OPTIONS = TaskOptions(build={'fixture': Build}, eval={'fixture': Eval})\n"
    )
    (folder / "build.py").write_text(
        build or "def build(public, private, *, seed, options):\n    pass\n"
    )
    return folder


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


class GarbageEngine:
    """Returns text with no answer in it."""

    def generate_chat(
        self,
        conversations: list[list[dict[str, str]]],
        *,
        max_new_tokens: int,
        stop: list[str] | None = None,
    ) -> list[str]:
        return ["no idea, sorry" for _ in conversations]

    def generate_text(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str] | None = None
    ) -> list[str]:
        return ["no idea, sorry" for _ in prompts]


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
def test_the_folder_holds_the_run_defaults_and_typed_options(task_id: str) -> None:
    """The task folder is the one place a task's defaults are written: ``task.yaml`` ``run:`` and
    ``options.py``, with a class per source for the builder and the evaluator, every field typed
    and its help saying what it does; the eval classes of all sources share their fields (one
    evaluator reads them). Nothing of the task is under ``conf/``."""
    spec = TASKS[task_id]
    assert spec.run.source in spec.sources and spec.run.budget_s > 0
    assert (spec.run.env_pool is not None) == (spec.kind == "interactive")
    classes = task_options(spec)
    assert tuple(classes.build) == tuple(classes.eval) == spec.sources
    eval_fields = {s: [f.name for f in dataclasses.fields(c)] for s, c in classes.eval.items()}  # type: ignore[arg-type]
    assert len({tuple(v) for v in eval_fields.values()}) == 1, (
        f"eval classes differ in their fields: {eval_fields}"
    )
    for cls in [*classes.build.values(), *classes.eval.values()]:
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            assert f.metadata.get("help"), (
                f"{cls.__qualname__}.{f.name} has no help saying what it does"
            )
            assert f.type not in (Any, "Any"), f"{cls.__qualname__}.{f.name} is untyped"
    conf = Path(__file__).resolve().parents[2] / "conf"
    assert not (conf / "task").exists() and not list(conf.rglob(f"{task_id}.yaml"))


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_task_code_holds_no_option_defaults(task_id: str) -> None:
    """No ``DEFAULTS`` dict or ``DEFAULT_*`` constant, no ``options.get(key, default)`` and no
    ``opts["key"]`` in task code: builders, evaluators and environments read typed options."""
    for path in sorted(TASKS[task_id].folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            assert not [n for n in names if "DEFAULT" in n.upper()], (
                f"{path}:{node.lineno}: defaults belong in options.py"
            )
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
            ):
                # The task's options dict by its names here (``s.options`` in the shop is a
                # product's options).
                owner = node.func.value
                name = (
                    owner.id
                    if isinstance(owner, ast.Name)
                    else owner.attr
                    if isinstance(owner, ast.Attribute)
                    else ""
                )
                assert not (
                    name in ("options", "opts")
                    and isinstance(owner, ast.Name)
                    or name == "env_options"
                ), (
                    f"{path}:{node.lineno}: {name}.get(...) hides a default; read typed options "
                    "(options.py)"
                )
            if (
                isinstance(node, ast.Subscript)
                and isinstance(node.value, ast.Name)
                and node.value.id == "opts"
            ):
                raise AssertionError(
                    f"{path}:{node.lineno}: opts[...] reads an untyped option; use opts.<name>"
                )


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_a_build_with_no_options_is_the_build_with_the_defaults(
    task_id: str, tmp_path: Path
) -> None:
    spec = TASKS[task_id]
    defaults = dataclasses.asdict(option_class(spec, "build", "fixture")())
    bare = build_task_data(spec, "fixture", tmp_path / "one", seed=0, options={})
    marker = bare.public_dir.parent / "COMPLETE.json"
    mtime = marker.stat().st_mtime_ns
    assert (
        build_task_data(spec, "fixture", tmp_path / "one", seed=0, options=defaults) == bare
    )  # one cache entry
    assert (
        marker.stat().st_mtime_ns == mtime and json.loads(marker.read_text())["options"] == defaults
    )
    spelled = build_task_data(spec, "fixture", tmp_path / "two", seed=0, options=defaults)
    assert spelled.digest == bare.digest and _files(spelled.private_dir) == _files(bare.private_dir)
    assert (
        build_task_data(spec, "fixture", tmp_path / "one", seed=0, options=SMALL).digest
        != bare.digest
    )


@pytest.mark.parametrize("task_id", sorted(PINNED_FIXTURE_DIGESTS))
def test_default_fixture_build_is_pinned(task_id: str, tmp_path: Path) -> None:
    assert (
        build_task_data(TASKS[task_id], "fixture", tmp_path, seed=0).digest
        == PINNED_FIXTURE_DIGESTS[task_id]
    )


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_unknown_options_are_refused_naming_the_valid_ones(task_id: str, tmp_path: Path) -> None:
    spec = TASKS[task_id]
    for source in spec.sources:
        build, evals = (option_class(spec, kind, source) for kind in ("build", "eval"))
        with pytest.raises(
            TaskError, match=f"unknown {task_id} build option 'no_such_option'"
        ) as refused:
            build_task_data(spec, source, tmp_path, options={"no_such_option": 1})
        assert all(f.name in str(refused.value) for f in dataclasses.fields(build))  # type: ignore[arg-type]
        assert build.__qualname__ in str(refused.value)
        with pytest.raises(
            TaskError, match=f"unknown {task_id} eval option 'no_such_option'"
        ) as refused:
            EvalContext.for_task(spec, source, tmp_path, {"no_such_option": 1})
        assert all(f.name in str(refused.value) for f in dataclasses.fields(evals))  # type: ignore[arg-type]
    assert not (tmp_path / task_id).exists(), "a refused build leaves nothing in the cache"


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_evaluator_refuses_hand_made_options(task_id: str, tmp_path: Path) -> None:
    """An evaluator called with a misspelt or partial options dict says so before reading any
    data."""
    spec = TASKS[task_id]
    evaluate, complete = load_evaluator(spec), eval_options(spec, "fixture")
    with pytest.raises(TaskError, match="unknown .* option 'no_such_option'; valid: ") as refused:
        evaluate(GarbageEngine(), EvalContext(tmp_path, {**complete, "no_such_option": 1}))
    assert all(key in str(refused.value) for key in complete)
    dropped = min(complete)
    with pytest.raises(
        TaskError, match=rf"{task_id} eval options lack {dropped}\b.*EvalContext.for_task"
    ):
        evaluate(
            GarbageEngine(),
            EvalContext(tmp_path, {k: v for k, v in complete.items() if k != dropped}),
        )


def test_given_options_override_the_defaults_and_misspellings_get_a_hint() -> None:
    spec = TASKS["gsm8k"]
    assert eval_options(spec, "fixture", {"limit": 3}) == {
        **eval_options(spec, "fixture"),
        "limit": 3,
    }
    assert (
        eval_options(spec, "hub")["num_shots"] == 4
        and eval_options(spec, "fixture")["num_shots"] == 0
    )
    with pytest.raises(
        TaskError, match=r"'eval_sise' \(did you mean 'eval_size'\?\); valid: eval_size, train_size"
    ):
        build_task_data(spec, "fixture", Path("/nonexistent"), options={"eval_sise": 3})


def test_options_of_the_wrong_type_are_refused_naming_type_and_help(tmp_path: Path) -> None:
    spec = TASKS["gsm8k"]
    with pytest.raises(
        TaskError,
        match=r"gsm8k build option 'train_size' must be an integer \(int\).*"
        r"\(generated problems in public/train\.jsonl\)",
    ):
        build_task_data(spec, "fixture", tmp_path, options={"train_size": "abc"})
    with pytest.raises(TaskError, match="has no source 'nope'; valid sources: fixture, hub"):
        eval_options(spec, "nope")
    ctx = EvalContext.for_task(spec, "hub", tmp_path, {"limit": "3"})
    assert (
        type(ctx.options).__name__ == "HubEval"
        and ctx.options.limit == 3
        and ctx.options.num_shots == 4
    )


def test_options_must_match_the_manifest_sources(tmp_path: Path) -> None:
    folder = write_task(tmp_path / "tasks" / "mismatch", "size: int = option(3, 'items')")
    options = folder / "options.py"
    options.write_text(
        options.read_text().replace("build={'fixture': Build}", "build={'hub': Build}")
    )
    spec = discover_tasks(tmp_path / "tasks")["mismatch"]
    with pytest.raises(
        TaskError, match=r"TaskOptions\.build must have one class per source.*\(fixture\), got hub"
    ):
        build_task_data(spec, "fixture", tmp_path / "cache")


def test_a_plugin_task_reads_its_defaults_from_its_own_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A renamed copy of gsm8k in a plugin folder (AUTORL_PLUGIN_PATH), smaller by its own
    options.py:
    the build and eval defaults come from the folder, and its evaluator checks its options."""
    plugin = tmp_path / "plugin"
    folder = plugin / "tasks" / "gsm8k_plugged"
    shutil.copytree(get_task("gsm8k").folder, folder, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = folder / "task.yaml"
    manifest.write_text(
        manifest.read_text(encoding="utf-8").replace("id: gsm8k", "id: gsm8k_plugged"),
        encoding="utf-8",
    )
    options = folder / "options.py"
    options.write_text(
        options.read_text(encoding="utf-8")
        .replace("option(2000,", "option(30,")
        .replace("option(200,", "option(7,")
    )
    monkeypatch.setenv("AUTORL_PLUGIN_PATH", str(plugin))
    monkeypatch.setattr(
        autorl.task_code, "__path__", list(autorl.task_code.__path__)
    )  # undone after the test
    try:
        spec = get_task("gsm8k_plugged")
        assert (
            option_class(spec, "build", "fixture").__module__
            == "autorl.task_code.gsm8k_plugged.options"
        )
        data = build_task_data(spec, "fixture", tmp_path / "cache")
        assert len(_rows(data.private_dir)) == 7
        result = load_evaluator(spec)(
            GarbageEngine(), EvalContext.for_task(spec, "fixture", data.private_dir)
        )
        assert result.score == 0.0 and result.num_examples == 7
        with pytest.raises(TaskError, match=r"unknown gsm8k_plugged eval option 'shots'.*\(Eval\)"):
            load_evaluator(spec)(
                GarbageEngine(),
                EvalContext(data.private_dir, {**eval_options(spec, "fixture"), "shots": 1}),
            )
    finally:
        for name in [n for n in sys.modules if n.startswith("autorl.task_code.gsm8k_plugged")]:
            del sys.modules[name]


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
