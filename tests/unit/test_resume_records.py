"""The record store's side of a cell that lost its node and resumed elsewhere: resume events, the
cell's counts, submissions the lost node was scoring, and what the resumed run carries on (its
trace numbering, its driver usage); and the scheduler's choice of checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from autorl.records.live_types import CheckpointRecord
from autorl.records.results import write_results_csv
from autorl.records.resumes import ResumeEvent
from autorl.records.store import RecordStore
from autorl.records.types import DriverCall, SubmissionRecord
from autorl.workspace.resume import plan_resume
from tests.helpers.view_server import cell, step


def _event(seq: int, lost: float, to_node: str | None = "n2") -> ResumeEvent:
    return ResumeEvent("c1", seq, 100.0 + seq, f"000{seq}", 90.0, 40.0, lost, "n1", to_node, "died")


def _store(tmp_path: Path) -> RecordStore:
    store = RecordStore(tmp_path / "records.sqlite")
    store.upsert_cell(cell("c1", status="running", attempts=1))
    return store


def test_resume_events_are_counted_on_the_cell_and_a_replay_only_names_the_node(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    store.add_resume(_event(1, 12.5, to_node=None))
    store.add_resume(_event(1, 99.0, to_node="n2"))  # a replay, once the node is known
    store.add_resume(_event(2, 3.0))
    (one, two) = store.list_resumes("c1")
    assert (one.seq, one.lost_s, one.to_node, one.attempt) == (1, 12.5, "n2", 1)
    assert two.seq == 2
    rec = store.get_cell("c1")
    assert rec is not None and (rec.node_resumes, rec.lost_s) == (2, 15.5)
    # results.csv shows them.
    out = tmp_path / "results.csv"
    write_results_csv(store, "s1", out)
    header, row = out.read_text().splitlines()[:2]
    columns = dict(zip(header.split(","), row.split(","), strict=True))
    assert (columns["node_resumes"], columns["lost_s"]) == ("2", "15.5")
    # A new attempt (a restart) starts with none of them.
    store.start_attempt(cell("c1", status="running", attempts=2))
    assert store.list_resumes("c1") == [] and len(store.list_resumes("c1", attempt=1)) == 2
    store.close()


def test_what_the_lost_node_was_scoring_is_interrupted_and_the_rest_kept(tmp_path: Path) -> None:
    store = _store(tmp_path)
    statuses = {1: "scored", 2: "scoring", 3: "queued", 4: "invalid"}
    for sid, status in statuses.items():
        score = 0.5 if status == "scored" else None
        store.upsert_submission(SubmissionRecord("c1", sid, f"output/v{sid}", status, score=score))
    assert store.interrupt_submissions("c1", "node n1 was lost") == [2, 3]
    subs = {s.submission_id: (s.status, s.error) for s in store.list_submissions("c1")}
    assert subs[1] == ("scored", None) and subs[4][0] == "invalid"
    assert subs[2] == subs[3] == ("interrupted", "node n1 was lost")
    assert store.interrupt_submissions("c1", "again") == []
    # A restart (a new attempt) leaves nothing of the old one queued or scoring forever.
    store.upsert_submission(SubmissionRecord("c1", 5, "output/v5", "scoring"))
    store.start_attempt(cell("c1", status="running", attempts=2))
    old = {s.submission_id: s for s in store.list_submissions("c1", attempt=1)}
    assert old[5].status == "interrupted" and "before it was scored" in (old[5].error or "")
    assert old[1].status == "scored"
    store.close()


def test_a_resumed_run_numbers_its_steps_on_and_sums_every_gateways_calls(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert store.last_trace_seq("c1") == 0 and store.driver_usage_totals("c1") is None
    store.add_trace_events([step("c1", n) for n in (1, 2, 7)])
    assert store.last_trace_seq("c1") == 7
    for call_id, tokens in (("a", 10), ("b", 5)):
        store.upsert_driver_call(
            DriverCall("c1", call_id, 1.0, 0.1, "chat", "m", "m", 200, False, 1,
                       tokens_in=tokens, tokens_out=2 * tokens, cost_usd=tokens / 100)
        )  # fmt: skip
    totals = store.driver_usage_totals("c1")
    assert totals is not None and totals[:2] == (15, 30) and totals[2] == pytest.approx(0.15)
    store.close()


def test_the_scheduler_resumes_from_the_last_checkpoint_that_holds_agent_time() -> None:
    checkpoints = [
        CheckpointRecord("c1", 50.0, checkpoint_id="0001", agent_time_s=20.0),
        CheckpointRecord("c1", 80.0, checkpoint_id="0002", agent_time_s=50.0),
        CheckpointRecord("c1", 95.0, agent_time_s=65.0, error="the store is full"),
        CheckpointRecord("c1", 20.0, checkpoint_id="0000"),  # before the agent started
    ]
    resume = plan_resume(
        checkpoints, seen_at=110.0, seq=2, home_node="head", from_node="n1", reason="died"
    )
    assert resume is not None
    assert (resume.checkpoint_id, resume.time_used_s, resume.lost_s) == ("0002", 50.0, 30.0)
    event = resume.event("c1", 3, "n2")
    assert (event.seq, event.attempt, event.from_node, event.to_node) == (2, 3, "n1", "n2")
    assert plan_resume(checkpoints[2:], seen_at=1, seq=1, home_node=None, from_node=None,
                       reason="") is None  # fmt: skip
