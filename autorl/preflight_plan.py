"""The pre-flight plan of a sweep: GPU-hours, driver tokens and cost, makespan and seeds.

Printed by every dry run, before a 540-cell sweep spends a GPU-hour or a dollar. Each estimate says
where it comes from: the record stores of earlier sweeps under ``out_dir`` (cells of the same
agent × driver × task that completed), else the stated assumptions of ``plan:`` in
``conf/config.yaml``, marked ``assumed``.

Seeds: a cell's improvement varies over seeds; to tell two agents apart by ``plan.delta`` in mean
improvement with a two-sided Welch t-test at ``plan.alpha``, each needs ``n`` seeds such that the
test's power (the noncentral t distribution with ``2(n - 1)`` degrees of freedom, equal spreads)
reaches ``plan.power``. The spread is the task's pooled standard deviation over earlier cells'
seeds, else ``plan.prior_sd``.
"""

from __future__ import annotations

import heapq
import math
import os
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from scipy import stats

from autorl.grid import CellSpec
from autorl.plan_schema import PlanConfig
from autorl.records.store import RecordStore
from autorl.records.types import CellRecord

GroupKey = tuple[str, str, str]  # task, agent, driver


@dataclass(frozen=True)
class TokenRate:
    """Driver tokens per agent hour, and whether they were measured or assumed."""

    input_per_hour: float
    output_per_hour: float
    measured_cells: int  # 0: the plan's assumption

    @property
    def source(self) -> str:
        """``measured (n cells)`` or ``assumed``."""
        return f"measured ({self.measured_cells} cells)" if self.measured_cells else "assumed"


@dataclass
class GroupPlan:
    """The plan of one task × agent × driver group."""

    key: GroupKey
    cells: int = 0
    gpu_hours: float = 0.0
    agent_hours: float = 0.0
    input_tokens: float = 0.0
    output_tokens: float = 0.0
    cost_usd: float | None = 0.0  # None: the driver has no list price
    rate: TokenRate | None = None


@dataclass(frozen=True)
class SeedsNeeded:
    """The seeds one task needs per agent × driver for the plan's difference."""

    task: str
    sd: float
    sd_cells: int  # 0: the plan's prior
    seeds: int | None  # None: more than MAX_SEEDS
    planned: int


@dataclass
class Plan:
    """The whole pre-flight plan."""

    groups: list[GroupPlan]
    seeds: list[SeedsNeeded]
    makespan_s: float | None  # None: some cell fits on no cluster of the stated size
    packing_bound_s: float
    cluster_cpus: float
    cluster_gpus: float
    unplaceable: list[str] = field(default_factory=list)

    @property
    def gpu_hours(self) -> float:
        """GPU-hours of all cells."""
        return sum(g.gpu_hours for g in self.groups)

    @property
    def cost_usd(self) -> float | None:
        """Driver cost of all cells (None when some driver has no price)."""
        costs = [g.cost_usd for g in self.groups]
        return None if any(c is None for c in costs) else sum(c or 0.0 for c in costs)


MAX_SEEDS = 200


def welch_power(n: int, delta: float, sd: float, alpha: float) -> float:
    """Power of a two-sided Welch t-test between two groups of ``n`` with equal spread ``sd``."""
    if n < 2 or sd <= 0:
        return 0.0 if n < 2 else 1.0
    df = 2 * (n - 1)
    ncp = delta / (sd * math.sqrt(2 / n))
    critical = stats.t.ppf(1 - alpha / 2, df)
    return float(1 - stats.nct.cdf(critical, df, ncp) + stats.nct.cdf(-critical, df, ncp))


def seeds_for(delta: float, sd: float, alpha: float, power: float) -> int | None:
    """The fewest seeds per group that reach ``power``; None above :data:`MAX_SEEDS`."""
    for n in range(2, MAX_SEEDS + 1):
        if welch_power(n, delta, sd, alpha) >= power:
            return n
    return None


def history(out_dir: Path) -> list[CellRecord]:
    """Completed cells of every sweep under ``out_dir`` (stores opened read-only)."""
    found: list[CellRecord] = []
    for db in sorted(out_dir.glob("*/records.sqlite")):
        try:
            with RecordStore(db, read_only=True) as store:
                found += [c for c in store.list_cells() if c.status == "completed"]
        except Exception:  # noqa: BLE001 - another version's store: the plan goes without it
            continue
    return found


def token_rates(cells: Iterable[CellRecord]) -> dict[GroupKey, TokenRate]:
    """Measured tokens per agent hour per task × agent × driver."""
    sums: dict[GroupKey, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for cell in cells:
        hours = (cell.duration_s or 0.0) / 3600
        if hours <= 0 or cell.tokens_in is None:
            continue
        acc = sums[(cell.task, cell.agent, cell.driver)]
        acc[0] += cell.tokens_in
        acc[1] += cell.tokens_out or 0
        acc[2] += hours
        acc[3] += 1
    return {key: TokenRate(a[0] / a[2], a[1] / a[2], int(a[3])) for key, a in sums.items()}


def improvement_spread(cells: Iterable[CellRecord]) -> dict[str, tuple[float, int]]:
    """Per task, the pooled standard deviation of improvement within task × agent × driver × model
    groups of two or more cells, and how many cells it rests on."""
    groups: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    for cell in cells:
        if cell.improvement is not None:
            groups[(cell.task, cell.agent, cell.driver, cell.model)].append(cell.improvement)
    pooled: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for (task, *_), values in groups.items():
        if len(values) >= 2:
            acc = pooled[task]
            acc[0] += statistics.variance(values) * (len(values) - 1)
            acc[1] += len(values) - 1
            acc[2] += len(values)
    return {task: (math.sqrt(a[0] / a[1]), int(a[2])) for task, a in pooled.items() if a[1]}


def makespan(
    cells: list[CellSpec], cpus: float, gpus: float, max_concurrent: int
) -> tuple[float | None, list[str]]:
    """The sweep's wall time if every cell runs its whole budget: list scheduling, longest first,
    at most ``max_concurrent`` at once within ``cpus`` and ``gpus``. Returns None and the cells that
    fit on no such cluster when there are any."""
    needs = [(c.budget_s, c.config.cell.cpus, c.config.cell.gpus, c.cell_id) for c in cells]
    unplaceable = [cid for _, cpu, gpu, cid in needs if cpu > cpus or gpu > gpus]
    if unplaceable:
        return None, unplaceable
    queue = sorted(needs, key=lambda n: -n[0])
    running: list[tuple[float, float, float]] = []  # (end, cpus, gpus)
    now, free_cpu, free_gpu = 0.0, cpus, gpus
    for duration, cpu, gpu, _ in queue:
        while len(running) >= max_concurrent or cpu > free_cpu + 1e-9 or gpu > free_gpu + 1e-9:
            end, c, g = heapq.heappop(running)
            now, free_cpu, free_gpu = max(now, end), free_cpu + c, free_gpu + g
        heapq.heappush(running, (now + duration, cpu, gpu))
        free_cpu, free_gpu = free_cpu - cpu, free_gpu - gpu
    return max((end for end, _, _ in running), default=0.0), []


def cluster_size(settings: PlanConfig) -> tuple[float, float]:
    """The CPUs and GPUs the makespan assumes: the plan's, else this node's."""
    cpus = settings.cluster_cpus if settings.cluster_cpus is not None else os.cpu_count() or 1
    gpus = settings.cluster_gpus if settings.cluster_gpus is not None else 0.0
    return float(cpus), float(gpus)


def make_plan(cells: list[CellSpec], past: list[CellRecord]) -> Plan:
    """The pre-flight plan of ``cells``, learning from the completed cells ``past``."""
    settings = cells[0].config.plan
    rates = token_rates(past)
    groups: dict[GroupKey, GroupPlan] = {}
    for cell in cells:
        key = (cell.task, cell.agent, cell.driver)
        group = groups.setdefault(key, GroupPlan(key))
        hours = cell.budget_s / 3600
        group.cells += 1
        group.agent_hours += hours
        group.gpu_hours += hours * cell.config.cell.gpus
        if not cell.config.agent.needs_driver:
            group.rate = TokenRate(0.0, 0.0, 0)
            continue
        rate = rates.get(key) or TokenRate(
            settings.assumed_input_tokens_per_hour, settings.assumed_output_tokens_per_hour, 0
        )
        group.rate = rate
        tokens_in, tokens_out = rate.input_per_hour * hours, rate.output_per_hour * hours
        group.input_tokens += tokens_in
        group.output_tokens += tokens_out
        price = cell.config.driver.price_per_mtok
        if price is None or group.cost_usd is None:
            group.cost_usd = None
        else:
            group.cost_usd += (tokens_in * price.input + tokens_out * price.output) / 1e6
    spread = improvement_spread(past)
    planned: dict[str, set[int]] = defaultdict(set)
    for cell in cells:
        planned[cell.task].add(cell.seed)
    seeds = []
    for task in sorted(planned):
        sd, n_cells = spread.get(task, (settings.prior_sd, 0))
        needed = seeds_for(settings.delta, sd, settings.alpha, settings.power)
        seeds.append(SeedsNeeded(task, sd, n_cells, needed, len(planned[task])))
    cpus, gpus = cluster_size(settings)
    base = cells[0].config
    grader_cpus = base.grader.cpus * base.grader.replicas
    grader_gpus = base.grader.gpus * base.grader.replicas
    cell_cpus, cell_gpus = max(cpus - grader_cpus, 0.0), max(gpus - grader_gpus, 0.0)
    span, unplaceable = makespan(cells, cell_cpus, cell_gpus, base.scheduler.max_concurrent_cells)
    bound = max(
        sum(c.budget_s * c.config.cell.cpus for c in cells) / max(cell_cpus, 1e-9),
        sum(c.budget_s * c.config.cell.gpus for c in cells) / cell_gpus if cell_gpus else 0.0,
        sum(c.budget_s for c in cells) / base.scheduler.max_concurrent_cells,
        max(c.budget_s for c in cells),
    )
    return Plan([groups[k] for k in sorted(groups)], seeds, span, bound, cpus, gpus, unplaceable)
