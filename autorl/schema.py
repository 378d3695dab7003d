"""The typed schema of one cell's config, registered with Hydra's ConfigStore.

``conf/config.yaml`` starts its defaults list with :class:`RunConfig` (stored as
``run_schema``), and every option of a config group starts its own with its group's schema
(``conf/agent/_cli_base.yaml``: ``defaults: [_cli, _base, _self_]``). Hydra then refuses, at
compose time, a key the schema does not declare and a value of the wrong type, whether it comes
from a YAML file or from the command line; :func:`autorl.config.compose` turns that refusal into a
:class:`autorl.errors.ConfigError` naming the key.

The schema holds types and help, the YAML files hold the values: a field without a value in
``conf/`` is an error (``MISSING``), except the few optional blocks whose absence means "off"
(``task.env_pool``, ``driver.price_per_mtok``). Closed choices are :class:`enum.StrEnum`
(OmegaConf has no ``Literal``); a member equals its string, so ``cfg.driver.provider == "none"``
holds and JSON writes the plain value.

A cell carries the converted object (``OmegaConf.to_object``): code reads attributes
(``cfg.grader.batch_size``) and never ``cfg.get("x", default)``.

Group schemas (``group/name`` in the ConfigStore; names starting with ``_`` are not options):

- ``agent/_scripted`` (:class:`ScriptedAgentConfig`), ``agent/_cli`` (:class:`CliAgentConfig`),
  ``agent/_command`` (:class:`CommandAgentConfig`), all in :mod:`autorl.agent_schema`
- ``driver/_schema`` (:class:`DriverConfig`; ``conf/driver/_base.yaml`` builds on it)
- ``model/_schema``, ``task/_schema``, ``cluster/_schema``, ``engine/_schema`` (each engine's file
  is composed into ``grader.engines.<name>``, not chosen by a group override)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from autorl.agent_schema import (
    AgentConfig,
    ApiProtocol,
    CliAgentConfig,
    CommandAgentConfig,
    ScriptedAgentConfig,
)
from autorl.cell_schema import CellResources as CellResources
from autorl.plan_schema import PlanConfig
from autorl.schema_fields import setting


class Provider(StrEnum):
    """Who serves a driver's model."""

    openai = "openai"
    anthropic = "anthropic"
    google = "google"
    openai_compatible = "openai_compatible"
    none = "none"


class ModelKind(StrEnum):
    """Where a base model comes from."""

    tiny = "tiny"
    small = "small"
    hub = "hub"


class WandbMode(StrEnum):
    """W&B's run mode."""

    online = "online"
    offline = "offline"
    disabled = "disabled"


class AuthMode(StrEnum):
    """Ray's client authentication when joining a cluster."""

    token = "token"
    disabled = "disabled"


# ---- drivers ------------------------------------------------------------------------------------


@dataclass
class PricePerMtok:
    """A model's list price in USD per million tokens."""

    input: float = setting("USD per million input tokens")
    output: float = setting("USD per million output tokens")


@dataclass
class DriverBudget:
    """A cell's driver budget; once exceeded the gateway answers 429 with the reason."""

    max_tokens: int | None = setting("input + output tokens; null: no limit")
    max_cost_usd: float | None = setting("USD; null: no limit")
    default_max_output_tokens: int = setting(
        "output tokens a call without its own maximum reserves of the budgets while it runs",
        default=32_000,
    )


@dataclass
class GatewayConfig:
    """How the cell's gateway calls the provider."""

    timeout_s: float = setting("one upstream call")
    max_attempts: int = setting(
        "attempts per call on provider 429/5xx and connection errors (at least 1)"
    )
    initial_backoff_s: float = setting("first retry delay; doubles on every further attempt")
    max_backoff_s: float = setting("longest retry delay (also caps a provider's Retry-After)")
    enforce_model: bool = setting("every call goes to `model`, whatever the agent asked for")


@dataclass
class DriverConfig:
    """A driver LLM (``conf/driver/<name>.yaml``; shared fields in ``conf/driver/_base.yaml``).

    Also names the judges of judged tasks and the report's summariser
    (:func:`autorl.config.load_driver_config`).
    """

    name: str = setting("the option's name; equals the file name")
    description: str = setting("one line for `python -m autorl.ls drivers`")
    provider: Provider = setting("who serves the model")
    model: str | None = setting("the provider's model id (null only for driver=none)")
    base_url: str | None = setting("the provider's API root (null only for driver=none)")
    api_key_env: str | None = setting(
        "environment variable holding the API key (never the key); null: keyless"
    )
    protocols: dict[ApiProtocol, str] = setting(
        "protocol -> base URL the provider serves natively; others are translated"
    )
    price_per_mtok: PricePerMtok | None = setting(
        "list price; null: unknown, cost stays empty", default=None
    )
    budget: DriverBudget = setting("per-cell limits")
    in_grid: bool = setting(
        "false: `driver=all` leaves it out (no LLM, or an endpoint the user sets up); it runs only "
        "when named",
        default=True,
    )
    gateway: GatewayConfig = setting("upstream calls: timeout, retries, model enforcement")

    def chat_root(self) -> str | None:
        """The root of the driver's OpenAI chat completions route (``protocols.chat``), if it has
        one.
        """
        chat = self.protocols.get(ApiProtocol.chat)
        return chat.rstrip("/") if chat else None


# ---- models, tasks, cluster ---------------------------------------------------------------------


@dataclass
class ModelConfig:
    """A base model (``conf/model/<name>.yaml``)."""

    name: str = setting("the option's name; equals the file name")
    description: str = setting("one line for `python -m autorl.ls models`")
    kind: ModelKind = setting(
        "tiny, small: built offline (autorl/models/); hub: downloaded from the Hugging Face hub"
    )
    hub_id: str | None = setting("the hub repository (kind=hub)")


@dataclass
class EnvPoolConfig:
    """The sweep's pool of environment actors for an interactive task (``envpool:<kind>``)."""

    actors: int = setting("Ray actors, each hosting up to envs_per_actor live episodes")
    envs_per_actor: int = setting("live episodes per actor")
    cpus_per_actor: float = setting("CPUs declared to Ray per actor")
    memory_mb_per_actor: int = setting("memory declared to Ray per actor, in MB")
    max_replays: int = setting("an episode is replayed on a replacement actor at most this often")


@dataclass
class TaskConfig:
    """A task's run knobs, composed from its folder ``tasks/<id>/`` (``task.yaml`` ``run:`` and
    ``options.py``; :func:`autorl.task_options.task_node`).

    ``build`` and ``eval`` map each data source to the options the task's builder and evaluator
    take: their keys are the task's own, typed by its classes while composing (so an override is
    checked) and plain dicts in the composed config.
    """

    name: str = setting("the task id; equals its folder's name, tasks/<id>/")
    source: str = setting("the data source: a key of `build` and `eval` (fixture, hub, ...)")
    build: dict[str, dict[str, Any]] = setting("source -> options of the task's builder")
    eval: dict[str, dict[str, Any]] = setting("source -> options of the task's evaluator")
    env_pool: EnvPoolConfig | None = setting(
        "interactive tasks: their environment pool", default=None
    )
    budget_s: float = setting(
        "the agent's default wall-clock budget on this task (budget.seconds overrides it)", 480.0
    )


@dataclass
class ClusterConfig:
    """Where the sweep runs (``conf/cluster/<name>.yaml``)."""

    name: str = setting("the option's name; equals the file name")
    description: str = setting("one line for `python -m autorl.ls clusters`")
    address: str | None = setting(
        "null: start a fresh local Ray; 'auto' or 'host:port': join that cluster"
    )
    num_cpus: int | None = setting("only when starting a local Ray; null: all cores")
    num_gpus: int | None = setting("only when starting a local Ray; null: all GPUs")
    include_dashboard: bool = setting("start Ray's dashboard with a local Ray")
    dashboard_port: int = setting("the dashboard takes the first free port from here on")
    temp_dir: str | None = setting("Ray's session files; null: Ray's default")
    namespace_prefix: str = setting("the sweep's Ray namespace is <prefix>-<sweep_id>")
    auth_mode: AuthMode = setting("when joining: token (Ray 2.60's default) or disabled")
    auth_token_path: str | None = setting("null: $RAY_AUTH_TOKEN, else Ray's default token file")
    # Ray Jobs (autorl/jobs/): defaults, so that cluster files without a Jobs address need not name
    # them.
    jobs_address: str | None = setting(
        "the cluster's dashboard URL (http://host:8265): the sweep is submitted there as one Ray "
        "Job; null: no job",
        None,
    )
    python: str | None = setting(
        "the job's interpreter on the cluster (absolute path); null: this interpreter's path", None
    )
    job_out_dir: str = setting(
        "the in-job sweep's out_dir on the cluster; kept there so that a resubmitted sweep resumes",
        "~/autorl-jobs",
    )
    job_stop_wait_s: float = setting(
        "a stopped job's sweep gets this long to cancel its cells before SIGKILL", 120.0
    )


# ---- run-level blocks ---------------------------------------------------------------------------


@dataclass
class BudgetConfig:
    """The agent's time budget."""

    seconds: float | None = setting(
        "the agent's wall-clock budget in seconds; null: the task's budget_s"
    )
    kill_grace_s: float = setting(
        "SIGTERM, then this many seconds, then SIGKILL for the agent's process group"
    )
    sweep_max_cost_usd: float | None = setting(
        "the sweep's driver spend at which no new cell starts; null: no cap", default=None
    )


class SandboxNetwork(StrEnum):
    """What network a sealed agent has."""

    # a network namespace of its own: only the cell's grading API and driver gateway answer
    none = "none"
    host = "host"  # the node's network (an explicit opt-out, recorded with the cell)


@dataclass
class SandboxConfig:
    """How every cell's agent is sealed (autorl/seal/)."""

    mode: str = setting(
        "the sandbox backend (conf/sandbox/<name>.yaml, autorl.seal.launch.SANDBOXES): bwrap, "
        "sealed (default); none: no sandbox (debugging only, recorded with every result); or a "
        "plugin's"
    )
    bwrap: str = setting("the bubblewrap executable: a path, or a name looked up on PATH")
    network: SandboxNetwork = setting(
        "none: only the grading API and gateway are reachable; host: the node's network"
    )
    toolchain: str | None = setting(
        "the agent's Python environment; null: $AUTORL_TOOLCHAIN_DIR, else <repo>/.cache/toolchain"
    )
    uid_base: int = setting(
        "when the sweep runs as root, each cell's agent runs as a host uid from here up (never 0)"
    )


@dataclass
class SchedulerConfig:
    """How cells are scheduled."""

    max_concurrent_cells: int = setting("cells placed or running at once")
    max_retries: int = setting(
        "retries of a cell after an infrastructure failure (agent outcomes are final)"
    )
    placement_timeout_s: float = setting(
        "a cell still unplaced this long while no cell runs fails, naming its bundle"
    )


@dataclass
class EngineConfig:
    """An inference engine's options (``conf/engine/<name>.yaml``), composed into
    ``grader.engines.<name>``.
    """

    name: str = setting("the engine's name in autorl.engine.ENGINES; equals the file name")
    implementation: str = setting("the engine's class, 'module:Class' (autorl.engine.GraderEngine)")
    description: str = setting("one line for `python -m autorl.ls engines`")
    options: dict[str, Any] = setting(
        "keyword arguments of the engine's constructor (the engine's own keys)"
    )


@dataclass
class GraderConfig:
    """The sweep's grader pool."""

    # Defaults (like ``resources`` below) so that code building a GraderConfig by hand need not name
    # them.
    engine: str = setting(
        "auto: vllm where it is installed and a GPU is present, else hf; or an engine name", "auto"
    )
    engines: dict[str, EngineConfig] = field(
        default_factory=dict,
        metadata={
            "help": "engine name -> its options (conf/engine/<name>.yaml); an engine not named "
            "here gets its defaults"
        },
    )
    replicas: int = setting("grader actors")
    cpus: float = setting("CPUs per grader actor")
    gpus: float = setting("GPUs per grader actor")
    batch_size: int = setting("prompts per generate() call")
    max_queued_per_cell: int = setting("more waiting submissions from one cell get 429")
    baseline_cache: bool = setting(
        "reuse a base model's score from earlier sweeps on the grader pool's node (<cache "
        "dir>/baselines: same task version, eval options, weights, engine, batch size, device and "
        "versions); false: score it in every sweep",
        True,
    )
    # A default so that code building a GraderConfig by hand (tests) need not name it.
    resources: dict[str, float] = field(
        default_factory=dict,
        metadata={
            "help": "custom Ray resources per grader actor, e.g. {grader_node: 1} to place "
            "graders on the nodes started with --resources='{\"grader_node\": N}'"
        },
    )

    def check(self) -> None:
        """Refuse an engine name that is neither ``auto`` nor a registered engine (when a sweep is
        planned).

        Whether the engine's package is installed is checked where it runs, on the grader's node
        (:func:`autorl.engine.resolve_engine`).

        Raises:
            ConfigError: unknown ``engine`` ("did you mean" and the valid names).
        """
        from autorl.engine import ENGINES

        if self.engine != "auto":
            ENGINES.check(self.engine)


@dataclass
class StorageConfig:
    """How submissions and base models reach graders on other nodes (autorl/grading/transfer.py)."""

    root: str | None = setting(
        "a folder every node mounts at the same path: submissions are copied under "
        "<root>/submissions/<digest>/ and graders read them there; null: graders on other nodes "
        "stream them through Ray's object store"
    )


@dataclass
class GradingApiConfig:
    """Each cell's grading API (the agent's /submit)."""

    host: str = setting("bind address; loopback, so agents of other cells cannot reach it")
    max_body_bytes: int = setting("largest request body accepted")


class FeedbackSplit(StrEnum):
    """Which split the scores an agent sees come from (docs/design.md#the-grading-api)."""

    # the test split (the reference's way): the cell's score is selected on the split it reports
    test = "test"
    # a dev split carved from data the agent is not given; test scores only after the cell ends
    dev = "dev"


@dataclass
class GradingConfig:
    """How submissions are scored (docs/design.md#the-grading-api)."""

    feedback: FeedbackSplit = setting(
        "test: agents see test scores (the reference's way); dev: agents see scores on a held-out "
        "dev split, and every submission is scored on the test split after the cell ends"
    )


@dataclass
class WandbConfig:
    """One W&B run per cell (group = sweep id) and a comparison table per sweep."""

    enabled: bool = setting("the switch: tracking.wandb.enabled=true turns W&B on")
    project: str = setting("W&B project")
    entity: str | None = setting("null: the W&B default entity of the API key")
    mode: WandbMode = setting("offline: files under <sweep_dir>/wandb; online needs WANDB_API_KEY")
    init_timeout_s: float = setting("wandb.init gives up after this")
    finish_timeout_s: float = setting("the end of a sweep waits at most this long for W&B")


@dataclass
class ReportConfig:
    """The HTML report written when a sweep ends."""

    enabled: bool = setting("the switch: write <sweep_dir>/report/index.html")
    summarizer_driver: str | None = setting(
        "a conf/driver name for an LLM narrative per cell; null: off"
    )
    summarizer_timeout_s: float = setting("per request to the summariser driver")


@dataclass
class TrackingConfig:
    """Outputs besides the record store."""

    wandb: WandbConfig = setting("Weights & Biases")
    report: ReportConfig = setting("the HTML report")


@dataclass
class ContaminationConfig:
    """The grader-side n-gram overlap check between the eval split and what the agent wrote
    (autorl/integrity/).
    """

    enabled: bool = setting("scan every cell's workspace, code and logs after the agent ends")
    ngram: int = setting(
        "words per n-gram (decon style); only eval n-grams absent from the public training split "
        "count"
    )
    threshold: float = setting(
        "flag the cell when at least this fraction of eval items has an n-gram in the agent's files"
    )
    min_items: int = setting(
        "and at least this many eval items (keeps one chance collision on a small split from "
        "flagging)"
    )
    max_file_bytes: int = setting("bytes read from one file at most (the rest is not scanned)")
    max_total_bytes: int = setting("bytes read from one cell at most")
    max_files: int = setting("directory entries visited per cell at most (files, folders, links)")


@dataclass
class IntegrityJudgeConfig:
    """An LLM that reads a cell's trace and code revisions and flags tampering; it never changes a
    score.
    """

    enabled: bool = setting(
        "off by default: it sends the agent's trace and code to the configured driver"
    )
    driver: str | None = setting(
        "a conf/driver name with an OpenAI chat route (e.g. gpt-5); required when enabled"
    )
    max_chars: int = setting(
        "characters of trace and code sent per cell at most (the rest is cut, and the report says "
        "so)"
    )
    timeout_s: float = setting("per request to the judge driver")


@dataclass
class IntegrityConfig:
    """Checks that decide whether a submission or a cell may count
    (docs/design.md#the-grading-api).
    """

    allow_substitution: bool = setting(
        "true: submissions flagged model_mismatch count towards the cell's best"
    )
    contamination: ContaminationConfig = setting("eval-data overlap in the agent's files")
    judge: IntegrityJudgeConfig = setting("optional LLM integrity judge")

    def check(self) -> None:
        """Refuse settings that cannot work (called when a sweep is planned, before any cell
        starts).

        Raises:
            ConfigError: the judge is on without a driver, or a contamination setting is out of
                range (whether the driver is usable is checked by the sweep command:
                :func:`autorl.integrity.judge.judge_spec`).
        """
        from autorl.errors import ConfigError

        if self.judge.enabled and not self.judge.driver:
            raise ConfigError(
                "integrity.judge.enabled=true needs integrity.judge.driver: a conf/driver name "
                "with an OpenAI chat route (python -m autorl.ls drivers), e.g. "
                "integrity.judge.driver=gpt-5"
            )
        c = self.contamination
        if c.ngram < 3:
            raise ConfigError(
                f"integrity.contamination.ngram must be at least 3 words, got {c.ngram}"
            )
        if not 0.0 < c.threshold <= 1.0:
            raise ConfigError(
                "integrity.contamination.threshold is a fraction of eval items in (0, 1], got "
                f"{c.threshold}"
            )
        if min(c.min_items, c.max_file_bytes, c.max_total_bytes, c.max_files) < 1:
            raise ConfigError(
                "integrity.contamination.min_items, max_file_bytes, max_total_bytes and max_files "
                "must be at least 1"
            )


@dataclass
class RunConfig:
    """One cell's whole config: ``conf/config.yaml`` and one option of each group."""

    agent: AgentConfig = setting("the agent (axis: agent=<name>)")
    driver: DriverConfig = setting("the driver LLM (axis: driver=<name>)")
    task: TaskConfig = setting("the task (axis: task=<name>)")
    model: ModelConfig = setting("the base model (axis: model=<name>)")
    cluster: ClusterConfig = setting("where the sweep runs (cluster=<name>)")
    seed: int = setting("the cell's seed (axis: seed=0,1,...)")
    sweep_id: str | None = setting(
        "null: 'default', plus a digest of the pass-through overrides when there are any"
    )
    out_dir: str = setting("the sweep writes everything under <out_dir>/<sweep_id>/")
    cache_dir: str | None = setting(
        "built models and task data; null: $AUTORL_CACHE_DIR, else ~/.cache/autorl"
    )
    dry_run: bool = setting("print the cell table and exit without starting anything")
    progress: bool = setting("live table of cells while the sweep runs")
    plugins: list[str] = setting(
        "extra folders with conf/ and tasks/ of their own (agents, drivers, models, tasks)"
    )
    budget: BudgetConfig = setting("the agent's time budget")
    cell: CellResources = setting("resources of each cell's workspace")
    sandbox: SandboxConfig = setting("how each cell's agent is sealed")
    scheduler: SchedulerConfig = setting("cell scheduling")
    grader: GraderConfig = setting("the grader pool")
    storage: StorageConfig = setting("how submissions travel to graders on other nodes")
    grading_api: GradingApiConfig = setting("each cell's grading API")
    grading: GradingConfig = setting("which split the agent's scores come from")
    tracking: TrackingConfig = setting("W&B and the HTML report")
    integrity: IntegrityConfig = setting("model identity, contamination and the integrity judge")
    plan: PlanConfig = setting("the pre-flight plan's assumptions (every dry run prints it)")


# The ConfigStore entries: (group, name, node). The root schema is ``run_schema``.
SCHEMAS: tuple[tuple[str | None, str, type], ...] = (
    (None, "run_schema", RunConfig),
    ("agent", "_scripted", ScriptedAgentConfig),
    ("agent", "_cli", CliAgentConfig),
    ("agent", "_command", CommandAgentConfig),
    ("driver", "_schema", DriverConfig),
    ("model", "_schema", ModelConfig),
    ("task", "_schema", TaskConfig),
    ("cluster", "_schema", ClusterConfig),
    ("engine", "_schema", EngineConfig),
)


def register_schemas() -> None:
    """Store every schema in Hydra's ConfigStore (idempotent: storing again replaces)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for group, name, node in SCHEMAS:
        store.store(group=group, name=name, node=node)
