"""Workspace actor: one per cell. Builds the workspace, serves the grading API, runs the agent.

It runs inside the cell's placement-group bundle, so the CPUs/GPUs it reserved are the agent's.
Records go to the Recorder actor, scoring to the GraderPool; the cell folder on this node holds
only the workspace, the agent log and the code-revision repository.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from autorl.actors.env_pool import find_pool_client
from autorl.actors.model_source import this_node
from autorl.agents.base import LaunchContext, load_adapter
from autorl.agents.reprompt import continuation_prompt, should_resume
from autorl.agents.session import TRACE_FILE, DriverSession
from autorl.config import CellSpec, resolve_cache_dir
from autorl.envs.training import training_envs
from autorl.grading.api import GradingServer, create_app
from autorl.grading.heldout import check_dev_split, dev_target, score_on_test
from autorl.grading.model_checks import check_loadable_model, weights_hash
from autorl.grading.scoring import EvalTarget, ScoreOutcome, target_from_config
from autorl.grading.service import CellGradingContext, Scorer, SubmissionService
from autorl.grading.transfer import ModelPublisher, ModelRef
from autorl.integrity.cell_checks import run_cell_checks
from autorl.models.resolve import resolve_model
from autorl.records.types import CodeRevision, DriverCall, SubmissionRecord, TraceSummary
from autorl.seal.launch import CellSeal
from autorl.task_code import PLUGIN_PATH_ENV
from autorl.tasks import TaskSpec, build_task_data, get_task
from autorl.workspace.environment import CellEnvironment, disk_free_gb, toolchain_versions, visible_gpus
from autorl.workspace.layout import WorkspacePaths, build_workspace, copy_agent_code, write_instructions
from autorl.workspace.process import AgentExit, run_agent
from autorl.workspace.revisions import CodeRevisions
from autorl.workspace.run_meta import RunMeta

logger = logging.getLogger(__name__)
_REVISION_INTERVAL_S = 60.0
_DRAIN_TIMEOUT_S = 900.0


class _RecorderSink:
    """The cell's records to the Recorder actor: the sink of the submission service
    (:class:`autorl.grading.service.RecordSink`) and of the driver session
    (:class:`autorl.agents.session.SessionSink`)."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self._pending: list[Any] = []  # driver calls sent, not yet known to be stored
        self._lock = threading.Lock()

    def record_submission(self, record: SubmissionRecord) -> None:
        """Store a submission record (blocking until stored)."""
        ray.get(self.recorder.record_submission.remote(record))

    def record_trace(self, summary: TraceSummary) -> None:
        """Store the trace summary (blocking until stored)."""
        ray.get(self.recorder.record_trace.remote(summary))

    def record_driver_call(self, call: DriverCall) -> None:
        """Send a driver call without waiting (called on the gateway's thread)."""
        ref = self.recorder.record_driver_calls.remote([call])
        with self._lock:
            self._pending.append(ref)

    def flush(self) -> None:
        """Wait until every driver call sent so far is stored."""
        with self._lock:
            refs, self._pending = self._pending, []
        ray.get(refs)


def pool_scorer(pool: Any, target: EvalTarget, publisher: ModelPublisher, base: ModelRef) -> Scorer:
    """The cell's scorer: each submission snapshot goes to the GraderPool as a :class:`ModelRef`.

    ``base`` is the cell's base model, which a LoRA adapter is always applied to. The snapshot must
    outlive the call, since a grader on another node reads it from here while scoring; it does:
    :meth:`SubmissionService._score` deletes it only after the scorer returns.
    """

    def scorer(model_dir: Path, digest: str) -> tuple[ScoreOutcome, bool]:
        with publisher.submission(model_dir, digest) as ref:
            outcome, cached = ray.get(pool.score.remote(target, ref, digest, base_dir=base))
        return outcome, bool(cached)

    return scorer


class Workspace:
    """Threaded actor (``max_concurrency`` > 1) so that :meth:`cancel` runs while :meth:`run` does."""

    def __init__(self, cell: CellSpec, cell_dir: str, recorder: Any, grader_pool: Any) -> None:
        """Remember the cell; nothing is built until :meth:`run`."""
        self.cell = cell
        self.cell_dir = Path(cell_dir)
        self.recorder = recorder
        self.pool = grader_pool
        self.sink = _RecorderSink(recorder)
        self.cancelled = threading.Event()
        self.driver_usage: dict[str, Any] = {}
        self.resumes = 0  # continuation prompts given (agent.reprompt)

    def cancel(self) -> None:
        """Stop the agent (exit class ``killed``); :meth:`run` then finishes the cell."""
        self.cancelled.set()

    def run(self) -> dict[str, Any]:
        """Run the cell from workspace to final records; returns the cell's final fields."""
        cfg = self.cell.config
        started = time.time()
        cache_dir = resolve_cache_dir(cfg.cache_dir)
        self.cell_dir.mkdir(parents=True, exist_ok=True)

        spec = get_task(self.cell.task)
        target = target_from_config(cfg, spec.version)
        data = build_task_data(spec, target.source, cache_dir / "tasks", seed=target.seed, options=target.build_options)
        base_dir = resolve_model(cfg.model, cache_dir)
        base_hash = weights_hash(check_loadable_model(base_dir))
        # Graders may run on other nodes: they get refs to this node's folders (or copies under storage.root).
        publisher = ModelPublisher(this_node(), cfg.storage.root)
        base_ref = publisher.base(base_dir, base_hash)
        baseline = float(ray.get(self.pool.baseline.remote(target, base_ref, base_hash)))
        # The split the agent's scores come from (SPEC §2): the test split, or a dev split built with another seed.
        feedback = str(cfg.grading.feedback)
        feedback_target, feedback_baseline = target, baseline
        if feedback == "dev":
            feedback_target = dev_target(target)
            dev_data = build_task_data(spec, feedback_target.source, cache_dir / "tasks", seed=feedback_target.seed,
                                       options=feedback_target.build_options)
            check_dev_split(spec.id, target.source, data.private_dir, dev_data.private_dir)
            feedback_baseline = float(ray.get(self.pool.baseline.remote(feedback_target, base_ref, base_hash)))
        ray.get(
            self.recorder.set_cell_status.remote(
                self.cell.cell_id, "running",
                {"baseline": baseline, "task_source": target.source, "feedback": feedback,
                 "feedback_baseline": feedback_baseline},
            )
        )

        paths = build_workspace(
            self.cell_dir, public_dir=data.public_dir, description_md=spec.description_md,
            base_model_dir=base_dir, model_name=self.cell.model,
        )
        run_meta = RunMeta(paths.run_meta, self.cell.budget_s, self.cell_dir)
        # Sealed (sandbox.mode=bwrap): the agent runs in its own sandbox and cgroup, and reaches this
        # API and its gateway only through unix sockets forwarded into its network namespace.
        seal = CellSeal(cfg, self.cell.cell_id, self.cell_dir)
        environment = CellEnvironment(
            cpus=cfg.cell.cpus, memory_gb=cfg.cell.memory_gb, max_processes=cfg.cell.max_processes,
            disk_free_gb=disk_free_gb(paths.root), gpus=visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES")),
            toolchain=toolchain_versions(seal.python), sealed=seal.sealed, isolated_network=seal.isolated_network,
            budget_s=self.cell.budget_s,
        )
        write_instructions(paths, budget_s=self.cell.budget_s, baseline=feedback_baseline, model_name=self.cell.model,
                           eval_settings={"source": target.source, **target.eval_options}, environment=environment)
        history = self.cell_dir / "code_history.git"
        revisions = CodeRevisions(
            history, paths.code, self.cell.cell_id, self._record_revision, owner=seal.uid,
            contain=lambda command: seal.contain(command, read_only=[paths.root], writable=[history]),
        )

        ctx = CellGradingContext(
            self.cell.cell_id, paths.root, base_hash, feedback_baseline, cfg.grader.max_queued_per_cell,
            base_model_dir=base_dir, allow_substitution=cfg.integrity.allow_substitution, feedback=feedback,
        )
        service = SubmissionService(
            ctx, pool_scorer(self.pool, feedback_target, publisher, base_ref), self.sink, run_meta,
            self.cell_dir / "grader_copies", revisions.snapshot,
        )
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
            envs=training_envs(spec, target, data.public_dir, cache_dir, find_pool=find_pool_client),
        )
        server = GradingServer(app, sock=seal.bind("grading"))
        server.start()
        try:
            agent_exit = self._run_agent(
                spec, paths, base_dir, seal.agent_url("grading", server.url), token, run_meta, revisions, seal
            )
            service.drain(_DRAIN_TIMEOUT_S)
        finally:
            server.stop()
            service.close(timeout=_DRAIN_TIMEOUT_S)
            seal.close()
        if feedback == "dev":  # the agent has stopped: now its submissions get their test scores
            score_on_test(service, pool_scorer(self.pool, target, publisher, base_ref), baseline)
        revisions.snapshot("end of run")
        run_meta.update(end_time=time.time())
        # After the agent: it can no longer change what is scanned. This actor holds the private split.
        integrity = run_cell_checks(
            cfg.integrity, cell_id=self.cell.cell_id,
            # Most telling first, the byte caps apply in this order: code, log, trace, HOME, then the rest.
            scan_roots=[paths.code, self.cell_dir / "agent.log", self.cell_dir / TRACE_FILE, self.cell_dir / "home",
                        paths.root],
            private_dir=data.private_dir, public_dir=data.public_dir,
            also_public=[spec.description_md, spec.agent_dir], trace_path=self.cell_dir / TRACE_FILE,
            agent_log=self.cell_dir / "agent.log",
            revisions=lambda: ray.get(self.recorder.list_code_revisions.remote(self.cell.cell_id)),
            context={"task": self.cell.task, "base_model": cfg.model.hub_id or cfg.model.name},
            cache_dir=cache_dir,
        )
        duration = time.time() - started
        return {
            "exit_class": agent_exit.exit_class,
            "exit_code": agent_exit.exit_code,
            "limit_hit": agent_exit.limit_hit,
            "sandbox": seal.mode_label(),
            "resumes": self.resumes,
            "duration_s": duration,
            "working_time_s": max(0.0, agent_exit.duration_s - service.queue_wait_s()),
            "baseline": baseline,
            "feedback": feedback,
            "feedback_baseline": feedback_baseline,
            **integrity,
            **self.driver_usage,  # gateway-side tokens_in, tokens_out, cost_usd (agents with a driver)
        }

    def _run_agent(
        self, spec: TaskSpec, paths: WorkspacePaths, base_dir: Path, url: str, token: str, run_meta: RunMeta,
        revisions: CodeRevisions, seal: CellSeal,
    ) -> AgentExit:
        cfg = self.cell.config
        workspace = paths.root
        agent_code = copy_agent_code(spec, self.cell_dir / "agent_code")
        home = self.cell_dir / "home"
        home.mkdir(exist_ok=True)
        # Unsealed, the agent gets the node's environment minus Ray's own variables and the plugin path
        # (which leads to plugin task folders); sealed, only locale and time zone of it. Either way a
        # HOME of its own (no shared credentials or caches between cells) and the benchmark's variables.
        node_env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k != PLUGIN_PATH_ENV}
        env = seal.base_env(node_env, home) | {
            "HOME": str(home),
            "TASK": self.cell.task,
            "BASE_MODEL": self.cell.model,
            "WORKSPACE": str(workspace),
            "MODEL_PATH": str(paths.model),
            "DATA_PATH": str(paths.data),
            "OUTPUT_DIR": str(paths.output),
            "GRADING_SERVER_URL": url,
            "GRADING_TOKEN": token,
            "OMP_NUM_THREADS": str(max(1, int(cfg.cell.cpus))),
            # Idle OpenMP threads sleep instead of spinning: cells share a node's cores (Ray's CPUs are
            # counted, not pinned), and spinning threads took a neighbour's cycles (bench/omp_wait_policy.py).
            # The agent may set its own.
            "OMP_WAIT_POLICY": node_env.get("OMP_WAIT_POLICY", "PASSIVE"),
            "PYTHONUNBUFFERED": "1",
        }
        # The driver gateway (agents that need a driver) starts before the agent; provider keys
        # never reach the agent's environment, and its output stream is parsed into trace.jsonl.
        session = DriverSession(
            self.cell.cell_id, self.cell_dir, cfg.agent, cfg.driver, self.sink, cfg.grading_api.host, endpoints=seal
        )
        cgroup = None
        try:
            env = session.agent_env(env)
            adapter = load_adapter(cfg.agent)
            ctx = LaunchContext(
                workspace, cfg.agent, cfg.driver, env, self.cell_dir, self.cell.seed,
                task_agent_dir=agent_code, task_recipe=spec.entry_points.get("recipe"), python=seal.python,
                budget_s=self.cell.budget_s,
            )
            # The copy of the task's agent side and of agent_kit (copy_agent_code's folder).
            read_only = [agent_code.parent] if agent_code else []
            cgroup = seal.cgroup()
            session.follow(adapter)
            stop_periodic = threading.Event()

            def periodic() -> None:
                while not stop_periodic.wait(_REVISION_INTERVAL_S):
                    revisions.snapshot("periodic")

            def launch(ctx: LaunchContext, budget_s: float, on_start: Callable[[], None] | None) -> AgentExit:
                started = adapter.launch(ctx)
                seal.hand_over(home)  # after the adapter wrote its config files into HOME
                command = seal.wrap(started.command, workspace=workspace, home=home, base_model=base_dir,
                                    read_only=[*started.read_only, *read_only])
                return run_agent(
                    command, cwd=workspace, env=started.env, log_path=self.cell_dir / "agent.log", budget_s=budget_s,
                    grace_s=cfg.budget.kill_grace_s, cancel=self.cancelled, on_start=on_start, cgroup=cgroup,
                    max_log_bytes=int(cfg.cell.max_log_mb * (1 << 20)),
                )

            ticker = threading.Thread(target=periodic, name="code-revisions", daemon=True)
            ticker.start()
            seal.hand_over(workspace)  # once: on a resume the workspace is already the agent's
            try:
                first_start = time.monotonic()
                deadline = first_start + self.cell.budget_s
                agent_exit = launch(ctx, self.cell.budget_s, lambda: run_meta.update(start_time=time.time()))
                # agent.reprompt: an agent that ended by itself with time left is resumed in the same
                # workspace, told how much time remains (off by default; it changes what is measured).
                while should_resume(agent_exit.exit_class, remaining := deadline - time.monotonic(),
                                    cfg.agent.reprompt, self.resumes):
                    prompt = continuation_prompt(remaining, self.cell.budget_s, self.resumes)
                    self.resumes += 1
                    with open(self.cell_dir / "agent.log", "a") as log:
                        log.write(f"\n[autorl] resume {self.resumes}: the agent exited ({agent_exit.exit_code}) "
                                  f"with {remaining:.0f} s left; continuing with prompt.resume{self.resumes}.md\n")
                    ctx = dataclasses.replace(ctx, continuation_prompt=prompt, resume_index=self.resumes)
                    agent_exit = launch(ctx, remaining, None)
                return dataclasses.replace(agent_exit, duration_s=time.monotonic() - first_start)
            finally:
                stop_periodic.set()
        finally:
            if cgroup is not None:
                cgroup.remove()
            self.driver_usage = session.close()

    def _record_revision(self, revision: CodeRevision) -> None:
        ray.get(self.recorder.add_code_revision.remote(revision))
