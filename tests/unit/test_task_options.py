"""Task options, checked for every folder under tasks/: the run defaults and typed options live in
the folder, a build with no options is the build with the defaults (pinned digests), and unknown,
mistyped or hand-made options are refused naming what is valid."""

from __future__ import annotations

import ast
import dataclasses
import json
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
    build_task_data,
    discover_tasks,
    eval_options,
    get_task,
    load_evaluator,
    task_options,
)
from tests.helpers.task_folders import SMALL, TASKS, GarbageEngine, write_task
from tests.helpers.task_folders import files as _files
from tests.helpers.task_folders import rows as _rows

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
