"""What happens when a sweep's cells are done: W&B comparison table, then the HTML report.

Both are outputs, not results: any failure here is logged (and shown as a note) and the sweep's
exit code stays what its cells decided.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from autorl.schema import TrackingConfig

logger = logging.getLogger(__name__)


def finish_sweep(
    finish_wandb: Callable[[float], bool],
    sweep_id: str,
    sweep_dir: Path,
    tracking_cfg: TrackingConfig,
    note: Callable[[str], None],
) -> Path | None:
    """Close the sweep's W&B runs, then build ``<sweep_dir>/report/``.

    Args:
        finish_wandb: Closes the W&B runs, waiting at most the given seconds; True when everything
            reached W&B in time (the scheduler asks the Recorder actor). Called only when W&B is on.
        sweep_id: The sweep.
        sweep_dir: Its folder.
        tracking_cfg: The ``tracking`` config block.
        note: Prints a one-line message for the user.

    Returns:
        The report's ``index.html``, or None when it is off or could not be built.
    """
    wandb_cfg, report_cfg = tracking_cfg.wandb, tracking_cfg.report
    if wandb_cfg.enabled:
        try:
            # The recorder bounds its own wait; the margin covers the actor call itself.
            timeout = wandb_cfg.finish_timeout_s + 30
            if finish_wandb(timeout):
                note(
                    f"W&B runs of this sweep are under {sweep_dir / 'wandb'} ({wandb_cfg.mode} "
                    "mode)"
                )
        except Exception as error:  # noqa: BLE001 - W&B must never fail a sweep
            logger.warning("W&B finish failed: %s", error)
            note(f"W&B: could not finish the runs ({error}); the sweep's results are unaffected")
    if not report_cfg.enabled:
        return None
    try:
        from autorl.report.build import build_report

        index = build_report(
            sweep_dir,
            summarizer_driver=report_cfg.summarizer_driver,
            summarizer_timeout_s=report_cfg.summarizer_timeout_s,
        )
    except Exception as error:  # noqa: BLE001 - a report failure must never fail the sweep
        logger.exception("report of sweep %s failed", sweep_id)
        note(f"report failed: {error} (rebuild it with: python -m autorl.report {sweep_dir})")
        return None
    note(f"report: {index}")
    return index
