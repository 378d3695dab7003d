"""``python -m autorl.sweep [axis=value ...] [override ...]``: run a grid of cells on Ray.

Axes: ``agent``, ``driver``, ``task``, ``model``, ``seed``; each takes a name, a comma list or
``all``, and the cells are their cartesian product. Every other ``key=value`` is a Hydra override
passed to every cell. Running the same command again resumes the sweep.

Before any cell starts, a real run checks that each driver's key variable is set, each agent CLI is
installed and this node can seal cells (bubblewrap, cgroups, the agent toolchain:
``sandbox.mode=none`` is the explicit opt-out), and exits 2 naming what is missing; a dry run prints
its cells anyway and lists what a real run would lack as notes. An agent that needs a driver with
``driver=none`` is refused.

A cluster file with a Jobs address (``cluster.jobs_address``, e.g. ``cluster=jobs-local``) submits
the sweep as one Ray Job instead (:mod:`autorl.jobs`): the log and cell table follow here, Ctrl-C
stops the job (cells cancelled, resumable), and the sweep folder comes back to
``<out_dir>/<sweep_id>/`` when the job ends. ``detach=true`` returns after submitting;
``attach=<job_id>`` follows a job submitted earlier.

Examples:
    python -m autorl.sweep                                   # the embedded default
    python -m autorl.sweep task=gsm8k seed=0,1 dry_run=true  # print the two cells, run nothing
    python -m autorl.sweep agent=opencode driver=gpt-5 task=all budget.seconds=43200
    python -m autorl.sweep cluster=jobs-local task=gsm8k     # one Ray Job on a running head
    python -m autorl.sweep cluster=jobs-local attach=autorl-default-20260101-120000
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autorl.agents.preflight import missing_requirements
from autorl.cluster import configure_client_auth
from autorl.config import SweepPlan, plan_sweep
from autorl.errors import AutorlError
from autorl.grid import CellSpec
from autorl.jobs.spec import take_job_options
from autorl.seal.preflight import judge_sandbox_problems, sandbox_problems

FINAL_OK = ("completed",)


# A grid this size prints one line per task × agent × driver instead of one per cell.
_CELL_LINES_UP_TO = 40


def _hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.1f} h"


def print_preflight(plan: SweepPlan, console: Console) -> None:
    """Print the pre-flight plan: per group and in total GPU-hours, driver tokens and cost, the
    makespan against its packing bound, and the seeds each task needs
    (:mod:`autorl.preflight_plan`)."""
    from autorl.preflight_plan import MAX_SEEDS, history, make_plan

    base = plan.base_config
    estimate = make_plan(plan.cells, history(Path(base.out_dir).expanduser().resolve()))
    table = Table(title="pre-flight plan", title_justify="left")
    for column in ("task", "agent", "driver", "cells", "GPU-h", "Mtok in", "Mtok out", "USD"):
        table.add_column(
            column, justify="left" if column in ("task", "agent", "driver") else "right"
        )
    table.add_column("tokens from")
    for group in estimate.groups:
        rate = group.rate
        table.add_row(
            *(escape(part) for part in group.key),
            str(group.cells),
            f"{group.gpu_hours:.1f}",
            f"{group.input_tokens / 1e6:.1f}",
            f"{group.output_tokens / 1e6:.2f}",
            "no price" if group.cost_usd is None else f"{group.cost_usd:.2f}",
            rate.source if rate and (group.input_tokens or rate.measured_cells) else "no driver",
        )
    cost = estimate.cost_usd
    table.caption = f"total: {len(plan.cells)} cells, {estimate.gpu_hours:.1f} GPU-hours, " + (
        "cost unknown (a driver has no price)" if cost is None else f"${cost:,.2f}"
    )
    console.print(table)
    cluster = f"{estimate.cluster_cpus:g} CPUs, {estimate.cluster_gpus:g} GPUs"
    if estimate.makespan_s is None:
        console.print(
            f"makespan: some cells fit on no node of {cluster} (plan.cluster_cpus/cluster_gpus): "
            + ", ".join(estimate.unplaceable[:5])
        )
    else:
        console.print(
            f"makespan on {cluster}, {base.scheduler.max_concurrent_cells} cells at once: "
            f"{_hours(estimate.makespan_s)} (packing bound {_hours(estimate.packing_bound_s)}; "
            "every cell using its whole budget)"
        )
    settings = base.plan
    for need in estimate.seeds:
        spread = f"sd {need.sd:.3f} " + (
            f"over {need.sd_cells} earlier cells" if need.sd_cells else "(plan.prior_sd, assumed)"
        )
        seeds = f"{need.seeds}" if need.seeds is not None else f"over {MAX_SEEDS}"
        console.print(
            f"seeds for {escape(need.task)}: {seeds} per agent × driver to detect a difference of "
            f"{settings.delta:g} at {settings.power:.0%} power (Welch, α={settings.alpha:g}; "
            f"{spread}); this sweep has {need.planned}"
        )
    if base.budget.sweep_max_cost_usd is not None:
        console.print(f"spend cap: ${base.budget.sweep_max_cost_usd:,.2f} (no new cell past it)")


def print_plan(plan: SweepPlan, console: Console) -> None:
    """Print the cell table of a plan (the dry run): one line per cell, or per task × agent ×
    driver for a big grid; then the pairs left out of it."""
    if plan.left_out:
        console.print(
            f"{len(plan.left_out)} agent × driver pair(s) left out: "
            + "; ".join(escape(f"{o.agent} × {o.driver} ({o.reason})") for o in plan.left_out),
            soft_wrap=True,
        )
    if len(plan.cells) > _CELL_LINES_UP_TO:
        print_groups(plan, console)
        return
    table = Table(
        title=f"sweep {plan.sweep_id}: {len(plan.cells)} cell(s) → {plan.sweep_dir}",
        title_justify="left",
    )
    table.add_column("cell_id", overflow="fold")
    for column in ("agent", "driver", "task", "model", "seed", "resources", "budget s"):
        table.add_column(column, no_wrap=True)
    for cell in plan.cells:
        cpus, gpus = cell.config.cell.cpus, cell.config.cell.gpus
        resources = f"CPU {cpus:g}" + (f", GPU {gpus:g}" if gpus else "")
        table.add_row(
            cell.cell_id,
            cell.agent,
            cell.driver,
            cell.task,
            cell.model,
            str(cell.seed),
            resources,
            f"{cell.budget_s:.0f}",
        )
    console.print(table)


def print_groups(plan: SweepPlan, console: Console) -> None:
    """The cell table of a big grid: one line per task × agent × driver."""
    groups: dict[tuple[str, str, str], list[CellSpec]] = {}
    for cell in plan.cells:
        groups.setdefault((cell.task, cell.agent, cell.driver), []).append(cell)
    table = Table(
        title=f"sweep {plan.sweep_id}: {len(plan.cells)} cells in {len(groups)} groups → "
        f"{plan.sweep_dir}",
        title_justify="left",
    )
    for column in ("task", "agent", "driver", "models", "seeds", "cells", "budget s"):
        table.add_column(column, no_wrap=True)
    for (task, agent, driver), cells in sorted(groups.items()):
        table.add_row(
            task,
            agent,
            driver,
            ",".join(dict.fromkeys(c.model for c in cells)),
            ",".join(str(s) for s in dict.fromkeys(c.seed for c in cells)),
            str(len(cells)),
            f"{max(c.budget_s for c in cells):.0f}",
        )
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    """Run the sweep command; returns the process exit code (docs/design.md#commands)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # Piped output (CI logs, files) gets a wide table instead of rich's 80-column default; errors go
    # to stderr.
    console = Console(width=None if sys.stdout.isatty() else 160)
    errors = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
    if any(a in ("-h", "--help") for a in argv):
        console.print(__doc__)
        return 0
    try:
        job_options, argv = take_job_options(argv)
        plan = plan_sweep(argv)
        if (
            plan.base_config.integrity.judge.enabled
        ):  # an unknown or unusable judge driver stops the sweep now
            from autorl.integrity.judge import judge_spec

            judge_spec(plan.base_config.integrity.judge)
    except AutorlError as error:
        errors.print(f"[red]error:[/] {escape(str(error))}", soft_wrap=True, highlight=False)
        return 2
    # Driver keys and agent CLIs: a real run stops here before any cell starts; a dry run
    # still prints its cells and names what a real run would lack.
    cluster = plan.base_config.cluster
    local = not (
        cluster.address or cluster.jobs_address
    )  # a remote cluster's nodes hold their own CLIs
    missing = missing_requirements(plan.cells, check_binaries=local)
    if (
        local
    ):  # this node runs the cells; a cluster's nodes each check before their cell's agent starts
        missing += sandbox_problems(plan.base_config)
        # ... and grades them: a judge that runs code never shows that code the private split
        missing += judge_sandbox_problems(plan.cells)
    if plan.base_config.dry_run:
        print_plan(plan, console)
        print_preflight(plan, console)
        for problem in missing:
            console.print(
                f"[yellow]note (a real run would stop here):[/] {escape(problem)}", soft_wrap=True
            )
        return 0
    if missing:
        for problem in missing:
            errors.print(f"[red]error:[/] {escape(problem)}", soft_wrap=True, highlight=False)
        return 2
    if (
        cluster.jobs_address
    ):  # the sweep runs as one Ray Job on that cluster; this process follows it
        from autorl.jobs.client import run_as_job

        try:
            return run_as_job(plan, argv, job_options)
        except AutorlError as error:
            errors.print(f"[red]error:[/] {escape(str(error))}", soft_wrap=True, highlight=False)
            return 2
    if job_options != type(job_options)():
        errors.print(
            "[red]error:[/] detach= and attach= need a cluster with a Jobs address "
            f"(cluster.jobs_address); cluster {cluster.name!r} has none",
            soft_wrap=True,
            highlight=False,
        )
        return 2
    configure_client_auth(cluster)  # before the scheduler imports ray
    from autorl.progress import cells_table
    from autorl.report.stages import load_stage_rows, stages_table
    from autorl.scheduler import run_sweep

    # A stopped Ray Job or a `kill` ends the sweep like Ctrl-C: cells are cancelled, and resumable.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        statuses, cells = run_sweep(plan)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]; run the same command again to resume")
        return 130
    except AutorlError as error:
        errors.print(f"[red]error:[/] {escape(str(error))}", soft_wrap=True, highlight=False)
        return 2
    console.print(
        cells_table(f"sweep {plan.sweep_id} results ({plan.sweep_dir / 'results.csv'})", cells)
    )
    stages = load_stage_rows(plan.sweep_dir)
    if any(len(row.seeds) > 1 for row in stages):
        console.print(
            stages_table("test scores per submission over seeds: mean ± standard error", stages)
        )
    bad = {cell: status for cell, status in statuses.items() if status not in FINAL_OK}
    if bad:
        console.print(f"[red]{len(bad)} cell(s) did not complete:[/] {bad}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
