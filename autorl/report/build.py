"""Build a sweep's report from its folder: per-cell metrics and run reports, then the HTML page.

Writes, reading only ``<sweep_dir>``:

- ``cells/<cell_id>/metrics.json``, ``run_report.json``, ``run_report.md`` (and ``run_summary.md``
  with the optional LLM summariser);
- ``report/index.html`` (self-contained) and ``report/figures/*.png``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from autorl.errors import AutorlError
from autorl.report import figures
from autorl.report.aggregate import CellRow, heatmap, seed_statistics, step_series
from autorl.report.run_report import build_run_report, render_markdown
from autorl.report.sections import render_sections
from autorl.report.sources import CellSources, ReportError, grader_stats, load_cells, open_store
from autorl.report.summarizer import SummarizerDriver, load_driver, summarize

logger = logging.getLogger(__name__)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _label(key: dict[str, str], varying: list[str]) -> str:
    parts = [key[k] for k in varying] or [key["task"]]
    return " / ".join(parts)


def _tokens_x(row: CellRow, i: int) -> float | None:
    """Driver tokens spent before submission ``i``: from the gateway's per-call records when the
    cell has them, else the cell's total (a single point at its last submission)."""
    per_call = row.metrics["tokens_at_submit"]
    if per_call is not None:
        return float(per_call[i])
    last = i == len(row.metrics["best_so_far"]) - 1
    return float(row.metrics["tokens"]) if last else None


def _cell_outputs(
    src: CellSources, driver: SummarizerDriver | None
) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    metrics, report = build_run_report(src)
    summary = None
    if driver is not None:
        try:
            summary = summarize(driver, report)
        except AutorlError as error:
            logger.warning("no LLM summary for %s: %s", src.cell.cell_id, error)
            report["notes"].append(f"LLM summary failed: {error}")
    _write(src.cell_dir / "metrics.json", json.dumps(metrics, indent=2))
    _write(src.cell_dir / "run_report.json", json.dumps(report, indent=2))
    _write(src.cell_dir / "run_report.md", render_markdown(report))
    stale = src.cell_dir / "run_summary.md"
    if summary is not None:
        _write(stale, summary)
    elif stale.exists() and driver is not None:
        stale.unlink()  # a narrative of older facts must not sit next to new ones
    return metrics, report, summary


def _figures(
    rows: list[CellRow],
    cells: list[dict[str, Any]],
    stats: list[dict[str, Any]],
    labels: dict[str, str],
    fig_dir: Path,
) -> dict[str, bytes]:
    """Draw every figure of the report (PNG bytes by name; also saved under ``fig_dir``)."""
    tokens_note = None
    if all(c["metrics"]["tokens"] == 0 for c in cells):
        tokens_note = "no driver tokens recorded (e.g. the scripted agent uses no LLM)"
    elif not any(c["metrics"]["driver_calls"] for c in cells):
        tokens_note = "no per-call records: one point per cell at its total tokens"
    trajectories: dict[str, list[dict[str, Any]]] = {}
    for c in cells:
        m = c["metrics"]
        trajectories.setdefault(c["src"].cell.task, []).append(
            {
                "label": c["src"].cell.cell_id,
                "scores": m["score_trajectory"],
                "baseline": m["baseline"],
            }
        )
    return {
        "heatmap_agent_driver": figures.heatmap_figure(
            heatmap(rows, "agent", "driver"),
            "mean improvement: agent × driver",
            fig_dir / "heatmap_agent_driver.png",
        ),
        "heatmap_mode_task": figures.heatmap_figure(
            heatmap(rows, "mode", "task"),
            "mean improvement: mode × task",
            fig_dir / "heatmap_mode_task.png",
        ),
        "seed_stats": figures.seed_stats_figure(stats, fig_dir / "seed_stats.png"),
        "pass_at_k": figures.pass_at_k_figure(stats, fig_dir / "pass_at_k.png"),
        "scaling_time": figures.scaling_figure(
            step_series(rows, lambda r, i: r.metrics["submit_times"][i]),
            labels,
            "wall time since the agent started (s)",
            "best-so-far vs wall time",
            fig_dir / "scaling_time.png",
        ),
        "scaling_submissions": figures.scaling_figure(
            step_series(rows, lambda r, i: i + 1),
            labels,
            "submission index",
            "best-so-far vs submissions",
            fig_dir / "scaling_submissions.png",
            integer_x=True,
        ),
        "scaling_tokens": figures.scaling_figure(
            step_series(rows, _tokens_x),
            labels,
            "driver tokens (in + out) spent",
            "best-so-far vs driver tokens",
            fig_dir / "scaling_tokens.png",
            note=tokens_note,
        ),
        "trajectories": figures.trajectories_figure(
            trajectories, fig_dir / "score_trajectories.png"
        ),
    }


def build_report(
    sweep_dir: Path,
    *,
    summarizer_driver: str | None = None,
    summarizer_base_url: str | None = None,
    summarizer_model: str | None = None,
    summarizer_timeout_s: float = 120.0,
) -> Path:
    """(Re)build every per-cell file and the sweep's HTML report.

    Args:
        sweep_dir: The sweep folder (``<out_dir>/<sweep_id>``).
        summarizer_driver: A ``conf/driver`` name for the optional LLM narrative; None: off.
        summarizer_base_url: Overrides that driver's ``base_url``.
        summarizer_model: Overrides that driver's model id.
        summarizer_timeout_s: Per-request timeout of the summariser.

    Returns:
        The path of ``report/index.html``.

    Raises:
        ReportError: ``sweep_dir`` holds no record store, or no cell.
        ConfigError, PrerequisiteError: the summariser driver is unknown or its key is missing.
    """
    sweep_dir = Path(sweep_dir).resolve()
    driver = None
    if summarizer_driver:
        driver = load_driver(
            summarizer_driver,
            base_url=summarizer_base_url,
            model=summarizer_model,
            timeout_s=summarizer_timeout_s,
        )
    with open_store(sweep_dir) as store:
        sources = load_cells(sweep_dir, store)
        graders = grader_stats(store)
    if not sources:
        raise ReportError(
            f"{sweep_dir / 'records.sqlite'} holds no cells yet; run a sweep into it first"
        )
    cells: list[dict[str, Any]] = []
    for src in sources:
        metrics, report, summary = _cell_outputs(src, driver)
        cells.append({"src": src, "metrics": metrics, "report": report, "summary": summary})

    keys = ("task", "agent", "driver", "model", "mode")
    rows = [
        CellRow(
            c["src"].cell.cell_id,
            {k: (c["src"].mode if k == "mode" else str(getattr(c["src"].cell, k))) for k in keys},
            c["src"].cell.seed,
            c["src"].cell.status,
            c["metrics"]["improvement"],
            c["metrics"],
        )
        for c in cells
    ]
    varying = [k for k in keys if len({r.key[k] for r in rows}) > 1]
    stats = seed_statistics(rows)
    for s in stats:
        s["label"] = _label(s, varying)
        s["values"] = [
            r.result
            for r in rows
            if r.status == "completed" and all(r.key[k] == s[k] for k in keys)
        ]
    figs = _figures(
        rows,
        cells,
        stats,
        {r.cell_id: _label(r.key, varying) for r in rows},
        sweep_dir / "report" / "figures",
    )
    sweep_ids = sorted({c["src"].cell.sweep_id for c in cells})
    html = render_sections(
        title=f"autorl sweep {', '.join(sweep_ids)}",
        generated=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        sweep_dir=sweep_dir,
        cells=cells,
        stats=stats,
        figs=figs,
        grader_stats=graders,
    )
    index = sweep_dir / "report" / "index.html"
    _write(index, html)
    return index


__all__ = ["ReportError", "build_report"]
