"""The settings of each cell's workspace (``cell:`` in ``conf/config.yaml``): its resources and its
checkpoints."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from autorl.schema_fields import setting


class NodeLoss(StrEnum):
    """What the scheduler is to do with a cell whose node is lost."""

    resume = "resume"  # from the cell's last checkpoint, on another node
    restart = "restart"  # from nothing, on another node, as a new attempt


@dataclass
class CheckpointConfig:
    """Snapshots of a running cell's workspace and HOME (:mod:`autorl.workspace.checkpoint`).

    A cap that a checkpoint would exceed fails that checkpoint (naming the cap), never the cell.
    """

    enabled: bool = setting("take checkpoints of running cells")
    every_s: float = setting("seconds between two checkpoints of a cell")
    max_bytes: int = setting(
        "bytes of the workspace and HOME one checkpoint may hold (apparent sizes: a sparse file "
        "counts by its length)"
    )
    max_files: int = setting("files, folders and links one checkpoint may hold")
    max_file_bytes: int = setting("bytes of the largest file a checkpoint may hold")


@dataclass
class CellResources:
    """Resources reserved for each cell's workspace (its placement-group bundle)."""

    cpus: float = setting(
        "CPUs of the cell's bundle, e.g. 1 or 0.5; also the agent's CPU quota in its cgroup"
    )
    gpus: float = setting(
        "GPUs of the cell's bundle, e.g. 0 or 1; the sandbox shows only these devices"
    )
    memory_gb: float = setting(
        "memory of the cell's bundle; the agent's cgroup memory limit (its processes are killed "
        "past it)"
    )
    max_processes: int = setting(
        "tasks (processes and threads) the agent may have at once (its cgroup's pids limit)"
    )
    max_log_mb: float = setting(
        "the agent's stdout and stderr kept in agent.log; past it the output is read and dropped, "
        "so an agent that prints without end cannot fill the node's disk"
    )
    checkpoint: CheckpointConfig = setting("snapshots of the running cell")
    on_node_loss: NodeLoss = setting(
        "a cell whose node is lost: resume goes on from its last checkpoint on another node, in "
        "the same attempt, with the budget left at that checkpoint; restart runs it again from "
        "nothing as a new attempt"
    )
