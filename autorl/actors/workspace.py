"""Workspace actor: one per cell. Builds the workspace, serves the grading API, runs the agent.

It runs inside the cell's placement-group bundle, so the CPUs/GPUs it reserved are the agent's.
Records go to the Recorder actor (through its typed client), scoring to the GraderPool; the cell
folder on this node holds only the workspace, the agent log and the code-revision repository.

A cell runs in three steps (docs/design.md#a-cells-life), each returning a dataclass that the next
takes: :meth:`Workspace.prepare` (task data, baselines, the workspace: :class:`PreparedCell`),
:meth:`Workspace.run_agent` (grading API and agent: :class:`AgentRun`) and
:meth:`Workspace.finish` (test scores, integrity checks: a
:class:`~autorl.records.types.CellOutcome`, which the scheduler hands the Recorder).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.actor import ActorHandle

from autorl.actors.cell_sinks import RecorderSink, pool_scorer
from autorl.actors.checkpoint_transfer import RAY_TRANSPORT
from autorl.actors.env_pool import find_pool_client
from autorl.actors.model_source import this_node
from autorl.actors.node_notices import this_node_drain_deadline as drain_deadline
from autorl.actors.recorder_client import RecorderClient
from autorl.agents.base import LaunchContext, load_adapter
from autorl.agents.reprompt import continuation_prompt, should_resume
from autorl.agents.session import TRACE_FILE, DriverSession
from autorl.config import resolve_cache_dir
from autorl.envs.training import training_envs
from autorl.grading.api import GradingServer, create_app
from autorl.grading.heldout import check_dev_split, dev_target, score_on_test
from autorl.grading.model_checks import check_loadable_model, weights_hash
from autorl.grading.scoring import EvalTarget, target_from_config
from autorl.grading.service import CellGradingContext, SubmissionService
from autorl.grading.transfer import ModelPublisher, ModelRef
from autorl.grid import CellSpec
from autorl.integrity.cell_checks import run_cell_checks
from autorl.models.resolve import resolve_model
from autorl.records.types import (
    CellOutcome,
    DriverUsage,
    IntegrityOutcome,
)
from autorl.seal.launch import CellSeal
from autorl.task_code import PLUGIN_PATH_ENV
from autorl.tasks import TaskData, TaskSpec, build_task_data, get_task
from autorl.workspace.checkpoint_restore import RestoreResult
from autorl.workspace.checkpointing import start_checkpoints
from autorl.workspace.environment import (
    CellEnvironment,
    disk_free_gb,
    toolchain_versions,
    visible_gpus,
)
from autorl.workspace.layout import (
    WorkspacePaths,
    agent_variables,
    build_workspace,
    copy_agent_code,
    write_instructions,
)
from autorl.workspace.process import AgentExit, run_agent
from autorl.workspace.resume import (
    ResumeFrom,
    checkpoint_roots,
    driver_budget_left,
    restore_workspace,
    resume_prompt,
)
from autorl.workspace.revisions import CodeRevisions
from autorl.workspace.run_meta import RunMeta
from autorl.workspace.termination import watch_termination

logger = logging.getLogger(__name__)
_DRAIN_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class PreparedCell:
    """What :meth:`Workspace.prepare` hands on: the task's data and scoring targets, the base model
    and its baselines, and the agent's workspace with its instructions written.

    Attributes:
        started: Unix time the cell's run started.
        cache_dir: The resolved ``cache_dir``.
        spec: The task.
        target: The test split the cell's result is scored on.
        feedback_target: The split the agent's submissions are scored on while it runs (``target``
            itself with ``grading.feedback=test``).
        data: The task's built data (the public and the private split).
        base_dir: The base model's folder on this node.
        base_hash: The base model's weights hash.
        publisher: Hands this node's model folders to graders on any node.
        base_ref: The base model as graders reach it.
        baseline: The base model's score on ``target``.
        feedback: ``grading.feedback``: ``test`` or ``dev``.
        feedback_baseline: The base model's score on ``feedback_target`` (what the agent is told).
        paths: The agent's workspace.
        run_meta: The budget facts the agent reads.
        seal: How the agent is launched (sealed or not); :meth:`Workspace.run_agent` closes it.
    """

    started: float
    cache_dir: Path
    spec: TaskSpec
    target: EvalTarget
    feedback_target: EvalTarget
    data: TaskData
    base_dir: Path
    base_hash: str
    publisher: ModelPublisher
    base_ref: ModelRef
    baseline: float
    feedback: str
    feedback_baseline: float
    paths: WorkspacePaths
    run_meta: RunMeta
    seal: CellSeal


@dataclass(frozen=True)
class AgentRun:
    """What :meth:`Workspace.run_agent` hands on: how the agent ended, once its grading API is down
    and every submission it made is scored.

    Attributes:
        agent_exit: How the agent's last process ended; ``duration_s`` spans every resume.
        service: The cell's submission service (closed; its records are stored).
        revisions: The cell's code revisions of ``code/``.
        sandbox: How the agent was sealed (:meth:`autorl.seal.launch.CellSeal.mode_label`).
    """

    agent_exit: AgentExit
    service: SubmissionService
    revisions: CodeRevisions
    sandbox: str


class Workspace:
    """One cell's run in three steps, :meth:`prepare` → :meth:`run_agent` → :meth:`finish`, each
    handing a typed result to the next; :meth:`run` runs them.

    A threaded actor (``max_concurrency`` > 1), so that :meth:`cancel` runs while :meth:`run` does.
    """

    def __init__(
        self,
        cell: CellSpec,
        cell_dir: str,
        recorder: RecorderClient | ActorHandle[Any],
        grader_pool: Any,
        resume: ResumeFrom | None = None,
        home_node: str | None = None,
    ) -> None:
        """Remember the cell; nothing is built until :meth:`run`.

        Args:
            resume: The checkpoint this placement goes on from, after the cell lost its node
                (:mod:`autorl.workspace.resume`); None: the cell starts from nothing.
            home_node: The sweep driver's node, where checkpoints go without ``storage.root``.
        """
        self.cell = cell
        self.cell_dir = Path(cell_dir)
        self.recorder = RecorderClient.of(recorder)
        self.pool = grader_pool
        self.sink = RecorderSink(self.recorder)
        self.cancelled = threading.Event()
        self.driver_usage: dict[str, Any] = {}
        self.resumes = 0  # continuation prompts given (agent.reprompt)
        self.resume = resume
        self.home_node = home_node
        self.restored: RestoreResult | None = None
        # The budget left to this placement: a resumed cell was charged its time up to the
        # checkpoint.
        self.time_used_before_s = resume.time_used_s if resume is not None else 0.0
        self.budget_s = max(0.0, cell.budget_s - self.time_used_before_s)

    def cancel(self) -> None:
        """Stop the agent (exit class ``killed``); :meth:`run` then finishes the cell."""
        self.cancelled.set()

    def run(self) -> CellOutcome:
        """Run the cell from workspace to final records; returns how it ended."""
        prepared = self.prepare()
        return self.finish(prepared, self.run_agent(prepared))

    def prepare(self) -> PreparedCell:
        """Build the task's data, score the base model, record the cell as running, and lay out the
        agent's workspace with its instructions."""
        cfg = self.cell.config
        started = time.time()
        cache_dir = resolve_cache_dir(cfg.cache_dir)
        self.cell_dir.mkdir(parents=True, exist_ok=True)

        spec = get_task(self.cell.task)
        target = target_from_config(cfg, spec.version)
        data = build_task_data(
            spec,
            target.source,
            cache_dir / "tasks",
            seed=target.seed,
            options=target.build_options,
        )
        base_dir = resolve_model(cfg.model, cache_dir)
        base_hash = weights_hash(check_loadable_model(base_dir))
        # Graders may run on other nodes: they get refs to this node's folders (or copies under
        # storage.root).
        publisher = ModelPublisher(this_node(), cfg.storage.root)
        base_ref = publisher.base(base_dir, base_hash)
        baseline = float(ray.get(self.pool.baseline.remote(target, base_ref, base_hash)))
        # The split the agent's scores come from (docs/design.md#the-grading-api): the test split,
        # or a dev split built with another seed.
        feedback = str(cfg.grading.feedback)
        feedback_target, feedback_baseline = target, baseline
        if feedback == "dev":
            feedback_target = dev_target(target)
            dev_data = build_task_data(
                spec,
                feedback_target.source,
                cache_dir / "tasks",
                seed=feedback_target.seed,
                options=feedback_target.build_options,
            )
            check_dev_split(spec.id, target.source, data.private_dir, dev_data.private_dir)
            feedback_baseline = float(
                ray.get(self.pool.baseline.remote(feedback_target, base_ref, base_hash))
            )
        self.recorder.set_cell_status(
            self.cell.cell_id,
            "running",
            {
                "baseline": baseline,
                "task_source": target.source,
                "feedback": feedback,
                "feedback_baseline": feedback_baseline,
            },
        )

        paths = build_workspace(
            self.cell_dir,
            public_dir=data.public_dir,
            description_md=spec.description_md,
            base_model_dir=base_dir,
            model_name=self.cell.model,
        )
        if self.resume is not None:
            roots = checkpoint_roots(paths, self.cell_dir / "home")
            self.restored = restore_workspace(
                self.resume, self.cell, self.cell_dir.parent.parent, roots, RAY_TRANSPORT
            )
        run_meta = RunMeta(paths.run_meta, self.budget_s, self.cell_dir)
        # Sealed (sandbox.mode=bwrap): the agent runs in its own sandbox and cgroup, and reaches
        # this API and its gateway only through unix sockets forwarded into its network namespace.
        seal = CellSeal(cfg, self.cell.cell_id, self.cell_dir)
        self._write_instructions(paths, seal, target, feedback_baseline)
        return PreparedCell(
            started=started,
            cache_dir=cache_dir,
            spec=spec,
            target=target,
            feedback_target=feedback_target,
            data=data,
            base_dir=base_dir,
            base_hash=base_hash,
            publisher=publisher,
            base_ref=base_ref,
            baseline=baseline,
            feedback=feedback,
            feedback_baseline=feedback_baseline,
            paths=paths,
            run_meta=run_meta,
            seal=seal,
        )

    def _write_instructions(
        self, paths: WorkspacePaths, seal: CellSeal, target: EvalTarget, baseline: float
    ) -> None:
        """Write ``instructions.md``: the budget, the baseline the agent is told and its machine."""
        cfg = self.cell.config
        environment = CellEnvironment(
            cpus=cfg.cell.cpus,
            memory_gb=cfg.cell.memory_gb,
            max_processes=cfg.cell.max_processes,
            disk_free_gb=disk_free_gb(paths.root),
            gpus=visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES")),
            toolchain=toolchain_versions(seal.python),
            sealed=seal.sealed,
            isolated_network=seal.isolated_network,
            budget_s=self.budget_s,
        )
        write_instructions(
            paths,
            budget_s=self.budget_s,
            baseline=baseline,
            model_name=self.cell.model,
            eval_settings={"source": target.source, **target.eval_options},
            environment=environment,
        )

    def run_agent(self, prepared: PreparedCell) -> AgentRun:
        """Serve the grading API, run the agent under its budget, then drain and close the
        submission service (every submission scored on the feedback split)."""
        cfg = self.cell.config
        paths, run_meta, seal = prepared.paths, prepared.run_meta, prepared.seal
        history = self.cell_dir / "code_history.git"
        revisions = CodeRevisions(
            history,
            paths.code,
            self.cell.cell_id,
            self.recorder.add_code_revision,
            owner=seal.uid,
            contain=lambda command: seal.contain(
                command, read_only=[paths.root], writable=[history]
            ),
        )
        ctx = CellGradingContext(
            self.cell.cell_id,
            paths.root,
            prepared.base_hash,
            prepared.feedback_baseline,
            cfg.grader.max_queued_per_cell,
            base_model_dir=prepared.base_dir,
            allow_substitution=cfg.integrity.allow_substitution,
            feedback=prepared.feedback,
        )
        scorer = pool_scorer(
            self.pool, prepared.feedback_target, prepared.publisher, prepared.base_ref
        )
        service = SubmissionService(
            ctx, scorer, self.sink, run_meta, self.cell_dir / "grader_copies", revisions.snapshot
        )
        if self.resume is not None:  # the lost node's submissions are this run's too
            service.carry(self.recorder.list_submissions(self.cell.cell_id))
        token = secrets.token_urlsafe(32)
        app = create_app(
            service,
            run_meta,
            token=token,
            task_id=self.cell.task,
            max_body_bytes=cfg.grading_api.max_body_bytes,
            submit_timeout_s=lambda: (run_meta.remaining() or 0.0) + _DRAIN_TIMEOUT_S,
            health_extra=lambda: {
                "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                "grader_queue": ray.get(self.pool.queue_depth.remote()),
            },
            envs=training_envs(
                prepared.spec,
                prepared.target,
                prepared.data.public_dir,
                prepared.cache_dir,
                find_pool=find_pool_client,
            ),
        )
        server = GradingServer(app, sock=seal.bind("grading"))
        server.start()
        try:
            agent_exit = self._launch(
                prepared, seal.agent_url("grading", server.url), token, revisions
            )
            service.drain(_DRAIN_TIMEOUT_S)
        finally:
            server.stop()
            service.close(timeout=_DRAIN_TIMEOUT_S)
            seal.close()
        return AgentRun(agent_exit, service, revisions, seal.mode_label())

    def finish(self, prepared: PreparedCell, ran: AgentRun) -> CellOutcome:
        """Score dev-feedback submissions on the test split, take the last code revision, run the
        integrity checks; returns the cell's outcome."""
        cfg = self.cell.config
        paths, data, spec = prepared.paths, prepared.data, prepared.spec
        if prepared.feedback == "dev":  # the agent has stopped: now its submissions get test scores
            test_scorer = pool_scorer(
                self.pool, prepared.target, prepared.publisher, prepared.base_ref
            )
            score_on_test(ran.service, test_scorer, prepared.baseline)
        ran.revisions.snapshot("end of run")
        prepared.run_meta.update(end_time=time.time())
        # After the agent: it can no longer change what is scanned. This actor holds the private
        # split.
        integrity = run_cell_checks(
            cfg.integrity,
            cell_id=self.cell.cell_id,
            # Most telling first, the byte caps apply in this order: code, log, trace, HOME, then
            # the rest.
            scan_roots=[
                paths.code,
                self.cell_dir / "agent.log",
                self.cell_dir / TRACE_FILE,
                self.cell_dir / "home",
                paths.root,
            ],
            private_dir=data.private_dir,
            public_dir=data.public_dir,
            also_public=[spec.description_md, spec.agent_dir],
            trace_path=self.cell_dir / TRACE_FILE,
            agent_log=self.cell_dir / "agent.log",
            revisions=lambda: self.recorder.list_code_revisions(self.cell.cell_id),
            context={"task": self.cell.task, "base_model": cfg.model.hub_id or cfg.model.name},
            cache_dir=prepared.cache_dir,
        )
        agent_exit = ran.agent_exit
        return CellOutcome(
            exit_class=agent_exit.exit_class,
            exit_code=agent_exit.exit_code,
            limit_hit=agent_exit.limit_hit,
            sandbox=ran.sandbox,
            resumes=self.resumes,
            duration_s=time.time() - prepared.started,
            working_time_s=max(
                0.0,
                self.time_used_before_s + agent_exit.duration_s - ran.service.queue_wait_s(),
            ),
            baseline=prepared.baseline,
            feedback=prepared.feedback,
            feedback_baseline=prepared.feedback_baseline,
            integrity=IntegrityOutcome.from_fields(integrity),
            # Gateway-side tokens_in, tokens_out, cost_usd (agents with a driver).
            # Resumed: every driver call its attempt recorded, the lost node's gateway's too.
            driver_usage=self.recorder.driver_usage(self.cell.cell_id)
            if self.resume is not None
            else (DriverUsage(**self.driver_usage) if self.driver_usage else None),
        )

    def _launch(
        self, prepared: PreparedCell, url: str, token: str, revisions: CodeRevisions
    ) -> AgentExit:
        """Start the agent (resuming it while ``agent.reprompt`` allows); returns how it ended."""
        cfg = self.cell.config
        spec, paths, base_dir = prepared.spec, prepared.paths, prepared.base_dir
        run_meta, seal = prepared.run_meta, prepared.seal
        workspace = paths.root
        agent_code = copy_agent_code(spec, self.cell_dir / "agent_code")
        home = self.cell_dir / "home"
        home.mkdir(exist_ok=True)
        env = self._agent_env(paths, seal, home, url, token)
        # The driver gateway (agents that need a driver) starts before the agent; provider keys
        # never reach the agent's environment, and its output stream is parsed into trace.jsonl.
        session = DriverSession(
            self.cell.cell_id,
            self.cell_dir,
            cfg.agent,
            # A resumed cell's gateway has what its budget left after the lost node's calls.
            driver_budget_left(cfg.driver, self.recorder.driver_usage(self.cell.cell_id))
            if self.resume is not None
            else cfg.driver,
            self.sink,
            cfg.grading_api.host,
            endpoints=seal,
            live=self.recorder,
            # A resumed cell's steps are numbered on after those the lost node sent.
            seq_offset=self.recorder.last_trace_seq(self.cell.cell_id) if self.resume else 0,
        )
        cgroup = None
        try:
            env = session.agent_env(env)
            adapter = load_adapter(cfg.agent)
            ctx = LaunchContext(
                workspace,
                cfg.agent,
                cfg.driver,
                env,
                self.cell_dir,
                self.cell.seed,
                task_agent_dir=agent_code,
                task_recipe=spec.entry_points.get("recipe"),
                python=seal.python,
                budget_s=self.budget_s,
            )
            # The copy of the task's agent side and of agent_kit (copy_agent_code's folder).
            read_only = [agent_code.parent] if agent_code else []
            cgroup = seal.cgroup()
            session.follow(adapter, cgroup)

            def launch(
                ctx: LaunchContext, budget_s: float, on_start: Callable[[], None] | None
            ) -> AgentExit:
                started = adapter.launch(ctx)
                seal.hand_over(home)  # after the adapter wrote its config files into HOME
                command = seal.wrap(
                    started.command,
                    workspace=workspace,
                    home=home,
                    base_model=base_dir,
                    read_only=[*started.read_only, *read_only],
                )
                return run_agent(
                    command,
                    cwd=workspace,
                    env=started.env,
                    log_path=self.cell_dir / "agent.log",
                    budget_s=budget_s,
                    grace_s=cfg.budget.kill_grace_s,
                    cancel=self.cancelled,
                    on_start=on_start,
                    cgroup=cgroup,
                    max_log_bytes=int(cfg.cell.max_log_mb * (1 << 20)),
                )

            stop_revisions = revisions.every()
            seal.hand_over(workspace)  # once: on a resume the workspace is already the agent's
            checkpoints = start_checkpoints(
                self.cell,
                self.cell_dir.parent.parent,
                checkpoint_roots(paths, home),
                self.recorder,
                cgroup,
                run_meta,
                home_node=self.home_node,
                time_used_before_s=self.time_used_before_s,
                transport=RAY_TRANSPORT,
            )
            # A drain or SIGTERM of this node: one last checkpoint before it goes.
            stop_notices = (
                watch_termination(lambda _: checkpoints.take(), drain_deadline=drain_deadline())
                if checkpoints is not None
                else None
            )
            try:
                return self._run_with_resumes(launch, ctx, run_meta)
            finally:
                stop_revisions()
                if stop_notices is not None and checkpoints is not None:
                    stop_notices()
                    checkpoints.stop()
        finally:
            if cgroup is not None:
                cgroup.remove()
            self.driver_usage = session.close()

    def _agent_env(
        self, paths: WorkspacePaths, seal: CellSeal, home: Path, url: str, token: str
    ) -> dict[str, str]:
        """The agent's environment, before the driver session adds its gateway's variables."""
        cfg = self.cell.config
        # Unsealed, the agent gets the node's environment minus Ray's own variables and the plugin
        # path (which leads to plugin task folders); sealed, only locale and time zone of it.
        # Either way a HOME of its own (no shared credentials or caches between cells) and the
        # benchmark's variables.
        node_env = {
            k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k != PLUGIN_PATH_ENV
        }
        return seal.base_env(node_env, home) | agent_variables(
            paths,
            home=home,
            task=self.cell.task,
            model=self.cell.model,
            cpus=cfg.cell.cpus,
            grading=(url, token),
            omp_wait_policy=node_env.get("OMP_WAIT_POLICY", "PASSIVE"),
        )

    def _run_with_resumes(
        self,
        launch: Callable[[LaunchContext, float, Callable[[], None] | None], AgentExit],
        ctx: LaunchContext,
        run_meta: RunMeta,
    ) -> AgentExit:
        """Launch the agent, then resume it while ``agent.reprompt`` allows; the exit's duration
        spans every launch."""
        cfg = self.cell.config
        first_start = time.monotonic()
        deadline = first_start + self.budget_s
        if self.resume is not None and self.restored is not None:
            # The CLI continues its restored session (its continue flag), told what happened.
            prompt = resume_prompt(self.resume, self.restored, self.budget_s)
            ctx = dataclasses.replace(ctx, continuation_prompt=prompt, resume_index=1)
        agent_exit = launch(ctx, self.budget_s, lambda: run_meta.update(start_time=time.time()))
        # agent.reprompt: an agent that ended by itself with time left is resumed in the same
        # workspace, told how much time remains (off by default; it changes what is measured).
        while should_resume(
            agent_exit.exit_class,
            remaining := deadline - time.monotonic(),
            cfg.agent.reprompt,
            self.resumes,
        ):
            prompt = continuation_prompt(remaining, self.cell.budget_s, self.resumes)
            self.resumes += 1
            index = ctx.resume_index + 1
            with open(self.cell_dir / "agent.log", "a") as log:
                log.write(
                    f"\n[autorl] resume {self.resumes}: the agent exited ({agent_exit.exit_code}) "
                    f"with {remaining:.0f} s left; continuing with prompt.resume{index}.md\n"
                )
            ctx = dataclasses.replace(ctx, continuation_prompt=prompt, resume_index=index)
            agent_exit = launch(ctx, remaining, None)
        return dataclasses.replace(agent_exit, duration_s=time.monotonic() - first_start)
