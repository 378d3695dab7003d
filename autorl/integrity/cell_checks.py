"""The integrity checks run on a cell after its agent ended: contamination scan and optional judge.

Called by the workspace actor, which alone holds the cell's private split on its node. Neither
check changes a score: they give the cell's ``contamination`` figure, its
``integrity_flags`` and the details (``integrity_json``) that results, report and W&B show.
A check that fails is recorded with its error, never dropped and never fatal to the cell.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autorl.records.types import CodeRevision
from autorl.schema import IntegrityConfig

logger = logging.getLogger(__name__)


def run_cell_checks(
    cfg: IntegrityConfig,
    *,
    cell_id: str,
    scan_roots: list[Path],
    private_dir: Path,
    public_dir: Path,
    also_public: list[Path],
    trace_path: Path,
    agent_log: Path,
    revisions: Callable[[], list[CodeRevision]],
    context: dict[str, str],
    cache_dir: Path,
) -> dict[str, Any]:
    """Run the configured checks on one finished cell; returns its ``CellRecord`` integrity fields.

    Args:
        cfg: The cell's ``integrity`` block.
        cell_id: The cell.
        scan_roots: What the agent wrote: its workspace, HOME, log and trace.
        private_dir: The task's private eval split (never shown to the agent).
        public_dir: The task's public training split (its n-grams never count).
        also_public: What every agent of the task is given besides (its description, agent code).
        trace_path: The cell's ``trace.jsonl``, read by the judge.
        agent_log: The agent's log; the judge reads its tail when the trace is empty (scripted
            agents).
        revisions: The cell's code revisions (read only when the judge is on).
        context: Trusted facts shown to the judge beside the agent's data (task, base model).
        cache_dir: Where the judge caches its verdicts.

    Returns:
        ``{"contamination", "integrity_flags", "integrity_json"}``.
    """
    details: dict[str, Any] = {}
    flags: list[str] = []
    overlap: float | None = None
    if cfg.contamination.enabled:
        from autorl.integrity.contamination import check_cell

        try:
            report = check_cell(
                scan_roots, private_dir, public_dir, cfg.contamination, also_public=also_public
            )
        except Exception as error:  # noqa: BLE001 - a broken check is recorded, not fatal to the cell
            logger.exception("contamination check of %s failed", cell_id)
            details["contamination"] = {"error": f"{type(error).__name__}: {error}"}
            flags.append("contamination_check_failed")
        else:
            details["contamination"] = report.as_dict()
            overlap = report.overlap
            if report.flagged:
                flags.append("contamination")
            if report.truncated:  # past a cap, copies could hide behind padding: say so
                flags.append("contamination_scan_truncated")
    else:
        details["contamination"] = {"enabled": False}
    if cfg.judge.enabled:
        from autorl.integrity.judge import judge_cell

        try:
            verdict = judge_cell(
                cell_id,
                trace_path,
                revisions(),
                cfg.judge,
                cache_dir,
                agent_log=agent_log,
                context=context,
            )
        except Exception as error:  # noqa: BLE001 - the judge is advisory; its failure is shown, not fatal
            logger.exception("integrity judge of %s failed", cell_id)
            details["judge"] = {
                "error": f"{type(error).__name__}: {error}",
                "findings": [],
                "flags": [],
            }
            flags.append("judge_failed")
        else:
            details["judge"] = verdict.as_dict()
            flags.extend(verdict.flags)
    return {
        "contamination": overlap,
        "integrity_flags": ",".join(flags) or None,
        "integrity_json": json.dumps(details, sort_keys=True),
    }
