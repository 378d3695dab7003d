"""The structured run report of one cell (docs/design.md#records-and-the-report): one entry per
submission.

Each entry has the score, the training method detected from the code revision it was submitted
with (SFT / GRPO / PPO / DPO / copy / unknown), the key hyperparameters found in that code, the
code diff since the previous submission and a failure type with its evidence. The report is
written as ``run_report.json`` (facts) and ``run_report.md`` (the same facts, readable).
"""

from __future__ import annotations

import json
import time
from typing import Any

from autorl.records.results import allows_substitution
from autorl.records.types import CellRecord, CodeRevision, SubmissionRecord
from autorl.report.cell_metrics import (
    REPORTED_METRICS,
    RunTimes,
    best_so_far,
    compute_cell_metrics,
    is_valid,
)
from autorl.report.code_facts import METHODS, added_text, scan_files, trainer_class_in_model
from autorl.report.escape import md_code_block, md_text
from autorl.report.failures import Failure, classify_cell, classify_submission, log_segments
from autorl.report.sources import CellSources, model_files, revision_diff, revision_files

REPORT_VERSION = 1
MAX_DIFF_CHARS = 20_000


def _iso(t: float | None) -> str | None:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if t else None


def _stored_code(revisions: list[CodeRevision], revision: str) -> dict[str, str]:
    """Without the git repository: the lines every stored diff up to ``revision`` added, per
    file."""
    files: dict[str, str] = {}
    for rev in revisions:
        for path, text in added_text(rev.diff).items():
            files[path] = (files.get(path, "") + "\n" + text).strip("\n")
        if rev.revision == revision:
            break
    return files


def _stored_diff(revisions: list[CodeRevision], previous: str | None, revision: str) -> str:
    ids = [r.revision for r in revisions]
    end = ids.index(revision) if revision in ids else len(ids) - 1
    start = ids.index(previous) + 1 if previous in ids else 0
    return "".join(r.diff for r in revisions[start : end + 1])


def _detect_method(
    sub: SubmissionRecord, files: dict[str, str], diff: str, model: dict[str, bytes]
) -> tuple[str, list[str], list[str]]:
    """(method, candidates, evidence) for one submission; see :func:`build_run_report`."""
    if sub.status == "copy_of_base":
        return "copy", [], ["status copy_of_base: weights equal the base model's"]
    facts = scan_files(files)
    candidates = facts.methods
    grouped: dict[tuple[str, str], list[str]] = {}
    for e in facts.evidence:
        grouped.setdefault((e.path, e.method), []).append(e.text)
    evidence = [
        f"{path} shows {m}: {', '.join(texts[:3])}{' …' if len(texts) > 3 else ''}"
        for (path, m), texts in grouped.items()
    ]
    from_model = trainer_class_in_model(model)
    if len(candidates) == 1:
        if from_model and from_model != candidates[0]:
            evidence.append(f"note: {sub.model_path}/training_args.bin says {from_model}")
        return candidates[0], candidates, evidence
    if len(candidates) > 1:
        changed = [m for m in scan_files(added_text(diff)).methods if m in candidates]
        if len(changed) == 1:
            return (
                changed[0],
                candidates,
                [f"only {changed[0]} code changed since the previous submission", *evidence],
            )
    if from_model:
        return (
            from_model,
            candidates,
            [f"{sub.model_path}/training_args.bin holds {from_model}Config", *evidence],
        )
    return "unknown", candidates, evidence or ["no training method found in the code"]


def _entry(
    src: CellSources,
    index: int,
    sub: SubmissionRecord,
    previous: SubmissionRecord | None,
    running: list[float | None],
    segment: str,
    times: RunTimes,
) -> tuple[dict[str, Any], Failure | None]:
    running_best = running[index]
    before = running[index - 1] if index else None
    new_best = running_best is not None and (before is None or running_best > before)
    previous_rev = previous.code_revision if previous else None
    diff = ""
    files: dict[str, str] = {}
    if sub.code_revision:
        from_git = revision_files(src.repo, sub.code_revision)
        files = from_git if from_git is not None else _stored_code(src.revisions, sub.code_revision)
        if previous_rev != sub.code_revision:
            diff = revision_diff(src.repo, previous_rev, sub.code_revision) or _stored_diff(
                src.revisions, previous_rev, sub.code_revision
            )
    model = model_files(src.cell_dir / "workspace", sub.model_path)
    method, candidates, method_evidence = _detect_method(sub, files, diff, model)
    facts = scan_files(files)
    failure = classify_submission(sub, src.cell.baseline, method, segment)
    score = float(sub.score) if is_valid(sub) else None  # type: ignore[arg-type]
    baseline = src.cell.baseline
    return {
        "iteration": index + 1,
        "submission_id": sub.submission_id,
        "model_path": sub.model_path,
        "status": sub.status,
        "score": score,
        "improvement": round(score - baseline, 6)
        if score is not None and baseline is not None
        else None,
        "best_so_far": running_best,
        "new_best": new_best,
        "submitted_at": _iso(sub.submitted_at),
        "t_since_start_s": round(sub.submitted_at - times.start_time, 3)
        if times.start_time
        else None,
        "scoring_s": round(sub.finished_at - sub.started_at, 3)
        if sub.finished_at and sub.started_at
        else None,
        "queue_wait_s": sub.queue_wait_s,
        "error": sub.error,
        "flags": sub.flags.split(",") if sub.flags else [],
        "weight_distance": sub.weight_distance,
        "code_revision": sub.code_revision,
        "method": method,
        "method_candidates": candidates,
        "method_evidence": method_evidence,
        "hyperparameters": facts.hyperparameters_for(method if method in METHODS else None),
        "diff_files": sorted(added_text(diff)) if diff else [],
        "diff": diff[:MAX_DIFF_CHARS],
        "diff_truncated": len(diff) > MAX_DIFF_CHARS,
        "code_unchanged": bool(sub.code_revision) and previous_rev == sub.code_revision,
        "failure_type": failure.type if failure else None,
        "failure_evidence": list(failure.evidence) if failure else [],
    }, failure


def build_run_report(src: CellSources) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cell's metrics and structured run report.

    Args:
        src: The cell's records and files.

    Returns:
        ``(metrics, report)``, both JSON-ready; ``report["entries"]`` has one entry per submission.
    """
    times = RunTimes.from_run_meta(src.run_meta)
    metrics = compute_cell_metrics(src.cell, src.submissions, times, src.calls)
    segments = log_segments(src.agent_log, src.submissions)
    running = best_so_far(src.submissions, allows_substitution(src.cell))
    entries, failures = [], []
    for i, sub in enumerate(src.submissions):
        entry, failure = _entry(
            src, i, sub, src.submissions[i - 1] if i else None, running, segments[i], times
        )
        entries.append(entry)
        failures.append(failure)
    cell_failure = classify_cell(
        submissions=len(src.submissions),
        valid=metrics["valid_submissions"],
        improvement=metrics["improvement"],
        exit_class=src.cell.exit_class,
        exit_code=src.cell.exit_code,
        log=src.agent_log,
        entry_failures=failures,
    )
    c = src.cell
    report = {
        "report_version": REPORT_VERSION,
        "sweep_id": c.sweep_id,
        "cell_id": c.cell_id,
        "agent": c.agent,
        "driver": c.driver,
        "task": c.task,
        "task_version": c.task_version,
        "model": c.model,
        "seed": c.seed,
        "mode": src.mode,
        "status": c.status,
        "task_source": c.task_source,
        "budget_s": c.budget_s,
        "exit_class": c.exit_class,
        "exit_code": c.exit_code,
        "limit_hit": c.limit_hit,
        "sandbox": c.sandbox,
        "resumes": c.resumes,
        "integrity": integrity_facts(c, src.submissions),
        "baseline": c.baseline,
        "best_score": metrics["best_score"],
        "improvement": metrics["improvement"],
        "methods_used": list(dict.fromkeys(e["method"] for e in entries)),
        "failure_type": cell_failure.type if cell_failure else None,
        "failure_evidence": list(cell_failure.evidence) if cell_failure else [],
        "metrics": {k: metrics[k] for k in REPORTED_METRICS},
        "notes": list(src.notes)
        + ([] if src.repo.is_dir() else ["no code_history.git: code read from stored diffs"]),
        # Every attempt of the cell; the entries above are the final attempt's (the one that
        # counts).
        "attempts": src.attempts,
        "entries": entries,
    }
    return metrics, report


def _node_loss_line(attempts: list[dict[str, Any]]) -> str:
    """The final attempt's resumes after node losses and the work they lost, in words."""
    final = [a for a in attempts if a.get("final")]
    resumes = final[0].get("node_resumes", 0) if final else 0
    if not resumes:
        return "none"
    return f"resumed {resumes} time(s) from a checkpoint, {final[0]['lost_s']} s of work lost"


def integrity_facts(cell: CellRecord, subs: list[SubmissionRecord]) -> dict[str, Any]:
    """What the integrity checks found for one cell: the section of its run report and of the
    sweep report.

    ``flags`` joins the cell's own flags (contamination, judge findings) and every submission flag
    (``model_mismatch`` of submission 2 is ``model_mismatch@2``); ``judge`` is the verdict with its
    evidence and what was sent to the judge's driver, or None when the judge was off.
    """
    details = json.loads(cell.integrity_json or "{}")
    submission_flags = [
        f"{flag}@{s.submission_id}" for s in subs for flag in (s.flags or "").split(",") if flag
    ]
    return {
        "checked": bool(details),
        "allow_substitution": allows_substitution(cell),
        "flags": [
            *(cell.integrity_flags.split(",") if cell.integrity_flags else []),
            *submission_flags,
        ],
        "weight_distances": {
            s.submission_id: s.weight_distance for s in subs if s.weight_distance is not None
        },
        "contamination": details.get("contamination"),
        "judge": details.get("judge"),
    }


def _md(value: Any) -> str:
    """A value as inline Markdown text (:func:`autorl.report.escape.md_text`): every value in
    ``run_report.md`` goes through here, since any may hold the agent's text."""
    return md_text(value)


def _md_join(values: Any, sep: str = ", ", empty: str = "—") -> str:
    """Each value escaped, then joined (the separator is ours)."""
    return sep.join(_md(v) for v in values) or empty


def _integrity_line(facts: dict[str, Any] | None) -> str:
    if not facts or not facts["checked"]:
        return "not checked (cell from before the integrity checks)"
    contamination = facts["contamination"] or {}
    overlap = "contamination check off"
    if "items_hit" in contamination:
        hit, total = _md(contamination["items_hit"]), _md(contamination["items_total"])
        overlap = f"{hit}/{total} eval items seen in the agent's files"
    judge = facts["judge"]
    verdict = "judge off" if not judge else f"judge: {len(judge.get('findings', []))} finding(s)"
    return f"flags {_md_join(facts['flags'], empty='none')}; {overlap}; {verdict}"


def _evidence(facts: list[str], lead: str = " — ") -> str:
    return f"{lead}{_md_join(facts, '; ')}" if facts else ""


def _entry_lines(e: dict[str, Any]) -> list[str]:
    """The Markdown section of one submission entry."""
    hyperparameters = ", ".join(f"{_md(k)}={_md(v)}" for k, v in e["hyperparameters"].items())
    method_evidence = e["method_evidence"][:4]
    lines = [
        "",
        f"## Iteration {_md(e['iteration'])}: submission {_md(e['submission_id'])} "
        f"({_md(e['model_path'])})",
        "",
        f"- status {_md(e['status'])}, score {_md(e['score'])}, "
        f"improvement {_md(e['improvement'])}, best so far {_md(e['best_so_far'])}"
        + (" (new best)" if e["new_best"] else ""),
        f"- submitted {_md(e['submitted_at'])} (t = {_md(e['t_since_start_s'])} s), "
        f"scoring {_md(e['scoring_s'])} s",
        f"- method: **{_md(e['method'])}**"
        + (f" (evidence: {_md_join(method_evidence, '; ')})" if method_evidence else ""),
        f"- hyperparameters: {hyperparameters or '—'}",
        f"- failure type: {_md(e['failure_type'])}{_evidence(e['failure_evidence'])}",
    ]
    if e["error"]:
        lines.append(f"- error: {_md(e['error'])}")
    if e.get("flags") or e.get("weight_distance") is not None:
        lines.append(
            f"- integrity: flags {_md_join(e.get('flags') or [], empty='none')}; "
            f"weight distance to the base {_md(e.get('weight_distance'))}"
        )
    if e["code_unchanged"]:
        lines.append("- code unchanged since the previous submission")
    elif e["diff"]:
        truncated = " (truncated)" if e["diff_truncated"] else ""
        lines += [
            f"- code diff ({_md_join(e['diff_files'])}){truncated}:",
            "",
            *md_code_block(e["diff"][:6000].rstrip(), "diff"),
        ]
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    """The run report as Markdown (the same facts as the JSON).

    Every value is escaped for inline Markdown (no raw HTML, no links, no markup; control
    characters written out) and the diff sits in a fence longer than any backtick run in it, so
    what the agent wrote renders as text (docs/threat-model.md).
    """
    r = report
    limit = f", {_md(r['limit_hit'])} limit hit" if r.get("limit_hit") else ""
    lines = [
        f"# Run report: {_md(r['cell_id'])}",
        "",
        f"agent **{_md(r['agent'])}** · driver **{_md(r['driver'])}** · "
        f"task **{_md(r['task'])}** v{_md(r['task_version'])} ({_md(r['task_source'])}) · "
        f"model **{_md(r['model'])}** · seed {_md(r['seed'])} · mode {_md(r['mode'])}",
        "",
        f"- status: {_md(r['status'])}; agent exit: {_md(r['exit_class'])} "
        f"(code {_md(r['exit_code'])}{limit}); budget {float(r['budget_s']):.0f} s",
        f"- sandbox: {_md(r.get('sandbox'))}; resumed {_md(r.get('resumes', 0))} time(s)",
        f"- node losses: {_node_loss_line(r.get('attempts') or [])}",
        f"- integrity: {_integrity_line(r.get('integrity'))}",
        f"- baseline {_md(r['baseline'])} → best {_md(r['best_score'])} "
        f"(improvement {_md(r['improvement'])})",
        f"- methods used: {_md_join(r['methods_used'])}",
        f"- failure type: {_md(r['failure_type'])}{_evidence(r['failure_evidence'])}",
        "",
        "| metric | value |",
        "|---|---|",
        *(f"| {_md(k)} | {_md(v)} |" for k, v in r["metrics"].items()),
    ]
    for note in r["notes"]:
        lines.append(f"\n> note: {_md(note)}")
    attempts = r.get("attempts") or []
    if len(attempts) > 1 or any(a.get("node_resumes") for a in attempts):
        lines += [
            "",
            "## Attempts (only the final one counts)",
            "",
            "| attempt | status | error | submissions | best | node resumes | lost s |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {_md(a['attempt'])}{' (final)' if a['final'] else ''} | {_md(a['status'])} | "
            f"{_md(a['error'])} | {_md(a['valid_submissions'])}/{_md(a['submissions'])} | "
            f"{_md(a['best_score'])} | {_md(a.get('node_resumes', 0))} | "
            f"{_md(a.get('lost_s', 0))} |"
            for a in attempts
        ]
    for e in r["entries"]:
        lines += _entry_lines(e)
    return "\n".join(lines) + "\n"
