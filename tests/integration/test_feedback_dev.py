"""The embedded default cell with ``grading.feedback=dev`` (docs/design.md#the-grading-api): the
agent sees dev scores, the
cell is selected on them and reported with the selected submission's test score."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from tests.integration.conftest import query, run_sweep_cli

pytestmark = pytest.mark.integration
CELL = "gsm8k.scripted.none.tiny.s0"


def test_dev_feedback_sweep_records_dev_selected_and_test_scores(
    tmp_path: Path, ray_tmp: Path, cache_dir: Path
) -> None:
    done = run_sweep_cli(tmp_path / "out", ray_tmp, cache_dir, "grading.feedback=dev")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sweep_dir,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    with open(sweep_dir / "results.csv") as handle:
        (row,) = list(csv.DictReader(handle))
    assert row["cell_id"] == CELL and row["status"] == "completed" and row["feedback"] == "dev"

    db = sweep_dir / "records.sqlite"
    rows = query(
        db,
        "SELECT submission_id, score, test_score, baseline_score FROM submissions "
        "WHERE cell_id = ? ORDER BY submission_id",
        CELL,
    )
    assert len(rows) >= 2 and all(r[1] is not None and r[2] is not None for r in rows)
    # (id, dev score, test score, baseline the agent was told)
    subs = [(int(str(r[0])), float(str(r[1])), float(str(r[2])), float(str(r[3]))) for r in rows]
    # Selected on the dev (feedback) score, the earliest of ties; reported with its test score.
    best = max(subs, key=lambda s: (s[1], -s[0]))
    assert float(row["best_feedback_score"]) == pytest.approx(best[1], abs=1e-4)
    assert float(row["best_score"]) == pytest.approx(best[2], abs=1e-4)
    assert float(row["best_on_test"]) == pytest.approx(max(s[2] for s in subs), abs=1e-4)
    assert float(row["improvement"]) == pytest.approx(
        float(row["best_score"]) - float(row["baseline"]), abs=1e-3
    )
    # The test baseline is the test-feedback sweeps' (same cache key); the agent was told the dev
    # baseline.
    assert all(s[3] == pytest.approx(float(row["feedback_baseline"])) for s in subs)
    assert query(db, "SELECT COUNT(*) FROM baselines")[0][0] == 2
    assert (
        float(row["improvement"]) > 0
    )  # the recipe's improvement holds on the held-out test split

    # What the agent saw (its log of every grading answer): dev scores, never a test score that
    # differs.
    log = (sweep_dir / "cells" / CELL / "agent.log").read_text()
    seen = [float(x) for x in re.findall(r"submitted \S+: status=\w+ score=([0-9.]+)", log)]
    assert seen == pytest.approx([s[1] for s in subs])
    hidden = {round(s[2], 4) for s in subs} - {round(s[1], 4) for s in subs}
    assert not any(round(x, 4) in hidden for x in seen)

    report = (sweep_dir / "report" / "index.html").read_text()
    assert "Selection bias of test feedback" in report
