"""grading.feedback (docs/design.md#the-grading-api): the selection rule, the test split in both
modes, a dev split the agent
sees scores of, and test scores it never sees."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from autorl.config import compose
from autorl.errors import ConfigError
from autorl.grading.heldout import DEV_SEED, check_dev_split, dev_target, score_on_test
from autorl.grading.model_checks import check_loadable_model, weights_hash
from autorl.grading.scoring import ScoreOutcome, target_from_config
from autorl.grading.service import CellGradingContext, SubmissionService
from autorl.records.results import summarize_submissions
from autorl.records.types import SubmissionRecord
from autorl.tasks import build_task_data, get_task
from autorl.workspace.run_meta import RunMeta


def sub(
    i: int, status: str, score: float | None, test: float | None = None, flags: str | None = None
) -> SubmissionRecord:
    return SubmissionRecord(
        "c", i, f"output/{i}", status, score=score, test_score=test, flags=flags
    )


# (submissions, allow_flagged, feedback) -> (best id, best_score (its test score),
# best_feedback_score, best_on_test)
SELECTION = [
    # dev feedback: selected on the dev score, reported with its test score; best_on_test is the max
    # test score
    ([sub(1, "scored", 0.2, 0.9), sub(2, "scored", 0.5, 0.4)], False, "dev", (2, 0.4, 0.5, 0.9)),
    # ties on the feedback score: the earliest wins, whatever the test scores
    (
        [sub(1, "scored", 0.5, 0.1), sub(2, "duplicate", 0.5, 0.8), sub(3, "scored", 0.5, 0.9)],
        False,
        "dev",
        (1, 0.1, 0.5, 0.9),
    ),
    # invalid submissions never count, even with a test score
    ([sub(1, "invalid", None, 1.0), sub(2, "scored", 0.3, 0.2)], False, "dev", (2, 0.2, 0.3, 0.2)),
    # flagged: out unless allow_substitution
    (
        [sub(1, "scored", 0.9, 0.9, "model_mismatch"), sub(2, "scored", 0.3, 0.3)],
        False,
        "dev",
        (2, 0.3, 0.3, 0.3),
    ),
    (
        [sub(1, "scored", 0.9, 0.8, "model_mismatch"), sub(2, "scored", 0.3, 0.3)],
        True,
        "dev",
        (1, 0.8, 0.9, 0.8),
    ),
    # dev feedback before the test scoring: selected, but no test score yet
    ([sub(1, "scored", 0.4)], False, "dev", (1, None, 0.4, None)),
    # test feedback: the score is the test score (records from before test_score existed included)
    ([sub(1, "scored", 0.4), sub(2, "scored", 0.6, 0.6)], False, "test", (2, 0.6, 0.6, 0.6)),
    (
        [sub(1, "invalid", None), sub(2, "copy_of_base", 0.1, 0.1)],
        False,
        "test",
        (2, 0.1, 0.1, 0.1),
    ),
    ([], False, "dev", (None, None, None, None)),
]


@pytest.mark.parametrize(("subs", "allow_flagged", "feedback", "expected"), SELECTION)
def test_selection_rule(
    subs: list[SubmissionRecord],
    allow_flagged: bool,
    feedback: str,
    expected: tuple[int | None, float | None, float | None, float | None],
) -> None:
    summary = summarize_submissions(subs, 0.1, allow_flagged=allow_flagged, feedback=feedback)
    best_id, best_score, best_feedback, best_on_test = expected
    assert summary["best_submission_id"] == best_id
    assert summary["best_score"] == best_score
    assert summary["best_feedback_score"] == best_feedback
    assert summary["best_on_test"] == best_on_test
    assert summary["improvement"] == (
        round(best_score - 0.1, 6) if best_score is not None else None
    )


def test_earlier_attempts_never_count() -> None:
    """The Recorder passes only the final attempt's submissions; a better earlier attempt changes
    nothing."""
    final = [sub(1, "scored", 0.3, 0.3)]
    earlier = [replace(sub(1, "scored", 0.9, 0.9), attempt=1)]
    assert summarize_submissions(final, 0.0, feedback="dev")["best_score"] == 0.3
    assert (
        summarize_submissions(earlier + final, 0.0, feedback="dev")["best_score"] == 0.9
    )  # why only the final is passed


def test_test_split_is_identical_in_both_modes() -> None:
    test_mode = target_from_config(compose([]), 1)
    dev_mode = target_from_config(compose(["grading.feedback=dev"]), 1)
    assert test_mode == dev_mode
    assert test_mode.cache_key("h") == dev_mode.cache_key("h")
    dev = dev_target(dev_mode)
    assert dev.seed == DEV_SEED and dev.cache_key("h") != test_mode.cache_key("h")


def test_bogus_feedback_names_the_choices() -> None:
    with pytest.raises(ConfigError, match="test, dev"):
        compose(["grading.feedback=bogus"])


def test_gsm8k_dev_split_is_other_items_than_test_and_train(cache_dir: Path) -> None:
    spec = get_task("gsm8k")
    options = {"train_size": 20, "eval_size": 16}
    test = build_task_data(spec, "fixture", cache_dir / "tasks", seed=0, options=options)
    dev = build_task_data(spec, "fixture", cache_dir / "tasks", seed=DEV_SEED, options=options)
    check_dev_split("gsm8k", "fixture", test.private_dir, dev.private_dir)

    def texts(folder: Path) -> set[str]:
        return {p.read_text(encoding="utf-8") for p in folder.rglob("*") if p.is_file()}

    assert texts(dev.private_dir).isdisjoint(texts(test.private_dir))


def test_a_seed_independent_source_has_no_dev_split(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "eval.jsonl").write_text('{"q": 1}\n')
    with pytest.raises(ConfigError, match="grading.feedback=test"):
        check_dev_split("gsm8k", "hub", tmp_path / "a", tmp_path / "b")


class _Scorer:
    def __init__(self, score: float) -> None:
        self.score, self.calls = score, 0

    def __call__(self, model_dir: Path, digest: str) -> tuple[ScoreOutcome, bool]:
        assert check_loadable_model(model_dir)  # the snapshot still exists
        self.calls += 1
        return ScoreOutcome(self.score, 4, {"correct": 1}, None, 0.0), False


class _Sink:
    def __init__(self) -> None:
        self.records: dict[int, SubmissionRecord] = {}

    def record_submission(self, record: SubmissionRecord) -> None:
        self.records[record.submission_id] = record


def test_dev_feedback_agent_sees_dev_scores_only_and_test_scores_come_after(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    from tests.helpers.grading_cell import save_variant

    workspace = tmp_path / "workspace"
    (workspace / "output").mkdir(parents=True)
    save_variant(tiny_model_dir, workspace / "output" / "v1", noise_seed=1)
    save_variant(tiny_model_dir, workspace / "output" / "v1b", noise_seed=1)
    save_variant(tiny_model_dir, workspace / "output" / "base", noise_seed=None)
    run_meta = RunMeta(workspace / "run_meta.json", 600, tmp_path)
    run_meta.update(start_time=time.time())
    base_hash = weights_hash(check_loadable_model(workspace / "output" / "base"))
    ctx = CellGradingContext("c", workspace, base_hash, 0.25, 4, feedback="dev")
    dev_scorer, test_scorer, sink = _Scorer(0.625), _Scorer(0.3125), _Sink()
    service = SubmissionService(ctx, dev_scorer, sink, run_meta, tmp_path / "grader_copies")
    for path in ("output/v1", "output/v1b", "output/base"):
        service.wait(service.submit(path), 120)
    bodies = service.responses()
    assert [b["status"] for b in bodies] == ["scored", "duplicate", "copy_of_base"]
    assert [b["score"] for b in bodies] == [0.625, 0.625, 0.25]
    assert all(
        b["best"] == {"submission_id": 1, "score": 0.625} and b["baseline_score"] == 0.25
        for b in bodies
    )
    assert "0.3125" not in json.dumps(bodies) and "test_score" not in json.dumps(bodies)
    assert all(r.test_score is None for r in sink.records.values())

    service.close(timeout=60)
    updated = score_on_test(service, test_scorer, test_baseline=0.125)
    assert [r.test_score for r in updated] == [0.3125, 0.3125, 0.125]
    assert test_scorer.calls == 1  # identical weights are scored once
    assert [sink.records[i].test_score for i in (1, 2, 3)] == [0.3125, 0.3125, 0.125]
    assert not (tmp_path / "grader_copies").exists()
    summary = summarize_submissions(list(sink.records.values()), 0.125, feedback="dev")
    assert (summary["best_submission_id"], summary["best_score"], summary["improvement"]) == (
        1,
        0.3125,
        0.1875,
    )
    # What the agent could still ask for after the cell ended: dev scores only.
    assert "0.3125" not in json.dumps(service.responses())


def test_test_feedback_scores_are_test_scores(tmp_path: Path, tiny_model_dir: Path) -> None:
    from tests.helpers.grading_cell import save_variant

    workspace = tmp_path / "workspace"
    (workspace / "output").mkdir(parents=True)
    save_variant(tiny_model_dir, workspace / "output" / "v1", noise_seed=2)
    run_meta = RunMeta(workspace / "run_meta.json", 600, tmp_path)
    ctx = CellGradingContext("c", workspace, "base-hash", 0.25, 4)
    sink = _Sink()
    service = SubmissionService(ctx, _Scorer(0.5), sink, run_meta, tmp_path / "grader_copies")
    service.wait(service.submit("output/v1"), 120)
    service.close(timeout=60)
    assert sink.records[1].test_score == sink.records[1].score == 0.5
    assert not list((tmp_path / "grader_copies").glob("*"))  # nothing kept for later


def test_version_7_gives_earlier_records_their_test_scores(tmp_path: Path) -> None:
    """Every earlier sweep ran with test feedback: a submission's score is its test score, a cell's
    best its best."""
    import sqlite3

    from autorl.records.migrations import MIGRATIONS
    from autorl.records.store import RecordStore

    path = tmp_path / "records.sqlite"
    with sqlite3.connect(path) as conn:
        for step in MIGRATIONS[:6]:
            step.apply(conn)
        conn.execute("INSERT INTO schema_version (version) VALUES (6)")
        conn.execute(
            "INSERT INTO cells (sweep_id, cell_id, agent, driver, task, task_version, model, seed, "
            "budget_s, "
            "status, baseline, best_score, improvement, submissions, valid_submissions, tokens_in, "
            "tokens_out, "
            "cost_usd, attempts, config_json) VALUES ('s', 'c', 'a', 'd', 'gsm8k', 1, 'tiny', 0, "
            "60, "
            "'completed', 0.1, 0.4, 0.3, 1, 1, 0, 0, 0, 1, '{}')"
        )
        conn.execute(
            "INSERT INTO submissions (cell_id, submission_id, model_path, status, score, attempt, "
            "details_json, "
            "submitted_at) VALUES ('c', 1, 'output/v1', 'scored', 0.4, 1, '{}', 0)"
        )
    conn.close()
    with RecordStore(path) as store:
        assert store.migrations_applied[0] == "feedback"
        (record,) = store.list_submissions("c", 1)
        cell = store.get_cell("c")
    assert record.test_score == record.score == 0.4
    assert cell is not None and cell.feedback == "test" and cell.feedback_baseline == 0.1
    assert cell.best_feedback_score == cell.best_on_test == cell.best_score == 0.4
