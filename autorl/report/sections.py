"""The sections of the sweep report page, from the computed analyses and figures.

Each section's body is a macro of ``templates/sections.html.j2``; this module computes its
arguments: tables of plain values and the report's typed markup values
(:mod:`autorl.report.html_page`), which the templates escape and render.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autorl.report.cell_metrics import REPORTED_METRICS
from autorl.report.feedback import selection_bias_section
from autorl.report.html_page import Diff, Figure, Link, Section, Signed, Table, page
from autorl.report.stages import stage_cells, stage_columns, stage_statistics

_CAPTIONS = {
    "heatmap_agent_driver": "mean improvement of completed cells per agent × driver (n = runs)",
    "heatmap_mode_task": "mean improvement per operating mode × task (n = runs)",
    "seed_stats": "bars: mean over seeds; whiskers: ± standard error; dots: each seed",
    "pass_at_k": (
        "expected maximum improvement of k runs drawn without replacement from the seeds (exact)"
    ),
    "scaling_time": "best-so-far improvement against the agent's wall time",
    "scaling_submissions": "best-so-far improvement against the submission index",
    "scaling_tokens": (
        "best-so-far improvement against the driver tokens spent before each submission "
        "(gateway records)"
    ),
    "trajectories": "score of each submission (× = no valid score); dashed: the cell's baseline",
}


@dataclass(frozen=True)
class JudgeDetails:
    """What the judge of one cell was sent (JSON) and found (one row per finding)."""

    cell_id: str
    sent: str
    findings: Table


@dataclass(frozen=True)
class RunReportView:
    """One cell's run report as the page folds it: a status line, its facts and its entries."""

    cell_id: str
    status: str
    improvement: float | None
    failure_type: str | None
    methods: str
    exit_class: str | None
    exit_code: int | None
    sandbox: str
    resumes: int | None
    evidence: str
    notes: list[str]
    entries: Table
    summary: str | None


def _fig(figs: dict[str, bytes], name: str, file_name: str) -> Figure:
    return Figure.of(figs[name], name.replace("_", " "), _CAPTIONS[name], file_name)


def _signed(value: float | None) -> Signed | str:
    return "—" if value is None else Signed(float(value))


def _results(cells: list[dict[str, Any]]) -> Table:
    columns = (
        "cell",
        "agent",
        "driver",
        "task",
        "mode",
        "model",
        "seed",
        "status",
        "baseline",
        "best",
        "improvement",
        "valid/subs",
        "methods",
        "failure type",
        "exit",
        "sandbox",
        "resumes",
        "node losses",
        "duration s",
        "tokens",
        "cost $",
    )
    rows = []
    for c in cells:
        cell, m, r = c["src"].cell, c["metrics"], c["report"]
        link = Link(f"../cells/{cell.cell_id}/run_report.md", cell.cell_id)
        rows.append(
            (
                link,
                cell.agent,
                cell.driver,
                cell.task,
                c["src"].mode,
                cell.model,
                cell.seed,
                cell.status,
                m["baseline"],
                m["best_score"],
                _signed(m["improvement"]),
                f"{m['valid_submissions']}/{m['submissions']}",
                ", ".join(r["methods_used"]) or "—",
                r["failure_type"],
                _exit(cell.exit_class, cell.limit_hit),
                _sandbox(cell.sandbox),
                cell.resumes,
                _node_losses(cell.node_resumes, cell.lost_s),
                round(cell.duration_s) if cell.duration_s is not None else None,
                m["tokens"],
                cell.cost_usd,
            )
        )
    return Table(columns, rows)


def _node_losses(resumes: int, lost_s: float) -> str:
    """How often a cell resumed elsewhere after losing its node, and the work that cost."""
    return f"{resumes} ({lost_s:.0f} s lost)" if resumes else "—"


def _exit(exit_class: str | None, limit_hit: str | None) -> str | None:
    """The exit class, with the cgroup limit the agent hit (``exited (pids limit)``)."""
    return f"{exit_class} ({limit_hit} limit)" if limit_hit and exit_class else exit_class


def _sandbox(mode: str | None) -> str:
    """How the cell ran; unsealed cells are marked, since nothing kept their agent from the
    answers."""
    if mode is None:
        return "— (before sealing)"
    return mode if mode.startswith("bwrap") else f"{mode} (UNSEALED)"


def _integrity(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Per cell: how it was sealed, its flags, weight distances, contamination overlap and the
    judge's findings."""
    rows: list[tuple[Any, ...]] = []
    judged: list[JudgeDetails] = []
    for c in cells:
        cell, facts = c["src"].cell, c["report"]["integrity"]
        if not facts["checked"]:
            rows.append(
                (
                    cell.cell_id,
                    _sandbox(cell.sandbox),
                    "— (before the integrity checks)",
                    "—",
                    "—",
                    "—",
                )
            )
            continue
        distances = facts["weight_distances"]
        distance = ", ".join(f"#{i}: {d:.3g}" for i, d in sorted(distances.items())) or "—"
        contamination = facts["contamination"] or {}
        overlap = "off"
        if "items_hit" in contamination:
            overlap = (
                f"{contamination['items_hit']}/{contamination['items_total']} items "
                f"({100 * contamination['overlap']:.1f}%)"
                f"{' FLAGGED' if contamination.get('flagged') else ''}"
            )
        judge = facts["judge"]
        verdict = "off" if not judge else (", ".join(judge.get("flags", [])) or "clean")
        flags = ", ".join(facts["flags"]) or "none"
        if facts["allow_substitution"]:
            flags += " (substitution allowed)"
        rows.append((cell.cell_id, _sandbox(cell.sandbox), flags, distance, overlap, verdict))
        if judge:
            judged.append(_judge_details(cell.cell_id, judge))
    columns = (
        "cell",
        "sandbox",
        "flags",
        "weight distance per submission",
        "contamination",
        "judge",
    )
    return {"table": Table(columns, rows), "judged": judged}


def _judge_details(cell_id: str, judge: dict[str, Any]) -> JudgeDetails:
    findings = [
        (
            f.get("category"),
            json.dumps(f.get("evidence", {})),
            f.get("explanation", ""),
            "yes" if f.get("verified", True) else "no",
        )
        for f in judge.get("findings", [])
    ]
    sent = json.dumps(judge.get("sent", {}), sort_keys=True)
    return JudgeDetails(
        cell_id, sent, Table(("category", "evidence", "explanation", "evidence verified"), findings)
    )


def _attempts(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Every attempt of each cell that ran more than once; only the final attempt counts
    (docs/design.md#commands)."""
    retried = [
        c
        for c in cells
        if len(c["src"].attempts) > 1 or any(a["node_resumes"] for a in c["src"].attempts)
    ]
    rows = [
        (
            c["src"].cell.cell_id,
            f"{a['attempt']}{' (final)' if a['final'] else ''}",
            a["status"],
            a["error"],
            (a["node_id"] or "")[:12] or None,
            f"{a['valid_submissions']}/{a['submissions']}",
            a["best_score"],
            a["tokens"],
            a["node_resumes"],
            a["lost_s"],
        )
        for c in retried
        for a in c["src"].attempts
    ]
    columns = (
        "cell",
        "attempt",
        "status",
        "error",
        "node",
        "valid/subs",
        "best (feedback)",
        "tokens",
        "node resumes",
        "lost s",
    )
    return {"once": len(cells) - len(retried), "table": Table(columns, rows)}


def _graders(grader_stats: list[dict[str, Any]]) -> Table | None:
    """Each grader's busy fraction while the grader queue was non-empty, per run of the sweep."""
    if not grader_stats:
        return None
    rows = [
        (
            g["run"],
            g["grader"],
            g["requests"],
            g["busy_s"],
            g["queue_nonempty_s"],
            g["busy_fraction"],
            g["replaced"],
        )
        for g in grader_stats
    ]
    return Table(
        ("run", "grader", "requests", "busy s", "queue non-empty s", "busy fraction", "replaced"),
        rows,
    )


def _stats_table(stats: list[dict[str, Any]]) -> Table:
    rows = [
        (
            s["label"],
            s["n"],
            s["no_valid"],
            s["mean"],
            s["se"],
            s["min"],
            s["max"],
            ", ".join(map(str, s["seeds"])),
        )
        for s in stats
    ]
    return Table(("configuration", "n", "no valid", "mean", "± se", "min", "max", "seeds"), rows)


def _stages(cells: list[dict[str, Any]]) -> Table:
    rows = stage_statistics(
        [c["src"].cell for c in cells], {c["src"].cell.cell_id: c["src"].submissions for c in cells}
    )
    columns = stage_columns(rows)
    return Table(columns, [stage_cells(row, columns) for row in rows])


def _pass_table(stats: list[dict[str, Any]]) -> Table:
    width = max((s["n"] for s in stats), default=0)
    columns = ("configuration", "n", *(f"pass@{k}" for k in range(1, width + 1)))
    rows = [
        (s["label"], s["n"], *(s["pass_at_k"].get(k) for k in range(1, width + 1))) for s in stats
    ]
    return Table(columns, rows)


def _run_report(c: dict[str, Any]) -> RunReportView:
    r = c["report"]
    rows = [
        (
            e["iteration"],
            e["submission_id"],
            e["model_path"],
            e["status"],
            e["score"],
            _signed(e["improvement"]),
            e["method"],
            ", ".join(f"{k}={v}" for k, v in e["hyperparameters"].items()) or "—",
            e["failure_type"],
            "; ".join(e["failure_evidence"]) or "—",
            _diff(e),
        )
        for e in r["entries"]
    ]
    entries = Table(
        (
            "#",
            "submission",
            "model path",
            "status",
            "score",
            "improvement",
            "method",
            "hyperparameters",
            "failure type",
            "evidence",
            "code diff",
        ),
        rows,
    )
    return RunReportView(
        r["cell_id"],
        r["status"],
        r["improvement"],
        r["failure_type"],
        ", ".join(r["methods_used"]) or "—",
        r["exit_class"],
        r["exit_code"],
        _sandbox(r["sandbox"]),
        r["resumes"],
        "; ".join(r["failure_evidence"]) or "—",
        r["notes"],
        entries,
        c["summary"],
    )


def _diff(entry: dict[str, Any]) -> Diff | str:
    if entry["code_unchanged"]:
        return "unchanged"
    if not entry["diff"]:
        return "—"
    return Diff(", ".join(entry["diff_files"]) or "diff", entry["diff"][:8000])


def render_sections(
    *,
    title: str,
    generated: str,
    sweep_dir: Path,
    cells: list[dict[str, Any]],
    stats: list[dict[str, Any]],
    figs: dict[str, bytes],
    grader_stats: list[dict[str, Any]] | None = None,
) -> str:
    """The complete HTML page of a sweep report."""
    counts = Counter(c["src"].cell.status for c in cells)
    overview = {
        "sweep_dir": sweep_dir,
        "generated": generated,
        "cells": len(cells),
        "statuses": ", ".join(f"{n} {s}" for s, n in sorted(counts.items())),
        "tasks": ", ".join(sorted({c["src"].cell.task for c in cells})),
    }
    metrics = Table(
        ("cell", *REPORTED_METRICS),
        [(c["src"].cell.cell_id, *(c["metrics"][k] for k in REPORTED_METRICS)) for c in cells],
    )
    sections = [
        Section("overview", "Overview", "overview", overview),
        Section("results", "Results", "results", {"table": _results(cells)}),
        Section("integrity", "Integrity", "integrity", _integrity(cells)),
        Section("attempts", "Attempts", "attempts", _attempts(cells)),
        selection_bias_section(cells),
        Section(
            "seeds",
            "Mean ± standard error over seeds",
            "figures",
            {"figures": [_fig(figs, "seed_stats", "seed_stats.png")], "table": _stats_table(stats)},
        ),
        Section("stages", "Scores per submission over seeds", "stages", {"table": _stages(cells)}),
        Section(
            "heatmaps",
            "Improvement heatmaps",
            "figures",
            {
                "figures": [
                    _fig(figs, "heatmap_agent_driver", "heatmap_agent_driver.png"),
                    _fig(figs, "heatmap_mode_task", "heatmap_mode_task.png"),
                ]
            },
        ),
        Section(
            "pass-at-k",
            "pass@k: expected best improvement",
            "figures",
            {"figures": [_fig(figs, "pass_at_k", "pass_at_k.png")], "table": _pass_table(stats)},
        ),
        Section(
            "scaling",
            "Scaling curves",
            "figures",
            {
                "figures": [
                    _fig(figs, "scaling_time", "scaling_time.png"),
                    _fig(figs, "scaling_submissions", "scaling_submissions.png"),
                    _fig(figs, "scaling_tokens", "scaling_tokens.png"),
                ]
            },
        ),
        Section(
            "trajectories",
            "Score trajectories",
            "figures",
            {"figures": [_fig(figs, "trajectories", "score_trajectories.png")]},
        ),
        Section("process-metrics", "Process metrics", "process_metrics", {"table": metrics}),
        Section("graders", "Grader pool", "graders", {"table": _graders(grader_stats or [])}),
        Section(
            "run-reports",
            "Run reports",
            "run_reports",
            {"reports": [_run_report(c) for c in cells]},
        ),
    ]
    return page(title, sections)
