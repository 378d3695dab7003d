"""Runs a planned sweep on Ray: shared services, one placement group + Workspace actor per cell.

Cells are scheduled by resources: each asks for a ``{CPU, GPU}`` bundle through its own placement
group, and at most ``scheduler.max_concurrent_cells`` are placed or running at once. The record
store makes re-running the same command a resume: completed cells are skipped, the rest run.

Every placement of a cell is a new attempt (numbered across invocations of the sweep), except a
resume: a cell whose node was lost (its actor's host died) goes on from its last checkpoint on
another node in the same attempt (``cell.on_node_loss=resume``, :mod:`autorl.workspace.resume`).
An attempt that ends in another infrastructure failure, or has no checkpoint, is retried from
nothing; either way at most ``scheduler.max_retries`` times in this invocation, and a resumed sweep
starts its unfinished cells again. Each attempt's records stay in the store under its number; only
the last one counts.

The shared services that hold the sweep's state (the Recorder and the GraderPool) are pinned to the
driver's node: the record store lives in the sweep folder there, and a supervisor on a node that
dies would take the sweep with it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, cast

import ray
from ray.actor import ActorHandle
from ray.exceptions import (
    ActorDiedError,
    ActorUnavailableError,
    GetTimeoutError,
    NodeDiedError,
    RayError,
    WorkerCrashedError,
)
from ray.util.placement_group import (
    PlacementGroup,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

from autorl.actors.env_pool import start_env_pools
from autorl.actors.grader_pool import GraderPool
from autorl.actors.recorder import Recorder
from autorl.actors.recorder_client import RecorderClient
from autorl.actors.workspace import Workspace
from autorl.cell_schema import NodeLoss
from autorl.cluster import check_gpus_fit, check_nodes_sealable, connect
from autorl.config import SweepPlan, resolve_cache_dir
from autorl.errors import PrerequisiteError
from autorl.grid import CellSpec
from autorl.models.resolve import model_build
from autorl.progress import CellBoard
from autorl.records.migrations import autorl_version
from autorl.records.types import CellOutcome, CellRecord, plain_config
from autorl.tasks import get_task
from autorl.tracking.sweep_end import finish_sweep
from autorl.view import view_command
from autorl.workspace.resume import ResumeFrom, plan_resume

logger = logging.getLogger(__name__)
# The errors of a cell whose actor's process or node died (not of its run raising): such a cell
# may resume from its checkpoint elsewhere.
HOST_LOST = (ActorDiedError, ActorUnavailableError, NodeDiedError, WorkerCrashedError)
_CANCEL_WAIT_S = 60.0
_STATS_EVERY_S = 15.0  # how often the grader pool's busy fractions are saved while the sweep runs
# A killed sweep process's named actors go away once Ray notices its driver died.
_OLD_SERVICES_WAIT_S = 60.0


@dataclass
class _Attempt:
    cell: CellSpec
    attempt: int  # the attempt's number in the record store (counted across invocations)
    tries: int  # placements of the cell in this invocation (retries are limited per invocation)
    pg: PlacementGroup
    placed_at: float
    actor: Any = None
    run_ref: Any = None
    ready_ref: Any = field(default=None)
    told: bool = False  # the user was told what this unplaced attempt waits for
    resume: ResumeFrom | None = None  # this placement goes on from a checkpoint of a lost node
    node_id: str | None = None  # the node it runs on, once started


_TELL_UNPLACED_AFTER_S = 30.0  # a cell unplaced this long while nothing of the sweep runs: say why


def _unplaced_note(cell: CellSpec, waited: float, timeout: float) -> str:
    """What an unplaced cell waits for, and what the cluster has free and in all."""
    bundle = _bundle(cell)
    free, total = ray.available_resources(), ray.cluster_resources()
    have = ", ".join(f"{key} {free.get(key, 0):g} free of {total.get(key, 0):g}" for key in bundle)
    return (
        f"cell {cell.cell_id} has waited {waited:.0f} s for {bundle} while no cell runs ({have}; "
        "the grader "
        f"and env pools hold the rest): it fails after scheduler.placement_timeout_s={timeout:g} s "
        "unless "
        "resources free up; lower cell.cpus/cell.gpus or grader.cpus, or add nodes"
    )


def _bundle(cell: CellSpec) -> dict[str, float]:
    bundle = {"CPU": cell.config.cell.cpus}
    if cell.config.cell.gpus:
        bundle["GPU"] = cell.config.cell.gpus
    return bundle


class SweepRunner:
    """Drives one sweep to the end; see :func:`run_sweep`."""

    def __init__(self, plan: SweepPlan) -> None:
        """Start the shared services of the sweep (Ray must already be connected)."""
        self.plan = plan
        self.cfg = plan.base_config
        db_path = plan.sweep_dir / "records.sqlite"
        # This invocation of the sweep, for sweep-level measurements (a resumed sweep is a second
        # run).
        self.run_id = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        _wait_for_old_services(("recorder", "grader_pool"))
        # The driver's node: the sweep folder, and the cells' checkpoints without storage.root.
        self.home_node = ray.get_runtime_context().get_node_id()
        # Hard affinity: a restarted Recorder comes back here, next to the sweep folder it writes.
        here = NodeAffinitySchedulingStrategy(self.home_node, soft=False)
        recorder = (
            ray.remote(Recorder)
            .options(
                name="recorder",
                num_cpus=0,
                max_restarts=-1,
                max_task_retries=-1,
                scheduling_strategy=here,
            )
            # Plain data across the actor boundary: the Recorder hands tracking["wandb"] to its
            # WandbTracker.
            .remote(str(db_path), dataclasses.asdict(self.cfg.tracking))
        )
        # Every call to it goes through the typed client (Ray's stubs also allow the class here).
        self.recorder = RecorderClient(cast("ActorHandle[Any]", recorder))
        # Cast to Any: Ray types a handle's methods as the plain methods, without their .remote
        # (only methods decorated with @ray.method get typed remote calls).
        self.pool: Any = cast(
            Any,
            ray.remote(GraderPool)
            .options(name="grader_pool", num_cpus=0, scheduling_strategy=here)
            .remote(self.cfg.grader, str(resolve_cache_dir(self.cfg.cache_dir)), self.recorder),
        )
        self._stats_saved = 0.0
        # envpool:<kind> for each interactive task of the sweep (found by name by graders and
        # cells).
        self.env_pools = start_env_pools(plan.cells, str(resolve_cache_dir(self.cfg.cache_dir)))
        self.board = CellBoard(plan.sweep_id, enabled=self.cfg.progress)
        timeout = self.cfg.scheduler.placement_timeout_s
        try:
            ray.get(self.pool.ready.remote(), timeout=timeout)
        except GetTimeoutError as error:
            grader = self.cfg.grader
            raise PrerequisiteError(
                f"the grader pool ({grader.replicas} × {grader.cpus:g} CPU, "
                f"{grader.gpus:g} GPU) did not start within {timeout:.0f} s: the cluster lacks "
                "those "
                "resources; lower grader.cpus/grader.replicas or add nodes"
            ) from error

    def run(self) -> dict[str, str]:
        """Run every unfinished cell, and every completed one whose score measured another task
        version or another build of its base model; returns the final status of every cell."""
        todo: deque[tuple[CellSpec, int, ResumeFrom | None]] = deque()
        skipped, stale = [], []
        for cell in self.plan.cells:
            existing = self.recorder.get_cell(cell.cell_id)
            if existing is not None and existing.status == "completed":
                version = get_task(cell.task).version
                build = _model_build_of(plain_config(cell.config))
                changed = stale_reason(existing, version, build)
                if not changed:
                    skipped.append(cell.cell_id)
                    continue
                # Its score measured another task or model: a table that kept it would mix them,
                # so it runs again as a new attempt, the old one kept in the store.
                stale.append(f"{cell.cell_id} ({changed})")
            todo.append((cell, 1, None))
            if existing is None:
                self.recorder.upsert_cell(self._record(cell, "pending", 0))
            else:  # its last attempt keeps its records and summary until the next one starts
                self.recorder.set_cell_status(cell.cell_id, "pending", {})
        if skipped:
            self.board.note(
                f"{len(skipped)} cell(s) already completed, skipped: {', '.join(skipped)}"
            )
        if stale:
            self.board.note(
                f"{len(stale)} completed cell(s) ran an older task version or model build and run "
                f"again (their earlier attempt stays in the record store): {', '.join(stale)}"
            )
        active: list[_Attempt] = []
        limit = self.cfg.scheduler.max_concurrent_cells
        with self.board:
            try:
                while todo or active:
                    if todo and self._spend_cap_reached():
                        self._cancel_unstarted(todo)
                    while todo and len(active) < limit:
                        cell, tries, resume = todo.popleft()
                        active.append(self._place(cell, tries, resume))
                    for finished in self._step(active):
                        active.remove(finished)
                        retry, resume = self._finish(finished)
                        if retry:
                            todo.append((finished.cell, finished.tries + 1, resume))
                    self.board.refresh(self.recorder.list_cells(self.plan.sweep_id))
                    if time.monotonic() - self._stats_saved > _STATS_EVERY_S:
                        self.save_grader_stats()
            except KeyboardInterrupt:
                self.board.note(
                    "interrupted: cancelling running cells (run the same command again to resume)"
                )
                self._cancel(active, list(todo))
                raise
            finally:
                self.save_grader_stats()
                self.write_results()
        cells = self.recorder.list_cells(self.plan.sweep_id)
        return {
            c.cell_id: c.status for c in cells if c.cell_id in {p.cell_id for p in self.plan.cells}
        }

    def _spend_cap_reached(self) -> bool:
        """Whether the sweep's driver spend has reached ``budget.sweep_max_cost_usd``."""
        cap = self.cfg.budget.sweep_max_cost_usd
        if cap is None:
            return False
        spent = sum(c.cost_usd or 0.0 for c in self.recorder.list_cells(self.plan.sweep_id))
        if spent < cap:
            return False
        self.board.note(
            f"the sweep's driver spend is ${spent:.2f}, at its cap budget.sweep_max_cost_usd="
            f"{cap:g}: no new cell starts (raise the cap and run the same command to go on)"
        )
        return True

    def _cancel_unstarted(self, todo: deque[tuple[CellSpec, int, ResumeFrom | None]]) -> None:
        """Mark the cells not yet started cancelled (a later run with a higher cap resumes them)."""
        while todo:
            cell, _, _ = todo.popleft()
            self.recorder.set_cell_status(
                cell.cell_id,
                "cancelled",
                {"error": "not started: the sweep reached budget.sweep_max_cost_usd"},
            )

    def save_grader_stats(self) -> None:
        """Save the grader pool's busy fractions of this run as a sweep-level stat (for the report).

        Never raises: a measurement must not fail the sweep."""
        self._stats_saved = time.monotonic()
        try:
            summary = ray.get(self.pool.busy_summary.remote(), timeout=30)
            self.recorder.put_sweep_stat(self.plan.sweep_id, self.run_id, "grader_pool", summary)
        except (RayError, GetTimeoutError) as error:
            logger.warning("grader pool busy fractions not saved: %s", error)

    def write_results(self) -> None:
        """(Re)write ``results.csv`` from the record store."""
        self.recorder.write_results(self.plan.sweep_id, str(self.plan.sweep_dir / "results.csv"))

    def cells(self) -> list[CellRecord]:
        """The records of this sweep's cells."""
        return list(self.recorder.list_cells(self.plan.sweep_id))

    def _record(self, cell: CellSpec, status: str, attempts: int) -> CellRecord:
        # A composed dict or a typed config: stored as plain JSON.
        config = plain_config(cell.config)
        return CellRecord(
            sweep_id=cell.sweep_id,
            cell_id=cell.cell_id,
            agent=cell.agent,
            driver=cell.driver,
            task=cell.task,
            task_version=get_task(cell.task).version,
            model=cell.model,
            seed=cell.seed,
            budget_s=cell.budget_s,
            status=status,
            attempts=attempts,
            config_json=json.dumps(config, sort_keys=True),
            task_source=config["task"]["source"],
            autorl_version=autorl_version(),
            model_build=_model_build_of(config),
        )

    def _place(self, cell: CellSpec, tries: int, resume: ResumeFrom | None = None) -> _Attempt:
        existing = self.recorder.get_cell(cell.cell_id)
        if resume is not None and existing is not None:
            # A resume goes on in the attempt whose node was lost: one story in the records.
            number = existing.attempts
            name = f"{cell.sweep_id}/{cell.cell_id}/{number}/resume{resume.seq}"
        else:
            # Numbered across invocations; the store keeps every earlier attempt's records under
            # its number.
            number = (existing.attempts if existing is not None else 0) + 1
            number = self.recorder.start_attempt(self._record(cell, "pending", number))
            name = f"{cell.sweep_id}/{cell.cell_id}/{number}"
        pg = placement_group([_bundle(cell)], name=name)
        return _Attempt(cell, number, tries, pg, time.time(), ready_ref=pg.ready(), resume=resume)

    def _step(self, active: list[_Attempt]) -> list[_Attempt]:
        """Wait up to a second for progress; returns the attempts whose run ended."""
        refs = [a.run_ref if a.run_ref is not None else a.ready_ref for a in active]
        if not refs:
            return []
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=1.0)
        finished = []
        timeout = self.cfg.scheduler.placement_timeout_s
        if any(a.run_ref is not None and a.run_ref not in done for a in active):
            # Waiting behind running cells is normal queueing: only a wait while nothing of this
            # sweep runs (so nothing will free resources) counts towards the placement timeout.
            now = time.time()
            for waiting in (a for a in active if a.run_ref is None):
                waiting.placed_at = now
        for attempt in active:
            waited = time.time() - attempt.placed_at
            if (
                attempt.run_ref is None
                and not attempt.told
                and waited > min(_TELL_UNPLACED_AFTER_S, timeout / 2)
            ):
                attempt.told = True
                self.board.note(_unplaced_note(attempt.cell, waited, timeout))
            if attempt.run_ref is None and attempt.ready_ref in done:
                self._start(attempt)
            elif (attempt.run_ref is None and time.time() - attempt.placed_at > timeout) or (
                attempt.run_ref is not None and attempt.run_ref in done
            ):
                finished.append(attempt)  # its placement timed out, or its run ended
        return finished

    def _start(self, attempt: _Attempt) -> None:
        cell = attempt.cell
        options: dict[str, Any] = {
            "num_cpus": cell.config.cell.cpus,
            "max_concurrency": 4,  # run() plus cancel() calls
            "scheduling_strategy": PlacementGroupSchedulingStrategy(placement_group=attempt.pg),
        }
        if cell.config.cell.gpus:
            options["num_gpus"] = cell.config.cell.gpus
        cell_dir = self.plan.sweep_dir / "cells" / cell.cell_id
        attempt.actor = (
            ray.remote(Workspace)
            .options(**options)
            .remote(cell, str(cell_dir), self.recorder, self.pool, attempt.resume, self.home_node)
        )
        attempt.run_ref = attempt.actor.run.remote()
        attempt.node_id = _node_of(attempt.pg)
        resume = attempt.resume
        if resume is None:
            self.recorder.set_cell_status(cell.cell_id, "running", {"started_at": time.time()})
        else:
            self.recorder.set_cell_status(cell.cell_id, "running", {})
            interrupted = self.recorder.record_resume(
                resume.event(cell.cell_id, attempt.attempt, attempt.node_id),
                f"interrupted: node {resume.from_node} was lost while this was being scored",
            )
            self.board.note(
                f"cell {cell.cell_id} resumes on node {attempt.node_id} from checkpoint "
                f"{resume.checkpoint_id} ({resume.time_used_s:.0f} s used, {resume.lost_s:.0f} s "
                f"lost{'; interrupted submissions ' + str(interrupted) if interrupted else ''})"
            )
        self.recorder.set_attempt(
            cell.cell_id, attempt.attempt, "running", {"node_id": attempt.node_id}
        )

    def _finish(self, attempt: _Attempt) -> tuple[bool, ResumeFrom | None]:
        """Record how an attempt ended; returns whether the cell runs again, and from which
        checkpoint (None: from nothing, as a new attempt)."""
        cell = attempt.cell
        try:
            if attempt.run_ref is None:
                raise TimeoutError(
                    f"resources {_bundle(cell)} for cell {cell.cell_id} did not become available "
                    "within "
                    f"{self.cfg.scheduler.placement_timeout_s:g} s while no other cell was "
                    "running: the cluster "
                    "cannot hold this bundle next to the grader and env pools; lower "
                    "cell.cpus/cell.gpus or add nodes"
                )
            outcome: CellOutcome = ray.get(attempt.run_ref)
            now = time.time()
            self.recorder.complete_cell(cell.cell_id, outcome, now)
            self.recorder.set_attempt(
                cell.cell_id, attempt.attempt, "completed", {"finished_at": now}
            )
            return False, None
        except (RayError, TimeoutError) as error:
            retries = self.cfg.scheduler.max_retries
            logger.warning("cell %s attempt %d failed: %s", cell.cell_id, attempt.attempt, error)
            message = (
                str(error).strip().splitlines()[-1][:500]
                if str(error).strip()
                else type(error).__name__
            )
            status = "pending" if attempt.tries <= retries else "failed"
            now = time.time()
            resume = self._resume_of(attempt, error, message, now) if status == "pending" else None
            if resume is not None:
                self.recorder.set_cell_status(cell.cell_id, "pending", {"error": message})
                return True, resume
            ended = {"error": message, "finished_at": now}
            self.recorder.set_attempt(cell.cell_id, attempt.attempt, "failed", ended)
            self.recorder.set_cell_status(cell.cell_id, status, ended)
            return status == "pending", None
        finally:
            if attempt.actor is not None:
                ray.kill(attempt.actor)
            remove_placement_group(attempt.pg)

    def _resume_of(
        self, attempt: _Attempt, error: Exception, message: str, seen_at: float
    ) -> ResumeFrom | None:
        """The checkpoint a cell whose host died goes on from (``cell.on_node_loss=resume``);
        None: it starts again from nothing (a restart, an error of the cell's own run, or no
        usable checkpoint)."""
        cell = attempt.cell
        if cell.config.cell.on_node_loss != NodeLoss.resume or not isinstance(error, HOST_LOST):
            return None
        resume = plan_resume(
            self.recorder.list_checkpoints(cell.cell_id),
            seen_at=seen_at,
            seq=len(self.recorder.list_resumes(cell.cell_id)) + 1,
            home_node=self.home_node,
            from_node=attempt.node_id,
            reason=message,
        )
        if resume is None:
            self.board.note(f"cell {cell.cell_id} lost its node with no checkpoint: it restarts")
        return resume

    def _cancel(
        self, active: list[_Attempt], queued: list[tuple[CellSpec, int, ResumeFrom | None]]
    ) -> None:
        for attempt in active:
            if attempt.actor is not None:
                attempt.actor.cancel.remote()
        for attempt in active:
            status = "cancelled"
            if attempt.run_ref is not None:
                with contextlib.suppress(RayError, GetTimeoutError):
                    ray.get(attempt.run_ref, timeout=_CANCEL_WAIT_S)
                ray.kill(attempt.actor)
            remove_placement_group(attempt.pg)
            now = time.time()
            self.recorder.set_attempt(
                attempt.cell.cell_id, attempt.attempt, status, {"finished_at": now}
            )
            self.recorder.set_cell_status(attempt.cell.cell_id, status, {"finished_at": now})
        for cell, _, _ in queued:
            self.recorder.set_cell_status(cell.cell_id, "cancelled", {})


def _node_of(pg: PlacementGroup) -> str | None:
    """The node that holds the placement group's (single) bundle, once placed."""
    try:
        node: str | None = placement_group_table(pg).get("bundles_to_node_id", {}).get(0)
    except (RayError, KeyError, AttributeError) as error:
        logger.info("node of placement group %s unknown: %s", pg.id, error)
        return None
    return node


def _wait_for_old_services(names: tuple[str, ...]) -> None:
    """Wait until the named actors of an earlier process of this sweep are gone.

    A sweep process killed with SIGKILL leaves its Recorder and GraderPool to Ray, which removes
    them once it notices the driver died; a rerun must not start its own next to them (two writers
    of one record store). A live sweep process with the same sweep id on this cluster never lets
    them go: then this raises.

    Raises:
        PrerequisiteError: they are still there after a minute.
    """
    deadline = time.monotonic() + _OLD_SERVICES_WAIT_S
    for name in names:
        while True:
            try:
                ray.get_actor(name)
            except ValueError:
                break  # no such actor (any more)
            if time.monotonic() > deadline:
                raise PrerequisiteError(
                    f"the actor {name!r} of this sweep's namespace is still alive after "
                    f"{_OLD_SERVICES_WAIT_S:.0f} s: "
                    "another process runs this sweep on this cluster. Wait for it (or stop it), or "
                    "pick another sweep_id."
                )
            time.sleep(0.5)


def run_sweep(plan: SweepPlan) -> tuple[dict[str, str], list[CellRecord]]:
    """Connect to Ray, run the sweep and return (final status per cell, the sweep's records)."""
    plan.sweep_dir.mkdir(parents=True, exist_ok=True)
    cluster = plan.base_config.cluster
    dashboard = connect(cluster, f"{cluster.namespace_prefix}-{plan.sweep_id}")
    try:
        check_gpus_fit(plan.base_config, plan.cells)  # a bundle bigger than any node never places
        if cluster.address:  # a joined cluster: its nodes were not checked with this one
            check_nodes_sealable(plan.base_config, plan.cells)
        runner = SweepRunner(plan)
        if dashboard:
            runner.board.note(f"Ray dashboard: {dashboard}")
        runner.board.note(f"watch it live: {view_command(plan.sweep_dir)}")
        statuses = runner.run()
        recorder = runner.recorder

        def finish_wandb(timeout_s: float) -> bool:
            return recorder.finish_sweep(plan.sweep_id, timeout_s)

        finish_sweep(
            finish_wandb,
            plan.sweep_id,
            plan.sweep_dir,
            plan.base_config.tracking,
            runner.board.note,
        )
        return statuses, runner.cells()
    finally:
        ray.shutdown()


def _model_build_of(config: dict[str, Any]) -> str:
    """The model build a cell's plain config names (:func:`autorl.models.resolve.model_build`)."""
    return model_build(config["model"]["kind"], config["model"]["hub_id"])


def stale_reason(existing: CellRecord, task_version: int, build: str) -> str | None:
    """Why a completed cell's score no longer measures the cell as planned now (None: it does).

    A cell from a store that recorded no model build (``model_build`` None) counts as the same
    build.

    >>> done = CellRecord("s", "c", "scripted", "none", "gsm8k", 3, "small", 0, 60.0, "completed",
    ...                   model_build="small-b2")
    >>> stale_reason(done, 3, "small-b2") is None
    True
    >>> stale_reason(done, 3, "small-b3")
    'model small-b2 -> small-b3'
    >>> stale_reason(done, 4, "small-b2")
    'task v3 -> v4'
    """
    if existing.task_version != task_version:
        return f"task v{existing.task_version} -> v{task_version}"
    if existing.model_build is not None and existing.model_build != build:
        return f"model {existing.model_build} -> {build}"
    return None
