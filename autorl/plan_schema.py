"""The settings of a sweep's pre-flight plan (``plan:`` in ``conf/config.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass

from autorl.schema_fields import setting


@dataclass
class PlanConfig:
    """What the pre-flight plan assumes where the record store has no history
    (:mod:`autorl.preflight_plan`)."""

    delta: float = setting(
        "the difference in mean improvement between two agents the seeds must detect"
    )
    power: float = setting("the chance of detecting it (two-sided Welch t-test)")
    alpha: float = setting("the test's false-positive rate")
    prior_sd: float = setting(
        "the spread (standard deviation) of a cell's improvement over seeds, for a task with "
        "fewer than two finished cells in the record store"
    )
    assumed_input_tokens_per_hour: float = setting(
        "driver input tokens per agent hour, for an agent × driver × task never run before"
    )
    assumed_output_tokens_per_hour: float = setting("as above, output tokens")
    cluster_cpus: float | None = setting(
        "the target cluster's CPUs for the makespan; null: the connected cluster's, or this node's",
        default=None,
    )
    cluster_gpus: float | None = setting("as above, GPUs", default=None)
