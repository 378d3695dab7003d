"""What a running cell sends while it runs, beside its results: the agent's trace events, its
resource samples (the live viewer's) and its checkpoints. Stored by :mod:`autorl.records.live`.
Standard library only."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TraceEvent:
    """One normalised event of the agent's trace, sent while the cell runs (the viewer's steps).

    Attributes:
        cell_id: The cell.
        seq: The event's number in its trace (from 1); with ``cell_id`` and ``attempt`` the key.
        t: Unix time the workspace parsed it.
        kind: The normalised kind (``message``, ``tool_call``, ``tool_result``, ``usage``, ...).
        tool: The tool a ``tool_call`` named, if any.
        text: An excerpt of its text, command or output (at most :data:`TRACE_TEXT_CAP` chars;
            agent-controlled, so always shown escaped).
        tokens_in: Input tokens a ``usage`` event reported.
        tokens_out: Output tokens a ``usage`` event reported.
        attempt: The cell's attempt (see :attr:`SubmissionRecord.attempt`).
    """

    cell_id: str
    seq: int
    t: float
    kind: str
    tool: str | None = None
    text: str = ""
    tokens_in: int | None = None
    tokens_out: int | None = None
    attempt: int | None = None


#: The longest excerpt of an event's text a :class:`TraceEvent` keeps.
TRACE_TEXT_CAP = 2000


@dataclass(frozen=True)
class ResourceSample:
    """What the agent's processes used at one moment, sampled while the cell runs.

    Attributes:
        cell_id: The cell.
        t: Unix time of the sample; with ``cell_id`` and ``attempt`` the key.
        cpu_s: CPU seconds the agent's processes used so far, if known.
        cpu_fraction: CPUs busy since the previous sample (1.0: one core), if known.
        memory_bytes: Memory in use (the cgroup's charge, or the processes' resident sets).
        gpu_util: GPU utilisation (0..1), if sampled.
        gpu_memory_bytes: GPU memory in use, if sampled.
        attempt: The cell's attempt (see :attr:`SubmissionRecord.attempt`).
    """

    cell_id: str
    t: float
    cpu_s: float | None = None
    cpu_fraction: float | None = None
    memory_bytes: int | None = None
    gpu_util: float | None = None
    gpu_memory_bytes: int | None = None
    attempt: int | None = None


@dataclass(frozen=True)
class CheckpointRecord:
    """One checkpoint a running cell took of its workspace and HOME (or failed to take).

    Attributes:
        cell_id: The cell.
        t: Unix time the checkpoint began (a failed one: when it failed); with ``cell_id`` and
            ``attempt`` the key. A resume counts its lost time from it.
        checkpoint_id: The manifest's id in the cell's checkpoint store ("" when it failed).
        agent_time_s: The agent's time used when the checkpoint was listed.
        files: Regular files it holds.
        bytes_total: Their bytes.
        bytes_new: Bytes it wrote to the store (the rest was there from earlier checkpoints).
        frozen: Whether the whole listing was taken with the cell frozen.
        frozen_s: How long the cell was frozen.
        total_s: The checkpoint's wall time.
        error: Why it failed (a cap, the store), else None; a failed checkpoint never fails the
            cell.
        attempt: The cell's attempt (see :attr:`SubmissionRecord.attempt`).
    """

    cell_id: str
    t: float
    checkpoint_id: str = ""
    agent_time_s: float | None = None
    files: int = 0
    bytes_total: int = 0
    bytes_new: int = 0
    frozen: bool = False
    frozen_s: float = 0.0
    total_s: float = 0.0
    error: str | None = None
    attempt: int | None = None
