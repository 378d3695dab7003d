"""The scripted agent imports no grader-side task code: it runs from a copy of ``tasks/<id>/agent/``
with the grader side unavailable (not beside it on disk, refused by the process's import guard where
autorl is importable, and absent from the agent's toolchain, with which the end-to-end run
trains)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent_kit.scripted.settings import SETTINGS_FILE, ScriptedSettings
from autorl.agents.base import LaunchContext, load_adapter
from autorl.config import compose
from autorl.errors import ConfigError
from autorl.grading.api import GradingServer, create_app
from autorl.grading.model_checks import check_loadable_model, weights_hash
from autorl.grading.scoring import EvalTarget, ScoreOutcome, score_model
from autorl.grading.service import CellGradingContext, SubmissionService
from autorl.records.store import RecordStore
from autorl.records.types import SubmissionRecord
from autorl.seal.toolchain import check_toolchain, toolchain_dir, toolchain_python
from autorl.tasks import build_task_data, discover_tasks, get_task
from autorl.workspace.layout import copy_agent_code
from autorl.workspace.process import run_agent
from autorl.workspace.run_meta import RunMeta

TASKS = discover_tasks()
BUILD = {"train_size": 40, "eval_size": 8}
TARGET = EvalTarget(
    "gsm8k", get_task("gsm8k").version, "fixture", 0, BUILD, {"num_shots": 0, "max_new_tokens": 8}
)


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    "task_id", sorted(t for t, spec in TASKS.items() if spec.agent_dir.is_dir())
)
def test_agent_side_imports_alone_with_the_grader_side_refused(
    task_id: str, tmp_path: Path
) -> None:
    copy = shutil.copytree(TASKS[task_id].agent_dir, tmp_path / "agent_code")
    code = f"""
import importlib, pkgutil, sys
from pathlib import Path
from agent_kit.scripted.__main__ import (
    AGENT_PACKAGE, GRADER_SIDE, block_grader_side, import_agent_package,
)
block_grader_side()
import_agent_package(Path({str(copy)!r}))
for info in pkgutil.walk_packages([{str(copy)!r}], AGENT_PACKAGE + "."):
    importlib.import_module(info.name)
recipe = importlib.import_module(AGENT_PACKAGE + ".recipe")
assert callable(recipe.run)
leaked = sorted(m for m in sys.modules if m.startswith(GRADER_SIDE))
assert not leaked, leaked
print("ok")
"""
    done = _python(code, tmp_path)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_the_guard_refuses_grader_side_imports(tmp_path: Path) -> None:
    code = """
from agent_kit.scripted.__main__ import block_grader_side
block_grader_side()
for name in (
    "autorl.tasks", "autorl.task_code.gsm8k.fixture", "autorl.grading.scoring",
    "autorl.judge.client",
):
    try:
        __import__(name)
    except ImportError as error:
        assert "grader-side" in str(error), error
    else:
        raise SystemExit(f"{name} was importable")
print("refused")
"""
    done = _python(code, tmp_path)
    assert done.returncode == 0 and "refused" in done.stdout, done.stderr[-3000:]


class _Sink:
    def __init__(self, store: RecordStore) -> None:
        self.store = store

    def record_submission(self, record: SubmissionRecord) -> None:
        self.store.upsert_submission(record)


def test_scripted_gsm8k_runs_end_to_end_from_its_agent_side_alone(
    tmp_path: Path, tiny_model_dir: Path, cache_dir: Path
) -> None:
    """The real process, adapter command line and grading API, with the agent's toolchain (no autorl
    in it) and the cell's copy of the agent-side code (agent_kit and the task's agent/) as the only
    code on its
    path."""
    spec = get_task("gsm8k")
    data = build_task_data(spec, "fixture", cache_dir / "tasks", options=BUILD)
    workspace = tmp_path / "workspace"
    for sub in ("output", "models", "code"):
        (workspace / sub).mkdir(parents=True)
    shutil.copytree(data.public_dir, workspace / "data")
    (workspace / "models" / "tiny").symlink_to(tiny_model_dir)
    agent_code = copy_agent_code(spec, tmp_path / "cell" / "agent_code")
    assert agent_code is not None
    toolchain = toolchain_dir(None)
    check_toolchain(toolchain)  # `make test-deps` builds it

    base_hash = weights_hash(check_loadable_model(tiny_model_dir))
    store = RecordStore(tmp_path / "records.sqlite")
    run_meta = RunMeta(workspace / "run_meta.json", 600, tmp_path)

    def scorer(model_dir: Path, digest: str) -> tuple[ScoreOutcome, bool]:
        return score_model(TARGET, model_dir, cache_dir, batch_size=8), False

    service = SubmissionService(
        CellGradingContext("cell-a", workspace, base_hash, 0.0, 2),
        scorer,
        _Sink(store),
        run_meta,
        tmp_path / "grader_copies",
    )
    app = create_app(
        service,
        run_meta,
        token="t",
        task_id="gsm8k",
        max_body_bytes=1024,
        submit_timeout_s=lambda: 300.0,
    )
    server = GradingServer(app)
    server.start()
    try:
        # Two SFT steps and one GRPO step: enough to run every stage of the recipe, fast on a CPU.
        config = compose(
            [
                "agent=scripted",
                "agent.sft.max_steps=2",
                "agent.sft.per_device_train_batch_size=4",
                "agent.grpo.max_steps=1",
                "agent.grpo.per_device_train_batch_size=4",
                "agent.grpo.num_generations=2",
                "agent.grpo.max_completion_length=8",
            ]
        )
        agent_cfg = config.agent
        # What a sealed cell passes: no PYTHONPATH or project variables from this process.
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path / "cell"),
            "HF_HUB_OFFLINE": "1",
            "TASK": "gsm8k",
            "MODEL_PATH": str(workspace / "models" / "tiny"),
            "DATA_PATH": str(workspace / "data"),
            "OUTPUT_DIR": str(workspace / "output"),
            "GRADING_SERVER_URL": server.url,
            "GRADING_TOKEN": "t",
            "OMP_NUM_THREADS": "1",
        }
        launch = load_adapter(agent_cfg).launch(
            LaunchContext(
                workspace,
                agent_cfg,
                config.driver,
                env,
                tmp_path / "cell",
                0,
                task_agent_dir=agent_code,
                task_recipe=spec.entry_points["recipe"],
                python=str(toolchain_python(toolchain)),
            )
        )
        assert launch.command[:3] == [str(toolchain_python(toolchain)), "-m", "agent_kit.scripted"]
        settings = ScriptedSettings.load(Path(launch.command[-1]))
        assert launch.command[3:] == ["--settings", str(workspace / SETTINGS_FILE)]
        assert settings.recipe_dir == str(agent_code) and settings.sft.max_steps == 2
        assert launch.env["PYTHONPATH"] == str(agent_code.parent)
        run_meta.update(start_time=time.time())
        result = run_agent(
            launch.command,
            cwd=workspace,
            env=launch.env,
            log_path=tmp_path / "agent.log",
            budget_s=600,
            grace_s=1.0,
            cancel=threading.Event(),
        )
        service.drain(300)
    finally:
        server.stop()
        service.close()
    log = (tmp_path / "agent.log").read_text()
    assert (result.exit_class, result.exit_code) == ("exited", 0), log[-3000:]
    statuses = [s.status for s in store.list_submissions("cell-a")]
    store.close()
    # Both stages submitted; one GRPO step may leave the weights unchanged (then v2 is a duplicate).
    assert (
        len(statuses) == 2 and statuses[0] == "scored" and statuses[1] in ("scored", "duplicate")
    ), (statuses, log[-2000:])


def test_the_adapter_runs_the_copy_with_the_given_interpreter_and_refuses_the_task_folder(
    tmp_path: Path,
) -> None:
    spec = get_task("gsm8k")
    config = compose(["agent=scripted"])
    adapter = load_adapter(config.agent)
    copy = copy_agent_code(spec, tmp_path / "agent_code")
    assert copy is not None
    env = {"PYTHONPATH": "/elsewhere", "TASK": "gsm8k"}
    launch = adapter.launch(
        LaunchContext(tmp_path, config.agent, config.driver, env, task_agent_dir=copy)
    )
    assert launch.command[:3] == [
        sys.executable,
        "-m",
        "agent_kit.scripted",
    ]  # no toolchain given: sandbox.mode=none
    assert ScriptedSettings.load(tmp_path / SETTINGS_FILE).recipe_dir == str(copy)
    assert launch.env["PYTHONPATH"] == f"{tmp_path / 'agent_code'}{os.pathsep}/elsewhere"
    assert launch.read_only == (tmp_path / "agent_code",) and env["PYTHONPATH"] == "/elsewhere"
    # The task's own folder would put its grader side on the agent's path (and into a sealed cell).
    with pytest.raises(
        ConfigError, match="not a copy made by autorl.workspace.layout.copy_agent_code"
    ):
        adapter.launch(
            LaunchContext(tmp_path, config.agent, config.driver, env, task_agent_dir=spec.agent_dir)
        )
