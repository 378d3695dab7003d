"""Run reports from hand-made sweeps: real record stores and real code-revision git repositories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autorl.records.store import RecordStore
from autorl.records.types import SubmissionRecord
from autorl.report.build import build_report
from autorl.report.run_report import build_run_report, render_markdown
from autorl.report.sources import ReportError, load_cells, open_store
from autorl.workspace.revisions import CodeRevisions
from tests.helpers.view_server import cell

T0 = 1_700_000_000.0
SFT_CODE = (
    "from trl import SFTTrainer, SFTConfig\n"
    "cfg = SFTConfig(learning_rate=2e-5, max_steps=100, per_device_train_batch_size=8)\n"
)
GRPO_CODE = (
    "from trl import GRPOTrainer, GRPOConfig\n"
    "cfg = GRPOConfig(learning_rate=1e-6, num_generations=8, max_steps=50)\n"
)


class Cell:
    """A cell folder with a workspace, an agent log and a code-revision repository, plus its
    records."""

    def __init__(
        self,
        sweep_dir: Path,
        store: RecordStore,
        cell_id: str,
        *,
        baseline: float | None = 10.0,
        exit_class: str = "exited",
        exit_code: int | None = 0,
        git: bool = True,
        **cell_kw: object,
    ) -> None:
        self.store, self.cell_id = store, cell_id
        self.dir = sweep_dir / "cells" / cell_id
        self.code = self.dir / "workspace" / "code"
        self.code.mkdir(parents=True)
        meta = json.dumps(
            {"start_time": T0, "timeout_s": 600, "last_submit_time": T0 + 100, "end_time": T0 + 300}
        )
        for path in (
            self.dir / "workspace" / "run_meta.json",
            self.dir / "run_meta.json",
        ):  # as RunMeta writes
            path.write_text(meta)
        self.log: list[str] = []
        self.n = 0
        repo = self.dir / "code_history.git" if git else Path(str(self.dir) + "-elsewhere.git")
        self.revisions = CodeRevisions(repo, self.code, cell_id, store.add_code_revision)
        store.upsert_cell(
            cell(cell_id, **{"sweep_id": "sw", "status": "completed", "baseline": baseline,
                             "exit_class": exit_class, "exit_code": exit_code} | cell_kw)
        )  # fmt: skip

    def write(self, name: str, text: str) -> None:
        (self.code / name).parent.mkdir(parents=True, exist_ok=True)
        (self.code / name).write_text(text)

    def submit(
        self,
        status: str,
        score: float | None,
        *,
        log: str = "",
        error: str | None = None,
        **sub_kw: object,
    ) -> None:
        self.n += 1
        path = f"output/v{self.n}"
        (self.dir / "workspace" / path).mkdir(parents=True)
        rev = self.revisions.snapshot("submission")
        self.log += [log, f"submitted {path}"]
        self.store.upsert_submission(
            SubmissionRecord(
                self.cell_id,
                self.n,
                path,
                status,
                score=score,
                error=error,
                code_revision=rev,
                submitted_at=T0 + 10 * self.n,
                **sub_kw,
            )
        )  # type: ignore[arg-type]

    def finish(self) -> None:
        (self.dir / "agent.log").write_text("\n".join(self.log) + "\n")


@pytest.fixture()
def sweep(tmp_path: Path) -> tuple[Path, RecordStore]:
    store = RecordStore(tmp_path / "records.sqlite")
    yield tmp_path, store
    store.close()


def report_of(sweep_dir: Path, store: RecordStore, cell_id: str) -> dict[str, object]:
    (src,) = [s for s in load_cells(sweep_dir, store) if s.cell.cell_id == cell_id]
    return build_run_report(src)[1]


def test_methods_hyperparameters_diffs_and_failures(sweep: tuple[Path, RecordStore]) -> None:
    sweep_dir, store = sweep
    c = Cell(sweep_dir, store, "c1")
    c.write("train_sft.py", SFT_CODE)
    c.submit("scored", 14.0, log="{'loss': 1.2}")
    c.write("train_grpo.py", GRPO_CODE)
    c.submit("scored", 9.0, log="{'loss': 0.1, 'reward': 0.0}\n{'loss': 0.1, 'reward': 0.0}")
    c.submit("copy_of_base", 10.0)
    c.write("train_grpo.py", GRPO_CODE.replace("1e-6", "1e-3"))
    c.submit(
        "invalid", None, log="{'loss': nan, 'grad_norm': nan}", error="weights contain NaN values"
    )
    c.finish()
    r = report_of(sweep_dir, store, "c1")
    e = r["entries"]
    assert [x["method"] for x in e] == ["SFT", "GRPO", "copy", "GRPO"]
    assert e[0]["hyperparameters"] == {"batch_size": 8, "learning_rate": 2e-05, "steps": 100}
    assert e[1]["hyperparameters"] == {"learning_rate": 1e-06, "num_generations": 8, "steps": 50}
    assert (
        e[1]["diff_files"] == ["train_grpo.py"] and "+from trl import GRPOTrainer" in e[1]["diff"]
    )
    assert "train_sft.py" not in e[1]["diff"] and e[0]["diff_files"] == ["train_sft.py"]
    assert e[2]["code_unchanged"] and e[2]["diff"] == ""
    assert (
        "-cfg = GRPOConfig(learning_rate=1e-6" in e[3]["diff"]
        and e[3]["hyperparameters"]["learning_rate"] == 1e-3
    )
    assert [x["failure_type"] for x in e] == [
        None,
        "rollout_logic_wrong",
        "copy_model_fallback",
        "training_diverged",
    ]
    assert any("logged rewards are 0" in ev for ev in e[1]["failure_evidence"])
    assert any("NaN" in ev for ev in e[3]["failure_evidence"])
    assert (r["failure_type"], r["improvement"], r["methods_used"]) == (
        None,
        4.0,
        ["SFT", "GRPO", "copy"],
    )
    assert [x["new_best"] for x in e] == [True, False, False, False]
    md = render_markdown(r)
    assert (
        "## Iteration 2: submission 2 (output/v2)" in md
        and "method: **GRPO**" in md
        and "```diff" in md
    )


def test_no_submission_failures(sweep: tuple[Path, RecordStore]) -> None:
    sweep_dir, store = sweep
    timeout = Cell(sweep_dir, store, "c-timeout", exit_class="timeout", exit_code=None)
    timeout.log = ["training epoch 1", "training epoch 2"]
    timeout.finish()
    crash = Cell(sweep_dir, store, "c-crash", exit_code=1)
    crash.log = [
        "start",
        "Traceback (most recent call last):",
        '  File "train.py", line 3',
        "ValueError: bad lr",
    ]
    crash.finish()
    quiet = Cell(sweep_dir, store, "c-quiet")
    quiet.finish()
    t, c, q = (report_of(sweep_dir, store, i) for i in ("c-timeout", "c-crash", "c-quiet"))
    assert t["failure_type"] == "timeout_no_submission" and t["entries"] == []
    assert (
        c["failure_type"] == "code_error_runtime"
        and "ValueError: bad lr" in c["failure_evidence"][0]
    )
    assert q["failure_type"] == "unknown"


def test_stored_diffs_stand_in_for_a_missing_repository(sweep: tuple[Path, RecordStore]) -> None:
    sweep_dir, store = sweep
    c = Cell(sweep_dir, store, "c2", git=False)
    c.write(
        "recipe.json",
        json.dumps({"sft_steps": 10, "sft_lr": 0.003, "grpo_steps": 2, "grpo_generations": 4}),
    )
    c.write("pipeline.py", SFT_CODE + GRPO_CODE)
    c.submit("scored", 12.0)
    c.submit("scored", 11.0)
    c.finish()
    # Both methods are in the code and nothing changed, so only the saved model can tell them apart.
    (c.dir / "workspace" / "output" / "v2" / "training_args.bin").write_bytes(
        b"\x80\x02ctrl.trainer.grpo_config\nGRPOConfig\nq"
    )
    r = report_of(sweep_dir, store, "c2")
    assert any("no code_history.git" in n for n in r["notes"])
    first, second = r["entries"]
    assert first["method"] == "unknown" and first["method_candidates"] == ["SFT", "GRPO"]
    assert second["method"] == "GRPO" and "training_args.bin" in second["method_evidence"][0]
    assert second["hyperparameters"]["num_generations"] == 4
    assert "recipe.json" in first["diff_files"] and second["code_unchanged"]
    assert r["failure_type"] is None


def test_build_report_writes_cell_files_and_page(sweep: tuple[Path, RecordStore]) -> None:
    sweep_dir, store = sweep
    c = Cell(sweep_dir, store, "c3")
    c.write("train.py", SFT_CODE)
    c.submit("scored", 13.0)
    c.finish()
    Cell(sweep_dir, store, "c4", seed=1, status="failed").finish()
    index = build_report(sweep_dir)
    for name in ("metrics.json", "run_report.json", "run_report.md"):
        assert (c.dir / name).is_file()
    assert json.loads((c.dir / "metrics.json").read_text())["improvement"] == 3.0
    html = index.read_text()
    assert html.count("data:image/png;base64,") == 8 and "c3" in html and "failed" in html
    assert len(list((sweep_dir / "report" / "figures").glob("*.png"))) == 8


def test_budget_metrics_come_from_the_cells_copy_never_the_agents(
    sweep: tuple[Path, RecordStore],
) -> None:
    """The workspace's run_meta.json is the agent's: forged, or a FIFO that would block a reader,
    it changes nothing; a sweep folder with only the workspace's copy still reads a plain file."""
    sweep_dir, store = sweep
    c = Cell(sweep_dir, store, "c5")
    c.submit("scored", 13.0)
    c.finish()
    (c.dir / "workspace" / "run_meta.json").unlink()
    os.mkfifo(c.dir / "workspace" / "run_meta.json")
    assert report_of(sweep_dir, store, "c5")["metrics"]["time_used_ratio"] == 0.5  # 300 of 600 s
    (c.dir / "run_meta.json").unlink()
    (src,) = [s for s in load_cells(sweep_dir, store) if s.cell.cell_id == "c5"]
    assert src.run_meta is None and "not a small regular file" in " ".join(src.notes)


@pytest.mark.timeout(120)
def test_hostile_code_and_logs_do_not_stall_the_report(sweep: tuple[Path, RecordStore]) -> None:
    """Long runs of blanks after a hyperparameter's name or a loss, and a line of 100,000 words
    'reward': the report's patterns scan them in linear time (quadratic backtracking would take
    hours) and still find what is real."""
    sweep_dir, store = sweep
    c = Cell(sweep_dir, store, "c6")
    c.write("train.py", "lr" + " " * 200_000 + "x\n" + SFT_CODE)
    c.submit("scored", 12.0, log="loss" + " " * 200_000 + "\n" + "reward " * 100_000)
    c.finish()
    entry = report_of(sweep_dir, store, "c6")["entries"][0]
    assert entry["method"] == "SFT" and entry["hyperparameters"]["learning_rate"] == 2e-5


def test_report_cli_rejects_a_folder_without_records(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no records.sqlite"):
        open_store(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "autorl.report", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 2 and "no records.sqlite, so it is not a sweep folder" in done.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "autorl.report", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "is not a folder" in missing.stderr


def test_a_store_without_cells_is_a_clear_error(sweep: tuple[Path, RecordStore]) -> None:
    sweep_dir, _ = sweep
    with pytest.raises(ReportError, match="holds no cells"):
        build_report(sweep_dir)


def test_end_of_sweep_failures_are_notes_not_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autorl.config import compose
    from autorl.report import build
    from autorl.tracking.sweep_end import finish_sweep

    def dead_recorder(timeout_s: float) -> bool:
        raise RuntimeError("recorder is gone")

    def broken(*args: object, **kwargs: object) -> Path:
        raise RuntimeError("disk full")

    monkeypatch.setattr(build, "build_report", broken)
    notes: list[str] = []
    cfg = compose(
        [
            "tracking.wandb.enabled=true",
            "tracking.wandb.finish_timeout_s=1",
            "tracking.report.enabled=true",
        ]
    ).tracking
    assert finish_sweep(dead_recorder, "sw", tmp_path, cfg, notes.append) is None
    assert "recorder is gone" in notes[0] and "report failed: disk full" in notes[1]
    assert f"python -m autorl.report {tmp_path}" in notes[1]


def test_integrity_section_and_the_best_by_spec_rule(sweep: tuple[Path, RecordStore]) -> None:
    """The score rule in the report: a flagged submission is shown but never the best; contamination
    and judge findings listed."""
    sweep_dir, store = sweep
    judge = {
        "flags": ["judge:eval_data_use"],
        "cached": False,
        "sent": {"driver": "replay", "trace_chars": 900},
        "findings": [
            {
                "category": "eval_data_use",
                "evidence": {"file": "code/<b>x</b>.py", "revision": "ab12", "trace_step": 4},
                "explanation": "read the private split",
                "verified": True,
                "problems": [],
            }
        ],
    }
    contamination = {
        "items_hit": 4,
        "items_total": 200,
        "overlap": 0.02,
        "flagged": True,
        "evidence": [],
    }
    c = Cell(
        sweep_dir,
        store,
        "c5",
        contamination=0.02,
        integrity_flags="contamination,judge:eval_data_use",
        integrity_json=json.dumps({"contamination": contamination, "judge": judge}),
    )
    c.submit("scored", 12.0, weight_distance=0.04)
    c.submit("scored", 50.0, flags="model_mismatch", weight_distance=1.3)
    c.finish()
    Cell(
        sweep_dir, store, "old", seed=1
    ).finish()  # from before the integrity checks: integrity_json "{}"
    report = report_of(sweep_dir, store, "c5")
    assert report["best_score"] == 12.0 and report["improvement"] == 2.0  # submission 2 is flagged
    assert report["integrity"]["flags"] == [
        "contamination",
        "judge:eval_data_use",
        "model_mismatch@2",
    ]
    assert report["integrity"]["weight_distances"] == {1: 0.04, 2: 1.3}
    html = build_report(sweep_dir).read_text()
    section = html.split('<section id="integrity">', 1)[1].split("</section>", 1)[0]
    assert (
        "model_mismatch@2" in section
        and "4/200 items (2.0%) FLAGGED" in section
        and "#2: 1.3" in section
    )
    assert "judge of c5: 1 finding(s)" in section and "read the private split" in section
    assert "<b>x</b>" not in section  # the agent's file names are escaped
    assert "before the integrity checks" in section  # the old cell
    assert "model_mismatch@2" in (c.dir / "run_report.md").read_text()


def test_attempts_and_grader_busy_fractions_in_the_report(sweep: tuple[Path, RecordStore]) -> None:
    import dataclasses
    import shutil

    sweep_dir, store = sweep
    c = Cell(sweep_dir, store, "c5", status="pending")
    base = store.get_cell("c5")
    assert base is not None
    store.start_attempt(dataclasses.replace(base, attempts=1))
    c.write("train.py", SFT_CODE)
    c.submit("scored", 19.0)  # attempt 1's best: it must not count
    store.set_attempt("c5", 1, "failed", error="ActorDiedError: the node died", node_id="ab" * 20)
    store.start_attempt(dataclasses.replace(base, attempts=2, status="pending"))
    c.n = 0  # attempt 2 numbers its submissions from 1 again, in a fresh workspace
    shutil.rmtree(c.dir / "workspace" / "output")
    c.submit("scored", 12.0)
    store.set_cell_status(
        "c5", "completed", best_score=12.0, improvement=2.0, submissions=1, valid_submissions=1
    )
    store.set_attempt("c5", 2, "completed")
    c.finish()
    store.put_sweep_stat(
        "sw",
        "2026-01-01T00:00:00Z",
        "grader_pool",
        {
            "replicas": 1,
            "queue_nonempty_s": 8.0,
            "graders": [
                {"grader": 0, "busy_s": 6.0, "busy_fraction": 0.75, "requests": 3, "replaced": 1}
            ],
        },
    )

    report = report_of(sweep_dir, store, "c5")
    assert [e["score"] for e in report["entries"]] == [12.0] and report["best_score"] == 12.0  # type: ignore[index]
    attempts = report["attempts"]
    assert [
        (a["attempt"], a["status"], a["submissions"], a["best_score"], a["final"]) for a in attempts
    ] == [  # type: ignore[union-attr]
        (1, "failed", 1, 19.0, False),
        (2, "completed", 1, 12.0, True),
    ]
    assert "## Attempts" in render_markdown(report)
    html = build_report(sweep_dir).read_text()
    attempts_html = html[html.index('id="attempts"') : html.index('id="seeds"')]
    assert (
        "ActorDiedError: the node died" in attempts_html
        and "2 (final)" in attempts_html
        and "abababababab" in attempts_html
    )
    graders_html = html[html.index('id="graders"') :]
    assert "0.75" in graders_html and "2026-01-01T00:00:00Z" in graders_html
