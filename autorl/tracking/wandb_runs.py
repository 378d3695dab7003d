"""W&B for a sweep (docs/design.md#records-and-the-report): one run per cell, grouped by sweep, and
a comparison table per sweep.

The Recorder owns one :class:`WandbTracker` and tells it what it records. All W&B calls happen on
one background thread fed by a queue, so a slow, unreachable or misconfigured W&B never blocks
the Recorder (and with it the sweep): every W&B error is logged and dropped. Offline mode
(``tracking.wandb.mode: offline``) writes the runs under ``<sweep_dir>/wandb/`` with no network;
``wandb sync`` uploads them later.

Per cell run: ``name`` = cell id, ``group`` = sweep id, ``job_type`` = ``cell``, ``config`` = the
frozen cell config (``cells.config_json``); one history row per submission that reached a final
status (``submission_id``, ``score``, ``improvement``, ``best_score`` by the cell's score rule,
``valid``, ``flagged``, ``weight_distance``), and the cell's outcome in the summary. Per sweep: a
run with ``job_type`` = ``comparison`` that logs the table ``comparison`` (one row per cell,
:data:`TABLE_COLUMNS`).

Keys are fixed names (the columns above, the config's schema keys); every text value W&B gets
passes :func:`wandb_value`: control characters written out, length capped. Nothing is logged as
``wandb.Html`` or a media caption, so W&B shows the values as text (docs/threat-model.md).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from autorl.records.results import allows_substitution, visible_controls
from autorl.records.types import FINAL_STATUSES, CellRecord, SubmissionRecord
from autorl.schema import WandbConfig, WandbMode

logger = logging.getLogger(__name__)

TABLE_COLUMNS = (
    "cell_id",
    "agent",
    "driver",
    "task",
    "model",
    "seed",
    "mode",
    "status",
    "baseline",
    "best_score",
    "improvement",
    "submissions",
    "valid_submissions",
    "duration_s",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "exit_class",
    "flagged_submissions",
    "weight_distance",
    "contamination",
    "integrity_flags",
)
SCORED = ("scored", "duplicate", "copy_of_base")
MAX_TEXT_CHARS = 1000  # per text value: an agent's error message or path must not flood a W&B row
MAX_TAG_CHARS = 64  # W&B refuses longer tags
_MAX_INIT_FAILURES = 2  # after this many failed wandb.init calls the tracker stops trying
_INIT_MODES: dict[WandbMode, Literal["online", "offline", "disabled"]] = {
    WandbMode.online: "online",
    WandbMode.offline: "offline",
    WandbMode.disabled: "disabled",
}


def _mode_of(cell: CellRecord) -> str:
    try:
        agent = json.loads(cell.config_json).get("agent") or {}
    except ValueError:
        return "free"
    return str(agent.get("mode") or "free") if isinstance(agent, dict) else "free"


def wandb_value(value: Any, limit: int = MAX_TEXT_CHARS) -> Any:
    """``value`` as W&B may show it: text with its control characters written out and cut at
    ``limit`` characters (an ellipsis marks the cut); mappings and lists value by value (their
    keys as they are: schema names); anything else unchanged.

    >>> wandb_value("a\\x1b[31m\\u202eb"), wandb_value("x" * 5, limit=3)
    ('a\\\\x1b[31m\\\\u202eb', 'xx…')
    >>> wandb_value({"k": ["\\r"]})
    {'k': ['\\\\r']}
    """
    if isinstance(value, str):
        text = visible_controls(value)
        return text if len(text) <= limit else text[: limit - 1] + "…"
    if isinstance(value, Mapping):
        return {str(k): wandb_value(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [wandb_value(v, limit) for v in value]
    return value


def table_rows(cells: list[CellRecord]) -> list[list[Any]]:
    """One comparison-table row per cell in :data:`TABLE_COLUMNS` order, text made safe
    (:func:`wandb_value`)."""
    rows = []
    for cell in cells:
        values = {"mode": _mode_of(cell)} | {
            c: getattr(cell, c) for c in TABLE_COLUMNS if c != "mode"
        }
        rows.append([wandb_value(values[c]) for c in TABLE_COLUMNS])
    return rows


def cell_run_config(cell: CellRecord) -> dict[str, Any]:
    """The config of a cell's W&B run: the cell's config, text made safe (:func:`wandb_value`)."""
    try:
        config = json.loads(cell.config_json)
    except ValueError:
        return {}
    return wandb_value(config) if isinstance(config, dict) else {}


def cell_run_tags(cell: CellRecord) -> list[str]:
    """The tags of a cell's W&B run: its agent, driver and task, made safe and short enough."""
    return [wandb_value(t, MAX_TAG_CHARS) for t in (cell.agent, cell.driver, cell.task)]


def wandb_config(block: WandbConfig | Mapping[str, Any] | None) -> WandbConfig | None:
    """The ``tracking.wandb`` block as a checked :class:`WandbConfig`, or None when W&B is off.

    The Recorder actor gets the block as plain data across the Ray boundary (``{"enabled": false}``
    alone when it has no tracking config); a mapping is checked against the schema here, so a
    wrong key or type fails with the key's name rather than inside the W&B thread.

    >>> wandb_config({"enabled": False}) is None
    True

    Raises:
        omegaconf.errors.OmegaConfBaseException: an enabled block with an unknown key, a wrong
            type or a missing value.
    """
    if block is None or isinstance(block, WandbConfig):
        return block if block is not None and block.enabled else None
    from omegaconf import OmegaConf

    checked = OmegaConf.merge(OmegaConf.structured(WandbConfig), dict(block))
    if not checked.enabled:
        return None
    typed = OmegaConf.to_object(checked)
    assert isinstance(typed, WandbConfig)  # merged onto the WandbConfig schema
    return typed


class WandbTracker:
    """Queue-fed W&B writer; a no-op when W&B is off.

    Args:
        cfg: The ``tracking.wandb`` config block (see :func:`wandb_config`); None: off.
        sweep_dir: The sweep folder; runs are written under ``<sweep_dir>/wandb/``.
    """

    def __init__(self, cfg: WandbConfig | Mapping[str, Any] | None, sweep_dir: Path) -> None:
        """Start the background thread (only when enabled)."""
        self.cfg = wandb_config(cfg)
        self.enabled = self.cfg is not None
        self.sweep_dir = Path(sweep_dir)
        self._runs: dict[str, Any] = {}
        self._logged: set[tuple[str, int]] = set()
        self._best: dict[str, float] = {}
        self._init_failures = 0
        self._queue: queue.Queue[tuple[Callable[..., None], tuple[Any, ...]] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        if self.enabled:
            self._thread = threading.Thread(target=self._work, name="wandb-tracker", daemon=True)
            self._thread.start()

    # What the Recorder calls: cheap, never blocking, never raising.

    def submission(self, cell: CellRecord, sub: SubmissionRecord) -> None:
        """Log a submission once it reached a final status (replays are ignored)."""
        if self.enabled and sub.status not in ("queued", "scoring"):
            self._queue.put((self._log_submission, (cell, sub)))

    def new_attempt(self, cell_id: str) -> None:
        """Forget what was logged for an earlier attempt of the cell (a new attempt starts over;
        only the final one counts)."""
        if self.enabled:
            self._queue.put((self._forget, (cell_id,)))

    def cell_status(self, cell: CellRecord) -> None:
        """Close the cell's run when the cell reached a final status."""
        if self.enabled and cell.status in FINAL_STATUSES:
            self._queue.put((self._finish_cell, (cell,)))

    def finish_sweep(self, sweep_id: str, cells: list[CellRecord]) -> bool:
        """Close every open run and write the sweep's comparison table; wait for W&B at most
        ``finish_timeout_s``.

        Returns:
            True when everything was handed to W&B in time (or W&B is off).
        """
        if self.cfg is None or self._thread is None:
            return True
        done = threading.Event()
        self._queue.put((self._write_table, (sweep_id, cells)))
        self._queue.put((lambda: done.set(), ()))
        if not done.wait(self.cfg.finish_timeout_s):
            logger.warning(
                "W&B did not finish within %ss; the sweep goes on without it",
                self.cfg.finish_timeout_s,
            )
            return False
        return True

    # The background thread.

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, args = item
            try:
                fn(*args)
            except Exception as error:  # noqa: BLE001 - W&B trouble must never reach the sweep
                logger.warning("W&B call %s failed: %s", getattr(fn, "__name__", fn), error)

    def _init(self, **kwargs: Any) -> Any:
        if self.cfg is None or self._init_failures >= _MAX_INIT_FAILURES:
            return None
        import wandb

        try:
            return wandb.init(
                project=self.cfg.project,
                entity=self.cfg.entity,
                mode=_INIT_MODES[self.cfg.mode],
                dir=str(self.sweep_dir),
                reinit="create_new",
                settings=wandb.Settings(
                    init_timeout=self.cfg.init_timeout_s, console="off", silent=True
                ),
                **kwargs,
            )
        except Exception as error:  # noqa: BLE001 - e.g. no API key online, network down, bad entity
            self._init_failures += 1
            logger.warning(
                "wandb.init failed (%d/%d): %s", self._init_failures, _MAX_INIT_FAILURES, error
            )
            return None

    def _cell_run(self, cell: CellRecord) -> Any:
        run = self._runs.get(cell.cell_id)
        if run is None:
            run = self._init(
                name=wandb_value(cell.cell_id),
                group=wandb_value(cell.sweep_id),
                job_type="cell",
                config=cell_run_config(cell),
                tags=cell_run_tags(cell),
            )
            if run is not None:
                run.define_metric("submission_id")
                run.define_metric("*", step_metric="submission_id")
                self._runs[cell.cell_id] = run
        return run

    def _forget(self, cell_id: str) -> None:
        self._logged = {key for key in self._logged if key[0] != cell_id}
        self._best.pop(cell_id, None)
        run = self._runs.pop(cell_id, None)
        if run is not None:
            run.finish()

    def _log_submission(self, cell: CellRecord, sub: SubmissionRecord) -> None:
        if (cell.cell_id, sub.submission_id) in self._logged:
            return
        run = self._cell_run(cell)
        if run is None:
            return
        self._logged.add((cell.cell_id, sub.submission_id))
        valid = sub.status in SCORED and sub.score is not None
        row: dict[str, Any] = {
            "submission_id": sub.submission_id,
            "valid": int(valid),
            "flagged": int(bool(sub.flags)),
        }
        if sub.weight_distance is not None:
            row["weight_distance"] = sub.weight_distance
        if valid:
            score = float(sub.score)  # type: ignore[arg-type]
            row["score"] = score
            # A flagged submission never raises the best unless the cell allows
            # substitution.
            if not sub.flags or allows_substitution(cell):
                self._best[cell.cell_id] = max(score, self._best.get(cell.cell_id, score))
            if cell.cell_id in self._best:
                row["best_score"] = self._best[cell.cell_id]
            if cell.baseline is not None:
                row["improvement"] = score - cell.baseline
        run.log(row)

    def _finish_cell(self, cell: CellRecord) -> None:
        run = self._cell_run(cell)
        if run is None:
            return
        run.summary.update(
            {
                c: v
                for c, v in zip(TABLE_COLUMNS, table_rows([cell])[0], strict=True)
                if v is not None
            }
        )
        run.finish()
        self._runs.pop(cell.cell_id, None)

    def _write_table(self, sweep_id: str, cells: list[CellRecord]) -> None:
        import wandb

        for cell_id in list(self._runs):
            self._runs.pop(cell_id).finish()
        run = self._init(
            name=wandb_value(f"{sweep_id}-comparison"),
            group=wandb_value(sweep_id),
            job_type="comparison",
        )
        if run is None:
            return
        run.log({"comparison": wandb.Table(columns=list(TABLE_COLUMNS), data=table_rows(cells))})
        run.summary["cells"] = len(cells)
        run.finish()

    def close(self) -> None:
        """Stop the background thread after the queued work (bounded by ``finish_timeout_s``)."""
        if self._thread is not None and self.cfg is not None:
            self._queue.put(None)
            self._thread.join(self.cfg.finish_timeout_s)
