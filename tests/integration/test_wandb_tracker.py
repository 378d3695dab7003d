"""The W&B tracker on its own (no Ray): offline run files, and W&B that is unreachable or
misconfigured.

Run files are read back with wandb's own protobuf ``Record`` over the LevelDB-log framing of the
``.wandb`` file (:func:`read_wandb_file`); the sweep test reuses it.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from omegaconf.errors import ConfigKeyError

from autorl.records.types import CellRecord, SubmissionRecord
from autorl.schema import WandbConfig, WandbMode
from autorl.tracking.wandb_runs import TABLE_COLUMNS, WandbTracker

_BLOCK = 32 * 1024  # LevelDB log block size; a record chunk never crosses a block boundary


def read_wandb_file(path: Path) -> list[Any]:
    """Every ``Record`` of an offline ``run-<id>.wandb`` file (header ``:W&B`` + 3 bytes, then
    LevelDB log)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    chunks, partial, pos = [], b"", 7
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            pos += left  # zero padding at the end of a block
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            chunks.append(chunk)
        elif kind == 2:
            partial = chunk
        elif kind == 3:
            partial += chunk
        elif kind == 4:
            chunks.append(partial + chunk)
    records = []
    for raw in chunks:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        records.append(record)
    return records


def read_runs(wandb_dir: Path) -> list[dict[str, Any]]:
    """Each offline run under ``wandb_dir``: name, group, job type, config, history rows, table
    files."""
    runs = []
    for path in sorted(wandb_dir.glob("offline-run-*/run-*.wandb")):
        run: dict[str, Any] = {
            "history": [],
            "tables": sorted(path.parent.glob("files/media/table/*.table.json")),
        }
        for record in read_wandb_file(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run |= {
                    "name": record.run.display_name,
                    "group": record.run.run_group,
                    "job_type": record.run.job_type,
                    "config": {c.key: json.loads(c.value_json) for c in record.run.config.update},
                }
            elif kind == "history":
                run["history"].append(
                    {
                        i.key or "/".join(i.nested_key): json.loads(i.value_json)
                        for i in record.history.item
                    }
                )
        runs.append(run)
    return runs


def read_complete_runs(wandb_dir: Path, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """:func:`read_runs`, once every run's header record is on disk.

    wandb-core writes offline files from its own process, so a run finished a moment ago may not
    be flushed yet on a loaded machine.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        runs = read_runs(wandb_dir)
        if all("name" in run for run in runs) or time.monotonic() > deadline:
            return runs
        time.sleep(0.5)


def cell(cell_id: str, status: str = "running", **kw: Any) -> CellRecord:
    return CellRecord(
        "sw",
        cell_id,
        "scripted",
        "none",
        "gsm8k",
        1,
        "tiny",
        0,
        60,
        status,
        baseline=2.0,
        config_json=json.dumps({"agent": {"name": "scripted", "mode": "sft_only"}, "seed": 0}),
        **kw,
    )


def cfg() -> WandbConfig:
    return WandbConfig(
        enabled=True,
        project="autorl-test",
        entity=None,
        mode=WandbMode.offline,
        init_timeout_s=10,
        finish_timeout_s=60,
    )


def test_offline_runs_per_cell_and_comparison_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = WandbTracker(cfg(), tmp_path)
    for status, score in (
        ("queued", None),
        ("scored", 5.0),
        ("scored", 5.0),
    ):  # the replay is not logged twice
        tracker.submission(cell("a"), SubmissionRecord("a", 1, "output/v1", status, score=score))
    tracker.submission(cell("a"), SubmissionRecord("a", 2, "output/v2", "invalid", error="corrupt"))
    # A flagged submission is logged with its score but never raises the best.
    tracker.submission(
        cell("a"),
        SubmissionRecord(
            "a", 3, "output/v3", "scored", score=9.0, flags="model_mismatch", weight_distance=1.25
        ),
    )
    tracker.cell_status(cell("a", "completed", best_score=5.0, improvement=3.0))
    assert tracker.finish_sweep(
        "sw", [cell("a", "completed", best_score=5.0, improvement=3.0), cell("b", "failed")]
    )
    tracker.close()
    runs = {r["name"]: r for r in read_complete_runs(tmp_path / "wandb")}
    # b sent this tracker no event (as a cell finished in an earlier invocation): a table row, not a
    # run.
    assert set(runs) == {"a", "sw-comparison"}
    a = runs["a"]
    assert (a["group"], a["job_type"], a["config"]["agent"]) == (
        "sw",
        "cell",
        {"name": "scripted", "mode": "sft_only"},
    )
    rows = [{k: v for k, v in h.items() if not k.startswith("_")} for h in a["history"]]
    assert rows == [
        {
            "submission_id": 1,
            "valid": 1,
            "flagged": 0,
            "score": 5.0,
            "best_score": 5.0,
            "improvement": 3.0,
        },
        {"submission_id": 2, "valid": 0, "flagged": 0},
        {
            "submission_id": 3,
            "valid": 1,
            "flagged": 1,
            "weight_distance": 1.25,
            "score": 9.0,
            "best_score": 5.0,
            "improvement": 7.0,
        },
    ]
    (table_file,) = runs["sw-comparison"]["tables"]
    table = json.loads(table_file.read_text())
    assert table["columns"] == list(TABLE_COLUMNS)
    assert [dict(zip(table["columns"], r, strict=True))["cell_id"] for r in table["data"]] == [
        "a",
        "b",
    ]
    assert dict(zip(table["columns"], table["data"][0], strict=True))["mode"] == "sft_only"


@pytest.mark.parametrize("api_key", [None, "x" * 40], ids=["no-api-key", "server-unreachable"])
def test_unreachable_or_misconfigured_wandb_never_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, api_key: str | None
) -> None:
    with socket.socket() as probe:  # a port nobody listens on: connections are refused
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{dead}")
    if api_key is None:
        monkeypatch.delenv("WANDB_API_KEY", raising=False)
    else:
        monkeypatch.setenv("WANDB_API_KEY", api_key)
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = WandbTracker(
        dataclasses.replace(cfg(), mode=WandbMode.online, init_timeout_s=2, finish_timeout_s=30),
        tmp_path,
    )
    started = time.monotonic()
    for i in range(1, 4):  # what the Recorder calls returns at once, whatever W&B does
        tracker.submission(cell("a"), SubmissionRecord("a", i, f"output/v{i}", "scored", score=1.0))
    tracker.cell_status(cell("a", "completed"))
    enqueue_s = time.monotonic() - started
    assert tracker.finish_sweep(
        "sw", [cell("a", "completed")]
    )  # drained: W&B gave up within its timeouts
    tracker.close()
    assert (
        enqueue_s < 1.0
    )  # queued, not run inline (a generous bound: one failing init alone takes 2 s)
    assert tracker._init_failures == 2  # it tried twice, then stopped trying for this sweep
    assert not list(tmp_path.glob("wandb/*run-*/files/media"))


def test_the_block_as_plain_data_is_checked(tmp_path: Path) -> None:
    # The Recorder actor gets tracking.wandb as plain data; a bad key is named, not swallowed by the
    # W&B thread.
    assert WandbTracker(dataclasses.asdict(cfg()), tmp_path).cfg == cfg()
    with pytest.raises(ConfigKeyError, match="projct"):
        WandbTracker(dataclasses.asdict(cfg()) | {"projct": "x"}, tmp_path)


def test_disabled_tracker_does_nothing(tmp_path: Path) -> None:
    tracker = WandbTracker(
        {"enabled": False}, tmp_path
    )  # what the Recorder passes without a tracking config
    tracker.submission(cell("a"), SubmissionRecord("a", 1, "output/v1", "scored", score=1.0))
    assert tracker.finish_sweep("sw", []) is True and not (tmp_path / "wandb").exists()
