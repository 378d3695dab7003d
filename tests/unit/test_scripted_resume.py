"""A resumed scripted agent goes on from its last recorded stage (agent_kit.scripted.progress).

The real runner (``run_settings``, after the adapter wrote the settings and its command line) runs
the real gsm8k recipe; only the TRL training and the grading API are replaced: a stage's training
copies the tiny model into its output folder (a real model folder to verify), and the grader is a
fake that numbers the submissions. A node loss is a run that raises in GRPO, followed by a copy of
its workspace to another path (what a restore from checkpoint leaves) and a launch with
``resume_index=1``.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent_kit.scripted import common, interactive
from agent_kit.scripted.__main__ import parse_args, resume_requested, run_settings
from agent_kit.scripted.interactive import RolloutStats
from agent_kit.scripted.policy import LocalPolicy, Sample
from agent_kit.scripted.progress import (
    PROGRESS,
    PROGRESS_FILE,
    RESUME_FLAG,
    folder_files,
    model_folder_problem,
    settings_fingerprint,
)
from autorl.agents.base import AgentLaunch, LaunchContext, load_adapter
from autorl.config import compose
from autorl.tasks import get_task
from autorl.workspace.layout import copy_agent_code


class NodeLost(RuntimeError):
    """What the fake GRPO raises to stop a run midway."""


@dataclass
class FakeGrader:
    """The grading API's endpoints the scripted agent calls, numbering submissions from 1."""

    submissions: list[dict[str, Any]] = field(default_factory=list)

    def __call__(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 0
    ) -> dict[str, Any]:
        if (method, path) == ("GET", "/time"):
            return {"remaining": 3600.0}
        if (method, path) == ("GET", "/submissions"):
            return {"submissions": list(self.submissions)}
        assert (method, path) == ("POST", "/submit") and body is not None, (method, path)
        answer = {
            "submission_id": len(self.submissions) + 1,
            "status": "scored",
            "model_path": body["model_path"],
            "score": 0.1 * (len(self.submissions) + 1),
            "improvement": 0.0,
        }
        self.submissions.append(answer)
        return answer

    def paths(self) -> list[str]:
        """The submitted model paths in order."""
        return [s["model_path"] for s in self.submissions]


@dataclass
class FakeTraining:
    """SFT and GRPO that copy a model folder into their target and note what they started from."""

    model: Path
    calls: list[tuple[str, str]] = field(default_factory=list)
    lose_node_in_grpo: bool = False

    def sft(self, settings: Any, conversations: Any, base: str, target: Path, share: float) -> None:
        self.calls.append(("sft", str(base)))
        shutil.copytree(base, target, dirs_exist_ok=True)

    def grpo(
        self, settings: Any, rows: Any, reward: Any, start: Path, target: Path, share: float
    ) -> None:
        # GRPO must start from SFT's model as this workspace holds it, whole.
        assert model_folder_problem(start, folder_files(start)) is None
        self.calls.append(("grpo", str(start)))
        if self.lose_node_in_grpo:
            raise NodeLost("the node went away")
        shutil.copytree(start, target, dirs_exist_ok=True)


@pytest.fixture
def grader(monkeypatch: pytest.MonkeyPatch) -> FakeGrader:
    fake = FakeGrader()
    monkeypatch.setattr(common, "api", fake)
    return fake


@pytest.fixture
def training(monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path) -> FakeTraining:
    fake = FakeTraining(tiny_model_dir)
    monkeypatch.setattr(common, "_train_sft", fake.sft)
    monkeypatch.setattr(common, "_train_grpo", fake.grpo)
    return fake


@pytest.fixture(autouse=True)
def isolated_runner(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The runner imports the recipe as ``task_agent`` and starts the process-wide record: both
    are undone after each test, so no other test records into its folder."""
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))
    yield
    for name in [n for n in sys.modules if n == "task_agent" or n.startswith("task_agent.")]:
        del sys.modules[name]
    PROGRESS.stop()


def _node(root: Path, monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path) -> Path:
    """A gsm8k cell's workspace at ``root`` (its data a few rows), the process inside it."""
    workspace = root / "workspace"
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    rows = [
        {"question": f"What is {n} + 1?", "answer": f"{n} + 1 = {n + 1} #### {n + 1}"}
        for n in range(4)
    ]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    workspace.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(workspace)
    monkeypatch.setenv("TASK", "gsm8k")
    monkeypatch.setenv("MODEL_PATH", str(tiny_model_dir))
    monkeypatch.setenv("DATA_PATH", str(data))
    monkeypatch.setenv("OUTPUT_DIR", str(workspace / "output"))
    return workspace


# One GRPO step on two completions of eight tokens: the real stage, fast on a CPU.
SMALL = [
    "agent.grpo.max_steps=1",
    "agent.grpo.per_device_train_batch_size=4",
    "agent.grpo.num_generations=2",
    "agent.grpo.max_completion_length=8",
]


def _adapter_launch(root: Path, workspace: Path, resume_index: int) -> AgentLaunch:
    """The adapter's launch of a gsm8k cell (it writes the settings file into ``workspace``)."""
    config = compose(["agent=scripted", *SMALL])
    copy = copy_agent_code(get_task("gsm8k"), root / "agent_code")
    ctx = LaunchContext(
        workspace, config.agent, config.driver, {}, seed=3, task_agent_dir=copy,
        resume_index=resume_index,
        continuation_prompt="the machine was replaced" if resume_index else None,
    )  # fmt: skip
    launch = load_adapter(config.agent).launch(ctx)
    assert (RESUME_FLAG in launch.command) == (resume_index > 0)
    return launch


def _launch(root: Path, workspace: Path, resume_index: int = 0) -> int:
    """What the cell does, in this process: the adapter's launch, then the runner on its command
    line."""
    argv = _adapter_launch(root, workspace, resume_index).command[3:]
    return run_settings(parse_args(argv), resume=resume_requested(argv))


def _restore_elsewhere(
    old: Path, new_root: Path, monkeypatch: pytest.MonkeyPatch, model: Path
) -> Path:
    """The workspace as a checkpoint restore leaves it on another node (another path)."""
    workspace = _node(new_root, monkeypatch, model)
    for part in ("code", "output"):
        shutil.copytree(old / part, workspace / part)
    return workspace


def _lose_node_after_sft(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, training: FakeTraining, model: Path
) -> Path:
    """A first launch that finishes SFT, submits it, and is lost in GRPO."""
    first = _node(tmp_path / "node1", monkeypatch, model)
    training.lose_node_in_grpo = True
    with pytest.raises(NodeLost):
        _launch(tmp_path / "node1", first)
    training.lose_node_in_grpo = False
    return first


def test_a_resume_skips_the_finished_stage_and_its_submission(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tiny_model_dir: Path,
    grader: FakeGrader,
    training: FakeTraining,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first = _lose_node_after_sft(tmp_path, monkeypatch, training, tiny_model_dir)
    assert grader.paths() == ["output/v1"]
    record = json.loads((first / PROGRESS_FILE).read_text())
    (stage,) = record["stages"]
    assert stage["name"] == "sft" and stage["output"] == "output/v1"
    assert stage["submission"]["submission_id"] == 1 and "model.safetensors" in stage["files"]

    second = _restore_elsewhere(first, tmp_path / "node2", monkeypatch, tiny_model_dir)
    training.calls.clear()
    assert _launch(tmp_path / "node2", second, resume_index=1) == 0

    # SFT did not run again; GRPO started from SFT's output in the restored workspace.
    assert training.calls == [("grpo", str(second / "output" / "v1"))]
    assert grader.paths() == ["output/v1", "output/v2"]  # v1 once
    out = capsys.readouterr().out
    assert "resume: skipping stage sft: output/v1 was finished before, submitted as #1" in out
    assert "resume: not submitting output/v1 again; it was submission #1" in out
    stages = json.loads((second / PROGRESS_FILE).read_text())["stages"]
    assert [(s["name"], s["submission"]["submission_id"]) for s in stages] == [
        ("sft", 1),
        ("grpo", 2),
    ]


def test_a_garbled_progress_file_starts_over(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tiny_model_dir: Path,
    grader: FakeGrader,
    training: FakeTraining,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first = _lose_node_after_sft(tmp_path, monkeypatch, training, tiny_model_dir)
    second = _restore_elsewhere(first, tmp_path / "node2", monkeypatch, tiny_model_dir)
    (second / PROGRESS_FILE).write_text('{"version": 1, "stages": [{"na')
    training.calls.clear()
    assert _launch(tmp_path / "node2", second, resume_index=1) == 0
    assert [name for name, _ in training.calls] == ["sft", "grpo"]
    assert training.calls[0][1] == str(tiny_model_dir)  # from the base model, not output/v1
    assert grader.paths() == ["output/v1", "output/v1", "output/v2"]
    assert "resume: starting over, no usable progress record" in capsys.readouterr().out


def test_a_damaged_stage_output_runs_that_stage_and_the_later_ones_again(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tiny_model_dir: Path,
    grader: FakeGrader,
    training: FakeTraining,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first = _node(tmp_path / "node1", monkeypatch, tiny_model_dir)
    assert _launch(tmp_path / "node1", first) == 0
    second = _restore_elsewhere(first, tmp_path / "node2", monkeypatch, tiny_model_dir)
    weights = second / "output" / "v1" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-16])  # a restore cut short
    training.calls.clear()
    assert _launch(tmp_path / "node2", second, resume_index=1) == 0
    assert [name for name, _ in training.calls] == ["sft", "grpo"]
    out = capsys.readouterr().out
    assert "resume: running stage sft -> output/v1 again (model.safetensors is" in out
    assert "dropping 2 recorded stage(s)" in out
    assert grader.paths() == ["output/v1", "output/v2", "output/v1", "output/v2"]


def test_a_submission_under_way_when_the_node_was_lost_is_not_made_twice(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tiny_model_dir: Path,
    grader: FakeGrader,
    training: FakeTraining,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The grader took the submission but the answer never reached the record: the resumed run
    finds it among the cell's submissions."""
    first = _lose_node_after_sft(tmp_path, monkeypatch, training, tiny_model_dir)
    second = _restore_elsewhere(first, tmp_path / "node2", monkeypatch, tiny_model_dir)
    record = json.loads((second / PROGRESS_FILE).read_text())
    record["stages"][0]["submission"] = {"pending": True}
    (second / PROGRESS_FILE).write_text(json.dumps(record))
    training.calls.clear()
    assert _launch(tmp_path / "node2", second, resume_index=1) == 0
    assert [name for name, _ in training.calls] == ["grpo"]
    assert grader.paths() == ["output/v1", "output/v2"]
    assert "not submitting output/v1 again; it was submission #1" in capsys.readouterr().out


def test_a_first_launch_ignores_an_old_record(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tiny_model_dir: Path,
    grader: FakeGrader,
    training: FakeTraining,
) -> None:
    """Without ``--resume`` the recipe runs as it always did, and its record replaces any there."""
    first = _node(tmp_path / "node1", monkeypatch, tiny_model_dir)
    assert _launch(tmp_path / "node1", first) == 0
    training.calls.clear()
    assert _launch(tmp_path / "node1", first) == 0
    assert [name for name, _ in training.calls] == ["sft", "grpo"]
    assert grader.paths() == ["output/v1", "output/v2"] * 2
    stages = json.loads((first / PROGRESS_FILE).read_text())["stages"]
    assert [s["submission"]["submission_id"] for s in stages] == [3, 4]


def test_interactive_rl_resumes_from_the_sft_model_with_its_samples(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tiny_model_dir: Path,
    grader: FakeGrader,
) -> None:
    """The interactive recipe's RL, lost once, starts again from ``output/v1`` and mixes in the
    SFT samples the first run recorded; expert play and SFT are not repeated."""
    from agent_kit.scripted.settings import (
        GrpoSettings,
        OnlineGrpoSettings,
        ScriptedSettings,
        SftSettings,
    )

    class Episodes:
        calls = 0

        def episodes(self) -> list[str]:
            return [f"train/{n}" for n in range(6)]

    expert_runs: list[str] = []
    expert = [Sample("Q>", " a|"), Sample("R>", " b|", 1.0, [("ok>", " c|")])]

    def fake_expert_sft(*args: Any) -> tuple[list[Sample], list[str]]:
        expert_runs.append("played")
        return expert, ["train/0", "train/1"]

    loaded_from: list[str] = []

    def policy_from(model_dir: str | Path, max_length: int) -> Any:
        loaded_from.append(str(model_dir))
        return LocalPolicy(model_dir, max_length)

    lost = [True]
    mixed_seen: list[list[Sample]] = []

    def fake_iteration(
        *args: Any, mixed: list[Sample] | None = None, **kwargs: Any
    ) -> RolloutStats:
        mixed_seen.append(list(mixed or []))
        if lost[0]:
            raise NodeLost("the node went away")
        return RolloutStats(0.5, 0.0)

    monkeypatch.setattr(interactive, "ApiEpisodes", Episodes)
    monkeypatch.setattr(interactive, "_expert_sft", fake_expert_sft)
    monkeypatch.setattr(interactive, "LocalPolicy", policy_from)
    monkeypatch.setattr(interactive, "rl_iteration", fake_iteration)
    settings = ScriptedSettings(
        "task_agent", "recipe:run", 0,
        SftSettings(1, 2, 1e-3, 64),
        GrpoSettings(1, 2, 2, 1e-5, 8, 0.0, 1.0),
        OnlineGrpoSettings(1, 4, 2, 1e-4, 1, 0.2, 0.7, 2, 2, 0.5, 0),
    )  # fmt: skip
    recipe = interactive.InteractiveRecipe(None, lambda e: None, 4, 64, 2)  # type: ignore[arg-type]

    def run(workspace: Path, resume: bool) -> int:
        PROGRESS.start(PROGRESS_FILE, {"task": "t"}, resume=resume, log=common.log)
        return interactive.run_recipe(settings, recipe, common.log, common.submit, lambda: 3600.0)

    first = _node(tmp_path / "node1", monkeypatch, tiny_model_dir)
    with pytest.raises(NodeLost):
        run(first, resume=False)
    second = _restore_elsewhere(first, tmp_path / "node2", monkeypatch, tiny_model_dir)
    lost[0], loaded_from[:] = False, []
    assert run(second, resume=True) == 0
    assert expert_runs == ["played"]  # once, in the first run
    assert loaded_from == [str(second / "output" / "v1")]
    assert grader.paths() == ["output/v1", "output/v2"]
    # The resumed RL mixed in the same SFT samples as the lost one.
    assert mixed_seen[1] == mixed_seen[0] and all(s.weight == 0.5 for s in mixed_seen[1])
    assert {(s.prompt, s.completion, tuple(s.more)) for s in mixed_seen[1]} == {
        (s.prompt, s.completion, tuple(s.more)) for s in expert
    }
    v2 = second / "output" / "v2"
    assert model_folder_problem(v2, folder_files(v2)) is None


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("", "does not load"),
        ("[]", "must hold an object"),
        ('{"version": 2, "settings": "S", "stages": []}', "has version 2"),
        ('{"version": 1, "settings": "other", "stages": []}', "written with other settings"),
        ('{"version": 1, "settings": "S", "stages": [{"name": "sft"}]}', "stages[0].output"),
        (None, "is no regular file"),
    ],
)
def test_a_record_that_does_not_validate_is_refused_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | None, why: str
) -> None:
    """What a resume refuses (and then starts over from): each reason named in the log."""
    import os

    monkeypatch.chdir(tmp_path)
    path = tmp_path / PROGRESS_FILE
    path.parent.mkdir()
    settings = {"task": "t"}
    if content is None:
        os.mkfifo(path)  # a read would block: refused unread
    else:
        fingerprint = settings_fingerprint(settings)
        path.write_text(content.replace('"S"', json.dumps(fingerprint)))
    lines: list[str] = []
    PROGRESS.start(path, settings, resume=True, log=lines.append)
    assert PROGRESS.pending == []
    (line,) = lines
    assert line.startswith("resume: starting over") and why in line, line


def test_the_real_process_resumes_with_real_grpo_from_the_restored_sft_model(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tiny_model_dir: Path,
    grader: FakeGrader,
    training: FakeTraining,
) -> None:
    """``python -m agent_kit.scripted --settings ... --resume`` as the adapter starts it on the
    replacement node (import guard on, real TRL GRPO, the grading API over HTTP): SFT is skipped,
    GRPO trains from the restored ``output/v1``, only ``output/v2`` is submitted."""
    import http.server
    import os
    import subprocess
    import threading

    first = _lose_node_after_sft(tmp_path, monkeypatch, training, tiny_model_dir)
    second = _restore_elsewhere(first, tmp_path / "node2", monkeypatch, tiny_model_dir)

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            reply = json.dumps(grader(method, self.path, body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def do_GET(self) -> None:
            self._answer("GET")

        def do_POST(self) -> None:
            self._answer("POST")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    launch = _adapter_launch(tmp_path / "node2", second, resume_index=1)
    env = launch.env | {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "node2"),
        "HF_HUB_OFFLINE": "1",
        "TASK": "gsm8k",
        "MODEL_PATH": str(tiny_model_dir),
        "DATA_PATH": str(tmp_path / "node2" / "data"),
        "OUTPUT_DIR": str(second / "output"),
        "GRADING_SERVER_URL": f"http://127.0.0.1:{server.server_address[1]}",
        "GRADING_TOKEN": "t",
        "OMP_NUM_THREADS": "1",
    }
    try:
        done = subprocess.run(
            launch.command, cwd=second, env=env, capture_output=True, text=True, timeout=300
        )
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resume: skipping stage sft: output/v1 was finished before" in done.stdout
    assert "GRPO done: 1 of 1 steps" in done.stdout and "SFT done" not in done.stdout
    assert grader.paths() == ["output/v1", "output/v2"]
    v2 = second / "output" / "v2"
    assert model_folder_problem(v2, folder_files(v2)) is None
    stages = json.loads((second / PROGRESS_FILE).read_text())["stages"]
    assert [(s["name"], s["submission"]["submission_id"]) for s in stages] == [
        ("sft", 1),
        ("grpo", 2),
    ]
