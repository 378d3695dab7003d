"""The Recorder is reached only through its typed client, and a cell's outcome is stored as before.

- No module under ``autorl/`` but :mod:`autorl.actors.recorder_client` calls a Recorder handle's
  ``.remote`` (``ray.get(recorder.X.remote(...))``, ``await recorder.X.remote(...)``): checked from
  the source with ``ast``.
- :class:`~autorl.records.types.CellOutcome` sets exactly the cell fields the Workspace actor's
  dict used to set, and :meth:`Recorder.complete_cell` writes the row ``set_cell_status`` wrote.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from autorl.actors.recorder import Recorder
from autorl.records.types import CellOutcome, CellRecord, DriverUsage, IntegrityOutcome

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "autorl" / "actors" / "recorder_client.py"


def bare_recorder_calls(source: str) -> list[tuple[int, str]]:
    """``(line, code)`` of each ``<...recorder...>.X.remote(...)`` call in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method = node.func.value
        if (
            node.func.attr == "remote"
            and isinstance(method, ast.Attribute)
            and "recorder" in ast.unparse(method.value).lower()
        ):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_check_finds_bare_calls() -> None:
    source = (
        "ray.get(self.recorder.get_cell.remote('c'))\n"
        "async def f(pool):\n    await pool.recorder.put_baseline.remote('k', 1.0, '{}')\n"
        "ray.get(recorder.list_cells.remote(s), timeout=3)\n"
        "self.recorder.get_cell('c')\n"  # a client call: fine
        "ray.get(self.pool.score.remote(t))\n"  # another actor: not this check's
    )
    assert sorted(line for line, _ in bare_recorder_calls(source)) == [1, 3, 4]


def test_no_bare_recorder_calls_outside_the_client() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {code}"
        for path in sorted((ROOT / "autorl").rglob("*.py"))
        if path != CLIENT
        for line, code in bare_recorder_calls(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, (
        "call the Recorder through autorl.actors.recorder_client.RecorderClient (add a typed "
        "method there if it lacks one):\n" + "\n".join(offenders)
    )


def test_the_client_has_every_recorder_method() -> None:
    from autorl.actors.recorder_client import RecorderClient

    public = {name for name in vars(Recorder) if not name.startswith("_")}
    # The client sends driver calls without waiting (send_driver_calls) or waits for them.
    assert public <= set(vars(RecorderClient)), sorted(public - set(vars(RecorderClient)))


def _outcome(usage: DriverUsage | None) -> CellOutcome:
    return CellOutcome(
        exit_class="exited",
        exit_code=0,
        limit_hit=None,
        sandbox="none",
        resumes=1,
        duration_s=12.5,
        working_time_s=10.0,
        baseline=0.25,
        feedback="test",
        feedback_baseline=0.25,
        integrity=IntegrityOutcome(0.0, None, '{"contamination": {"enabled": false}}'),
        driver_usage=usage,
    )


def test_outcome_fields_are_the_cell_record_fields_the_actor_set() -> None:
    with_driver = _outcome(DriverUsage(tokens_in=5, tokens_out=7, cost_usd=0.5)).fields()
    expected = {
        "exit_class",
        "exit_code",
        "limit_hit",
        "sandbox",
        "resumes",
        "duration_s",
        "working_time_s",
        "baseline",
        "feedback",
        "feedback_baseline",
        "contamination",
        "integrity_flags",
        "integrity_json",
        "tokens_in",
        "tokens_out",
        "cost_usd",
    }
    assert set(with_driver) == expected
    assert expected <= {f.name for f in dataclasses.fields(CellRecord)}
    # Without a driver the gateway counts nothing: the record keeps its driver calls' sums.
    assert set(_outcome(None).fields()) == expected - {"tokens_in", "tokens_out", "cost_usd"}


def test_complete_cell_writes_what_set_cell_status_wrote(tmp_path: Path) -> None:
    outcome = _outcome(DriverUsage(tokens_in=5, tokens_out=7, cost_usd=0.5))
    rows = []
    for name, finish in [
        ("typed", lambda r: r.complete_cell("c1", outcome, 99.0)),
        (
            "dict",
            lambda r: r.set_cell_status(
                "c1", "completed", outcome.fields() | {"finished_at": 99.0, "error": None}
            ),
        ),
    ]:
        recorder = Recorder(str(tmp_path / name / "records.sqlite"))
        cell = CellRecord("sw", "c1", "scripted", "none", "gsm8k", 1, "tiny", 0, 60.0, "pending")
        recorder.start_attempt(dataclasses.replace(cell, attempts=1))
        recorder.set_cell_status("c1", "running", {"error": "an earlier attempt's"})
        finish(recorder)
        rows.append(recorder.get_cell("c1"))
    assert rows[0] == rows[1]
    assert rows[0] is not None and rows[0].status == "completed" and rows[0].error is None
    assert rows[0].tokens_in == 5 and rows[0].resumes == 1 and rows[0].finished_at == 99.0
