"""The sections of the sweep report page, from the computed analyses and figures."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from autorl.report.escape import Html
from autorl.report.feedback import selection_bias_section
from autorl.report.html_page import esc, figure, page, table
from autorl.report.stages import stage_cells, stage_columns, stage_statistics

_METRIC_COLUMNS = (
    "valid_submission_rate", "first_valid_idx", "time_to_first_improvement", "time_to_best", "monotonic_ratio",
    "copy_model_count", "time_used_ratio", "last_submit_gap", "tokens", "cost_usd",
)
_CAPTIONS = {
    "heatmap_agent_driver": "mean improvement of completed cells per agent × driver (n = runs)",
    "heatmap_mode_task": "mean improvement per operating mode × task (n = runs)",
    "seed_stats": "bars: mean over seeds; whiskers: ± standard error; dots: each seed",
    "pass_at_k": "expected maximum improvement of k runs drawn without replacement from the seeds (exact)",
    "scaling_time": "best-so-far improvement against the agent's wall time",
    "scaling_submissions": "best-so-far improvement against the submission index",
    "scaling_tokens": "best-so-far improvement against the driver tokens spent before each submission (gateway records)",
    "trajectories": "score of each submission (× = no valid score); dashed: the cell's baseline",
}


def _fig(figs: dict[str, bytes], name: str, file_name: str) -> str:
    return figure(figs[name], name.replace("_", " "), _CAPTIONS[name], file_name)


def _signed(value: float | None) -> str:
    if value is None:
        return "—"
    css = "good" if value > 0 else "bad" if value < 0 else ""
    return Html(f'<span class="{css}">{float(value):+.4g}</span>')


def _results(cells: list[dict[str, Any]]) -> str:
    columns = ("cell", "agent", "driver", "task", "mode", "model", "seed", "status", "baseline", "best", "improvement",
               "valid/subs", "methods", "failure type", "exit", "sandbox", "resumes", "duration s", "tokens", "cost $")
    rows = []
    for c in cells:
        cell, m, r = c["src"].cell, c["metrics"], c["report"]
        link = Html(f'<a href="../cells/{esc(cell.cell_id)}/run_report.md">{esc(cell.cell_id)}</a>')
        rows.append((
            link, cell.agent, cell.driver, cell.task, c["src"].mode, cell.model, cell.seed, cell.status, m["baseline"],
            m["best_score"], _signed(m["improvement"]), f"{m['valid_submissions']}/{m['submissions']}",
            ", ".join(r["methods_used"]) or "—", r["failure_type"], _exit(cell.exit_class, cell.limit_hit),
            _sandbox(cell.sandbox), cell.resumes,
            round(cell.duration_s) if cell.duration_s is not None else None, m["tokens"], cell.cost_usd,
        ))
    return table(columns, rows)


def _exit(exit_class: str | None, limit_hit: str | None) -> str | None:
    """The exit class, with the cgroup limit the agent hit (``exited (pids limit)``)."""
    return f"{exit_class} ({limit_hit} limit)" if limit_hit and exit_class else exit_class


def _sandbox(mode: str | None) -> str:
    """How the cell ran; unsealed cells are marked, since nothing kept their agent from the answers."""
    if mode is None:
        return "— (before sealing)"
    return mode if mode.startswith("bwrap") else f"{mode} (UNSEALED)"


def _integrity(cells: list[dict[str, Any]]) -> str:
    """Per cell: how it was sealed, its flags, weight distances, contamination overlap and the judge's findings."""
    rows, judged = [], []
    for c in cells:
        cell, facts = c["src"].cell, c["report"]["integrity"]
        if not facts["checked"]:
            rows.append((cell.cell_id, _sandbox(cell.sandbox), "— (before the integrity checks)", "—", "—", "—"))
            continue
        distances = facts["weight_distances"]
        distance = ", ".join(f"#{i}: {d:.3g}" for i, d in sorted(distances.items())) or "—"
        contamination = facts["contamination"] or {}
        overlap = "off"
        if "items_hit" in contamination:
            overlap = (f"{contamination['items_hit']}/{contamination['items_total']} items "
                       f"({100 * contamination['overlap']:.1f}%){' FLAGGED' if contamination.get('flagged') else ''}")
        judge = facts["judge"]
        verdict = "off" if not judge else (", ".join(judge.get("flags", [])) or "clean")
        flags = ", ".join(facts["flags"]) or "none"
        if facts["allow_substitution"]:
            flags += " (substitution allowed)"
        rows.append((cell.cell_id, _sandbox(cell.sandbox), flags, distance, overlap, verdict))
        if judge:
            judged.append(_judge_details(cell.cell_id, judge))
    note = ('<p class="note">A submission flagged <code>model_mismatch</code> (another architecture or vocabulary than '
            "the base) never counts towards a cell's best unless the sweep set "
            "<code>integrity.allow_substitution=true</code>. Weight distance: ||W − W<sub>base</sub>|| / "
            "||W<sub>base</sub>|| of each submission (0 = a copy); a same-family substitute cannot be proven offline, so "
            "it is shown, not judged. Contamination: eval items with an n-gram (absent from the public training split) "
            "found in the agent's files. The judge never changes a score.</p>")
    columns = ("cell", "sandbox", "flags", "weight distance per submission", "contamination", "judge")
    return note + table(columns, rows) + "".join(judged)


def _judge_details(cell_id: str, judge: dict[str, Any]) -> str:
    findings = [(f.get("category"), json.dumps(f.get("evidence", {})), f.get("explanation", ""),
                 "yes" if f.get("verified", True) else "no") for f in judge.get("findings", [])]
    sent = judge.get("sent", {})
    return (f"<details><summary>judge of {esc(cell_id)}: {len(findings)} finding(s)</summary>"
            f"<p>sent to the judge: <code>{esc(json.dumps(sent, sort_keys=True))}</code></p>"
            + table(("category", "evidence", "explanation", "evidence verified"), findings) + "</details>")


def _attempts(cells: list[dict[str, Any]]) -> str:
    """Every attempt of each cell that ran more than once; only the final attempt counts (SPEC §2)."""
    retried = [c for c in cells if len(c["src"].attempts) > 1]
    once = len(cells) - len(retried)
    note = (f'<p class="note">A cell is started again after an infrastructure failure (its node died, its actor '
            f"crashed; <code>scheduler.max_retries</code>) and when a resumed sweep finds it unfinished. Every attempt's "
            f"submissions, code revisions and logs stay in the record store under its number; only the final attempt "
            f"counts. {once} cell(s) ran once.</p>")
    rows = [
        (c["src"].cell.cell_id, f"{a['attempt']}{' (final)' if a['final'] else ''}", a["status"], a["error"],
         (a["node_id"] or "")[:12] or None, f"{a['valid_submissions']}/{a['submissions']}", a["best_score"], a["tokens"])
        for c in retried for a in c["src"].attempts
    ]
    if not rows:
        return note
    return note + table(("cell", "attempt", "status", "error", "node", "valid/subs", "best (feedback)", "tokens"), rows)


def _graders(grader_stats: list[dict[str, Any]]) -> str:
    """Each grader's busy fraction while the grader queue was non-empty, per run of the sweep."""
    note = ('<p class="note">Busy fraction: the time a grader had a scoring request in flight over the time any request '
            "was in flight or waiting (the queue was non-empty); 1.0 for every grader means work never waited on an idle "
            "grader. A replaced grader (it died) keeps its slot. Also exported live as "
            "<code>ray_autorl_grader_busy_fraction</code>.</p>")
    if not grader_stats:
        return note + "<p>no grader measurements in this record store (a sweep from before they were kept)</p>"
    rows = [(g["run"], g["grader"], g["requests"], g["busy_s"], g["queue_nonempty_s"], g["busy_fraction"], g["replaced"])
            for g in grader_stats]
    return note + table(("run", "grader", "requests", "busy s", "queue non-empty s", "busy fraction", "replaced"), rows)


def _stats_table(stats: list[dict[str, Any]]) -> str:
    rows = [(s["label"], s["n"], s["no_valid"], s["mean"], s["se"], s["min"], s["max"], ", ".join(map(str, s["seeds"])))
            for s in stats]
    return table(("configuration", "n", "no valid", "mean", "± se", "min", "max", "seeds"), rows)


def _stages(cells: list[dict[str, Any]]) -> str:
    rows = stage_statistics([c["src"].cell for c in cells], {c["src"].cell.cell_id: c["src"].submissions for c in cells})
    columns = stage_columns(rows)
    note = ("<p class=\"note\">Test-split score of the base model and of each submitted model path (the scripted "
            "agent's <code>output/v1</code> after SFT, <code>output/v2</code> after RL), mean ± standard error over "
            "the completed seeds; the last column says whether the mean improvement exceeds two standard errors.</p>")
    return note + table(columns, [stage_cells(row, columns) for row in rows])


def _pass_table(stats: list[dict[str, Any]]) -> str:
    width = max((s["n"] for s in stats), default=0)
    columns = ("configuration", "n", *(f"pass@{k}" for k in range(1, width + 1)))
    rows = [(s["label"], s["n"], *(s["pass_at_k"].get(k) for k in range(1, width + 1))) for s in stats]
    return table(columns, rows)


def _run_reports(cells: list[dict[str, Any]]) -> str:
    out = []
    for c in cells:
        r = c["report"]
        head = (f"{r['cell_id']}: {r['status']}, improvement {esc(r['improvement'])}, "
                f"failure type {esc(r['failure_type'])}")
        facts = (f"<p>methods: {esc(', '.join(r['methods_used']) or '—')}; exit {esc(r['exit_class'])} "
                 f"(code {esc(r['exit_code'])}); sandbox {esc(_sandbox(r['sandbox']))}; resumes {esc(r['resumes'])}; "
                 f"failure evidence: {esc('; '.join(r['failure_evidence']) or '—')}</p>")
        notes = "".join(f'<p class="note">note: {esc(n)}</p>' for n in r["notes"])
        rows = [(
            e["iteration"], e["submission_id"], e["model_path"], e["status"], e["score"], _signed(e["improvement"]),
            e["method"], ", ".join(f"{k}={v}" for k, v in e["hyperparameters"].items()) or "—",
            e["failure_type"], "; ".join(e["failure_evidence"]) or "—", _diff(e),
        ) for e in r["entries"]]
        entries = table(("#", "submission", "model path", "status", "score", "improvement", "method", "hyperparameters",
                         "failure type", "evidence", "code diff"), rows)
        summary = ""
        if c["summary"]:
            summary = (f"<h4>LLM summary (<code>run_summary.md</code>)</h4>"
                       f'<pre style="white-space: pre-wrap">{esc(c["summary"])}</pre>')
        files = (f'<p class="note">files: <a href="../cells/{esc(r["cell_id"])}/run_report.json">run_report.json</a>, '
                 f'<a href="../cells/{esc(r["cell_id"])}/metrics.json">metrics.json</a></p>')
        out.append(f"<details><summary>{esc(head)}</summary>{facts}{notes}{entries}{summary}{files}</details>")
    return "".join(out) or "<p>no cells</p>"


def _diff(entry: dict[str, Any]) -> str:
    if entry["code_unchanged"]:
        return "unchanged"
    if not entry["diff"]:
        return "—"
    files = ", ".join(entry["diff_files"]) or "diff"
    diff = esc(entry["diff"][:8000])
    return Html(f"<details><summary>{esc(files)}</summary><pre>{diff}</pre></details>")


def render_sections(
    *, title: str, generated: str, sweep_dir: Path, cells: list[dict[str, Any]], stats: list[dict[str, Any]],
    figs: dict[str, bytes], grader_stats: list[dict[str, Any]] | None = None,
) -> str:
    """The complete HTML page of a sweep report."""
    counts = Counter(c["src"].cell.status for c in cells)
    tasks = sorted({c["src"].cell.task for c in cells})
    overview = (
        f"<p>sweep folder <code>{esc(sweep_dir)}</code>; generated {esc(generated)}; {len(cells)} cell(s): "
        f"{esc(', '.join(f'{n} {s}' for s, n in sorted(counts.items())))}; task(s): {esc(', '.join(tasks))}.</p>"
        "<p class=\"note\">Statistics use completed cells only; a completed cell without a valid submission counts "
        "as improvement 0 (it keeps the base model). A submission is valid when the grader scored it.</p>"
    )
    metrics_rows = [(c["src"].cell.cell_id, *(c["metrics"][k] for k in _METRIC_COLUMNS)) for c in cells]
    sections = [
        ("overview", "Overview", overview),
        ("results", "Results", _results(cells)),
        ("integrity", "Integrity", _integrity(cells)),
        ("attempts", "Attempts", _attempts(cells)),
        ("selection-bias", "Selection bias of test feedback", selection_bias_section(cells)),
        ("seeds", "Mean ± standard error over seeds", _fig(figs, "seed_stats", "seed_stats.png") + _stats_table(stats)),
        ("stages", "Scores per submission over seeds", _stages(cells)),
        (
            "heatmaps",
            "Improvement heatmaps",
            _fig(figs, "heatmap_agent_driver", "heatmap_agent_driver.png")
            + _fig(figs, "heatmap_mode_task", "heatmap_mode_task.png"),
        ),
        ("pass-at-k", "pass@k: expected best improvement", _fig(figs, "pass_at_k", "pass_at_k.png") + _pass_table(stats)),
        (
            "scaling",
            "Scaling curves",
            _fig(figs, "scaling_time", "scaling_time.png")
            + _fig(figs, "scaling_submissions", "scaling_submissions.png")
            + _fig(figs, "scaling_tokens", "scaling_tokens.png"),
        ),
        ("trajectories", "Score trajectories", _fig(figs, "trajectories", "score_trajectories.png")),
        ("process-metrics", "Process metrics", table(("cell", *_METRIC_COLUMNS), metrics_rows)),
        ("graders", "Grader pool", _graders(grader_stats or [])),
        ("run-reports", "Run reports", _run_reports(cells)),
    ]
    return page(title, sections)
