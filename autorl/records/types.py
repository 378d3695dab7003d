"""The record types of the store: cells, submissions, code revisions, driver calls, traces.

Frozen dataclasses that travel between actors (the Recorder is their single writer) and the
statuses they may take. Standard library only.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

CELL_STATUSES = ("pending", "running", "completed", "failed", "cancelled")
FINAL_STATUSES = ("completed", "failed", "cancelled")
# An attempt that never ended (the sweep process was killed while it ran) is "interrupted" once the
# next attempt of its cell starts.
ATTEMPT_STATUSES = (*CELL_STATUSES, "interrupted")
# interrupted: it was being scored on a node that was lost (the cell resumed elsewhere).
SUBMISSION_STATUSES = (
    "queued",
    "scoring",
    "scored",
    "invalid",
    "duplicate",
    "copy_of_base",
    "interrupted",
)
VALID_SUBMISSION_STATUSES = ("scored", "duplicate", "copy_of_base")

RESULTS_COLUMNS: tuple[str, ...] = (
    "sweep_id",
    "cell_id",
    "agent",
    "driver",
    "task",
    "task_version",
    "model",
    "seed",
    "budget_s",
    "status",
    "baseline",
    "best_score",
    "improvement",
    "submissions",
    "valid_submissions",
    "duration_s",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "task_source",
    "exit_class",
    "sandbox",
    "limit_hit",
    "resumes",
    "flagged_submissions",
    "weight_distance",
    "contamination",
    "integrity_flags",
    "working_time_s",
    "error",
    "feedback",
    "feedback_baseline",
    "best_feedback_score",
    "best_on_test",
    "node_resumes",
    "lost_s",
)


def _plain(value: Any) -> Any:
    """``value`` as JSON-ready data: dataclasses and mappings become dicts, sequences lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # Field by field rather than dataclasses.asdict, which deep-copies every leaf and leaves a
        # mapping that is not a dict (an OmegaConf DictConfig) unconverted.
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, PurePath):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(
        f"cannot store a {type(value).__name__} in a cell config ({value!r}); use JSON-like values"
    )


def plain_config(config: Any) -> dict[str, Any]:
    """A cell's composed config as plain, JSON-ready data.

    Accepts the config as a mapping (the composed dict) or as a dataclass instance (a typed
    config), including one nested in the other; enums become their values and paths strings.

    Raises:
        TypeError: ``config`` is neither, or holds a value JSON cannot represent.
    """
    plain = _plain(config)
    if not isinstance(plain, dict):
        raise TypeError(
            f"a cell config must be a mapping or a dataclass instance, not {type(config).__name__}"
        )
    return plain


def _check_status(status: str, valid: tuple[str, ...], what: str) -> None:
    if status not in valid:
        raise ValueError(f"invalid {what} status {status!r}; valid statuses: {', '.join(valid)}")


@dataclass(frozen=True)
class CellRecord:
    """One cell of a sweep (one agent × driver × task × model × seed) and its outcome.

    Attributes:
        sweep_id: The sweep the cell belongs to.
        cell_id: Unique id of the cell; the natural key.
        agent: Agent name.
        driver: Driver (LLM) name.
        task: Task id.
        task_version: Task version from its manifest.
        model: Base model name.
        seed: Seed of this repetition.
        budget_s: Agent time budget in seconds.
        status: One of :data:`CELL_STATUSES`.
        baseline: Score of the unmodified base model, once known.
        best_score: Best valid submission score, once any.
        improvement: ``best_score - baseline`` when both exist.
        submissions: Number of submissions.
        valid_submissions: Number of submissions that produced a score.
        duration_s: Wall time of the agent run.
        tokens_in: Driver input tokens.
        tokens_out: Driver output tokens.
        cost_usd: Driver cost.
        exit_class: ``exited``, ``timeout``, ``killed``, ``crashed`` or ``memory`` (see
            :class:`autorl.workspace.process.AgentExit`).
        exit_code: The agent process's exit code, when it exited.
        working_time_s: Wall time minus the time submissions waited in the grader queue.
        task_source: Where the task data came from (e.g. hub or fixture).
        error: Infrastructure error message, if any.
        attempts: The cell's current (after the sweep: final) attempt number; 0 until it is first
            placed. Records are filed under it, and only its records count (:class:`CellAttempt`).
        config_json: The cell's resolved configuration as JSON.
        started_at: Unix time the cell started.
        finished_at: Unix time the cell reached a final status.
        autorl_version: The autorl that registered this attempt of the cell (see
            :func:`autorl.records.migrations.autorl_version`); None for cells of stores from
            before schema version 3.
        sandbox: How the agent was sealed: ``bwrap``, ``bwrap+host-network`` or ``none``
            (:meth:`autorl.seal.launch.CellSeal.mode_label`); None for cells from before version 4.
        limit_hit: ``memory`` or ``pids`` when the cell's cgroup hit that limit, else None.
        resumes: How often the agent was resumed with a continuation prompt (``agent.reprompt``).
        model_build: The build of the base model the cell ran on (:func:`autorl.models.resolve.
            model_build`); a completed cell recorded on another build runs again on resume. None
            where a store from before schema version 8 held no config to tell it from.
        flagged_submissions: Submissions carrying an integrity flag (they count only with
            ``integrity.allow_substitution``).
        weight_distance: The best submission's relative weight distance to the base (0: a copy).
        contamination: Fraction (0-1) of eval items with an n-gram (absent from the public training
            split) found in the agent's files; None when not checked (from before version 5, or
            off).
        integrity_flags: Cell-level integrity flags, comma-separated (``contamination``,
            ``judge:<finding>``); None when there are none.
        integrity_json: The integrity checks' details: ``{"contamination": ..., "judge": ...}``.
        feedback: The split the agent's scores came from (``grading.feedback``): ``test`` or
            ``dev``; None for cells from before version 7 (they all ran with test feedback).
        feedback_baseline: The base model's score on the feedback split (what the agent was told);
            equal to ``baseline`` with test feedback.
        best_feedback_score: The selected (best) submission's feedback score; ``best_score`` is its
            test score (docs/design.md#the-grading-api).
        best_on_test: The highest test score of any counting submission; ``best_on_test -
            best_score`` is the selection bias that test feedback would have had (0 with test
            feedback).
        node_resumes: How often the cell lost its node and resumed elsewhere from a checkpoint.
        lost_s: Wall time those losses cost (from each checkpoint to the loss being seen).
    """

    sweep_id: str
    cell_id: str
    agent: str
    driver: str
    task: str
    task_version: int
    model: str
    seed: int
    budget_s: float
    status: str
    baseline: float | None = None
    best_score: float | None = None
    improvement: float | None = None
    submissions: int = 0
    valid_submissions: int = 0
    duration_s: float | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    exit_class: str | None = None
    exit_code: int | None = None
    working_time_s: float | None = None
    task_source: str | None = None
    error: str | None = None
    attempts: int = 0
    config_json: str = "{}"
    started_at: float | None = None
    finished_at: float | None = None
    # Fields added by a schema migration need a default: a store opened read-only at an older
    # version has no column for them.
    autorl_version: str | None = None
    sandbox: str | None = None
    limit_hit: str | None = None
    resumes: int = 0
    flagged_submissions: int = 0
    weight_distance: float | None = None
    contamination: float | None = None
    integrity_flags: str | None = None
    integrity_json: str = "{}"
    feedback: str | None = None
    feedback_baseline: float | None = None
    best_feedback_score: float | None = None
    best_on_test: float | None = None
    model_build: str | None = None
    node_resumes: int = 0
    lost_s: float = 0.0

    def __post_init__(self) -> None:
        _check_status(self.status, CELL_STATUSES, "cell")


@dataclass(frozen=True)
class SubmissionRecord:
    """One model the agent submitted for grading.

    Attributes:
        cell_id: The cell that submitted it.
        submission_id: 1-based index within the cell; with ``cell_id`` the natural key.
        model_path: Path of the submitted model.
        status: One of :data:`SUBMISSION_STATUSES`.
        weights_hash: Content hash of the weights, once computed.
        score: Grader score on the feedback split (``grading.feedback``), when scored: the score the
            agent saw.
        baseline_score: The baseline it is compared against (the base model on the feedback split).
        improvement: ``score - baseline_score`` when both exist.
        error: Why it could not be scored, if it could not.
        details_json: Grader details as JSON.
        code_revision: The code revision snapshotted at submission time.
        submitted_at: Unix time of the submission.
        started_at: Unix time scoring started.
        finished_at: Unix time scoring finished.
        queue_wait_s: Time spent waiting in the grader queue.
        flags: Integrity flags, comma-separated (``model_mismatch``: another architecture or
            vocabulary than the base); a flagged submission counts only with
            ``integrity.allow_substitution`` (docs/design.md#the-grading-api). None when unflagged.
        weight_distance: Relative distance of the scored weights to the base model's,
            ``||W - W_base|| / ||W_base||`` over the base's tensors (0: a copy); None when not
            comparable.
        attempt: The attempt of the cell that submitted it (with ``cell_id`` and ``submission_id``
            the natural key). None when written: the store files it under the cell's current attempt
            (the Recorder never needs to know it); None when read from a store older than version 6.
        test_score: Its score on the test split (the same as ``score`` with test feedback; with dev
            feedback set after the cell ends, never shown to the agent). None until scored there.
    """

    cell_id: str
    submission_id: int
    model_path: str
    status: str
    weights_hash: str | None = None
    score: float | None = None
    baseline_score: float | None = None
    improvement: float | None = None
    error: str | None = None
    details_json: str = "{}"
    code_revision: str | None = None
    submitted_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    queue_wait_s: float | None = None
    flags: str | None = None
    weight_distance: float | None = None
    attempt: int | None = None
    test_score: float | None = None

    def __post_init__(self) -> None:
        _check_status(self.status, SUBMISSION_STATUSES, "submission")


@dataclass(frozen=True)
class CodeRevision:
    """A snapshot of the agent's ``code/`` directory.

    Attributes:
        cell_id: The cell whose code it is.
        revision: Content address (or commit id) of the snapshot; with ``cell_id`` the natural key.
        created_at: Unix time of the snapshot.
        reason: Why it was taken (e.g. ``submission`` or ``periodic``).
        diff: Diff against the previous revision.
        files_changed: Number of files the diff touches.
        attempt: The cell's attempt that took it (see :attr:`SubmissionRecord.attempt`).
    """

    cell_id: str
    revision: str
    created_at: float
    reason: str
    diff: str
    files_changed: int
    attempt: int | None = None


@dataclass(frozen=True)
class DriverCall:
    """One call of a cell's agent to its driver LLM, as the driver gateway saw it.

    Attributes:
        cell_id: The cell whose agent made the call.
        call_id: Unique id of the call (from the gateway); with ``cell_id`` the natural key.
        started_at: Unix time the gateway received the call.
        latency_s: Time from receiving the call to the last byte of the response.
        protocol: ``chat``, ``responses``, ``messages`` or ``gemini`` (the route the agent used).
        requested_model: The model the agent asked for.
        model: The model the call was forwarded to.
        status_code: HTTP status returned to the agent.
        stream: Whether the response was streamed (SSE).
        attempts: Upstream attempts (retries on provider 429/5xx).
        tokens_in: Input tokens the provider reported (cached ones included), if any.
        tokens_out: Output tokens the provider reported, if any.
        cached_in: Cached input tokens, if reported.
        cost_usd: Cost from the driver's ``price_per_mtok``; None when the price is unknown.
        request_bytes: Size of the request body.
        response_bytes: Size of the response body sent to the agent.
        translated: 1 when LiteLLM translated the call to another protocol, else 0.
        error: What went wrong (provider error, budget exhausted, ...), if anything.
        attempt: The cell's attempt that made it (see :attr:`SubmissionRecord.attempt`).
    """

    cell_id: str
    call_id: str
    started_at: float
    latency_s: float
    protocol: str
    requested_model: str | None
    model: str
    status_code: int
    stream: int
    attempts: int
    tokens_in: int | None = None
    tokens_out: int | None = None
    cached_in: int | None = None
    cost_usd: float | None = None
    request_bytes: int = 0
    response_bytes: int = 0
    translated: int = 0
    error: str | None = None
    attempt: int | None = None


@dataclass(frozen=True)
class TraceSummary:
    """What the agent's own output stream said, parsed into ``cells/<cell_id>/trace.jsonl``.

    Attributes:
        cell_id: The cell; the natural key.
        agent: The agent whose stream format was parsed.
        events: Normalised trace events written.
        messages: Assistant messages.
        tool_calls: Tool calls.
        tokens_in: Input tokens the agent's stream reported (trace side; the gateway's count is
            on the cell).
        tokens_out: Output tokens the agent's stream reported.
        unparsed_lines: Output lines that were not events of the agent's format.
        path: Where the trace file is, on the node that ran the cell.
        attempt: The cell's attempt whose trace it is (see :attr:`SubmissionRecord.attempt`).
    """

    cell_id: str
    agent: str
    events: int
    messages: int
    tool_calls: int
    tokens_in: int
    tokens_out: int
    unparsed_lines: int
    path: str
    attempt: int | None = None


@dataclass(frozen=True)
class CellAttempt:
    """One attempt of a cell: the scheduler starts a cell again after an infrastructure failure
    (``scheduler.max_retries``), and a resumed sweep starts its unfinished cells again.

    Every attempt's submissions, code revisions, driver calls and trace stay in the store under
    its number; only the final attempt (the cell's ``attempts``) counts
    (docs/design.md#the-grading-api).

    Attributes:
        cell_id: The cell.
        attempt: 1-based number of the attempt; with ``cell_id`` the natural key.
        status: One of :data:`ATTEMPT_STATUSES`: how the attempt ended (``failed`` with its error
            when it was retried), or where it is while it runs.
        error: The infrastructure error that ended it, if any.
        node_id: The Ray node that ran its workspace, once placed.
        started_at: Unix time the attempt was registered.
        finished_at: Unix time it ended.
    """

    cell_id: str
    attempt: int
    status: str
    error: str | None = None
    node_id: str | None = None
    started_at: float | None = None
    finished_at: float | None = None

    def __post_init__(self) -> None:
        _check_status(self.status, ATTEMPT_STATUSES, "attempt")


@dataclass(frozen=True)
class SweepStat:
    """A sweep-level measurement of one sweep invocation, e.g. the grader pool's busy fractions.

    Attributes:
        sweep_id: The sweep.
        run: Which invocation of the sweep measured it (a resumed sweep is a second run), e.g. the
            UTC time it started.
        name: What it is (``grader_pool``); with ``sweep_id`` and ``run`` the natural key.
        value_json: The measurement as JSON (its shape belongs to ``name``).
        updated_at: Unix time it was last written (it is rewritten while the sweep runs).
    """

    sweep_id: str
    run: str
    name: str
    value_json: str
    updated_at: float


@dataclass(frozen=True)
class IntegrityOutcome:
    """What the integrity checks found in a finished cell (its :class:`CellRecord` fields).

    Attributes:
        contamination: See :attr:`CellRecord.contamination`.
        integrity_flags: See :attr:`CellRecord.integrity_flags`.
        integrity_json: See :attr:`CellRecord.integrity_json`.
    """

    contamination: float | None
    integrity_flags: str | None
    integrity_json: str

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> IntegrityOutcome:
        """From :func:`autorl.integrity.cell_checks.run_cell_checks`'s fields.

        Raises:
            KeyError: One of the three fields is missing.
        """
        return cls(fields["contamination"], fields["integrity_flags"], fields["integrity_json"])


@dataclass(frozen=True)
class DriverUsage:
    """A cell's driver usage as its gateway counted it (agents with a driver).

    Attributes:
        tokens_in: See :attr:`CellRecord.tokens_in`.
        tokens_out: See :attr:`CellRecord.tokens_out`.
        cost_usd: See :attr:`CellRecord.cost_usd`.
    """

    tokens_in: int
    tokens_out: int
    cost_usd: float


@dataclass(frozen=True)
class CellOutcome:
    """How a cell's run ended: what its Workspace actor hands the scheduler, and the Recorder stores
    on the cell's record when it completes (:meth:`fields`).

    Attributes:
        exit_class: See :attr:`CellRecord.exit_class`.
        exit_code: See :attr:`CellRecord.exit_code`.
        limit_hit: See :attr:`CellRecord.limit_hit`.
        sandbox: See :attr:`CellRecord.sandbox`.
        resumes: See :attr:`CellRecord.resumes`.
        duration_s: Wall time of the whole cell run, workspace to integrity checks.
        working_time_s: See :attr:`CellRecord.working_time_s`.
        baseline: See :attr:`CellRecord.baseline`.
        feedback: See :attr:`CellRecord.feedback`.
        feedback_baseline: See :attr:`CellRecord.feedback_baseline`.
        integrity: What the integrity checks found.
        driver_usage: The gateway's token and cost counts; None for agents without a driver, whose
            record keeps the sums of its (absent) driver calls.
    """

    exit_class: str
    exit_code: int | None
    limit_hit: str | None
    sandbox: str
    resumes: int
    duration_s: float
    working_time_s: float
    baseline: float
    feedback: str
    feedback_baseline: float
    integrity: IntegrityOutcome
    driver_usage: DriverUsage | None = None

    def fields(self) -> dict[str, Any]:
        """The :class:`CellRecord` fields this outcome sets (sub-records flattened)."""
        flat = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        flat.pop("integrity")
        flat.pop("driver_usage")
        flat |= dataclasses.asdict(self.integrity)
        if self.driver_usage is not None:
            flat |= dataclasses.asdict(self.driver_usage)
        return flat
