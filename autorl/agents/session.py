"""What surrounds a CLI agent's run in its cell: the driver gateway, the agent's environment
without provider secrets, and the live trace of its output stream.

Records leave through a :class:`SessionSink` (the Workspace actor wraps the Recorder actor), so this
module needs no Ray.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Protocol

from autorl.agent_schema import AgentConfig
from autorl.agents.base import AgentAdapter
from autorl.agents.cli import PROVIDER_ENV
from autorl.agents.trace import TraceFollower
from autorl.gateway.cell import CellGateway, DriverCallSink
from autorl.gateway.settings import GATEWAY_URL_ENV
from autorl.records.types import TraceSummary
from autorl.schema import DriverConfig
from autorl.seal.cgroups import CellCgroup
from autorl.serving import Endpoints
from autorl.workspace.live import LiveForwarder, LiveSink, cgroup_usage

TRACE_FILE = "trace.jsonl"


class SessionSink(DriverCallSink, Protocol):
    """Where a driver session's records go: the gateway's driver calls, and the trace summary."""

    def record_trace(self, summary: TraceSummary) -> None:
        """Store the cell's trace summary (returns once it is stored)."""
        ...


class DriverSession:
    """One agent run's driver side, owned by the Workspace actor.

    Args:
        cell_id: The cell.
        cell_dir: The cell folder (``agent.log`` and ``trace.jsonl`` live there).
        agent_cfg: The cell's agent config.
        driver_cfg: The cell's driver config.
        sink: Receives the gateway's driver calls and the trace summary.
        host: Loopback address for the gateway when no ``endpoints`` are given.
        endpoints: Where the gateway listens and the URL the agent gets for it (a sealed cell's).
        live: Receives the trace events and resource samples while the agent runs (the viewer's
            live records); None: none are sent.
        seq_offset: Added to each live trace event's number (a resumed cell's events follow those
            its lost node sent).
    """

    def __init__(
        self,
        cell_id: str,
        cell_dir: Path,
        agent_cfg: AgentConfig,
        driver_cfg: DriverConfig,
        sink: SessionSink,
        host: str,
        endpoints: Endpoints | None = None,
        live: LiveSink | None = None,
        seq_offset: int = 0,
    ) -> None:
        self.cell_id = cell_id
        self.cell_dir = cell_dir
        self.agent_cfg = agent_cfg
        self.driver_cfg = driver_cfg
        self.sink = sink
        self.host = host
        self.endpoints = endpoints
        self.gateway: CellGateway | None = None
        self.follower: TraceFollower | None = None
        self.live = live
        self.seq_offset = seq_offset
        self.forwarder: LiveForwarder | None = None

    def agent_env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` without provider keys, plus the gateway's URL and token when the agent needs a
        driver.

        Raises:
            ConfigError: if the driver's key variable is unset (the gateway cannot start).
        """
        secret = self.driver_cfg.api_key_env
        clean = {k: v for k, v in env.items() if k not in PROVIDER_ENV and k != secret}
        if not self.agent_cfg.needs_driver:
            return clean
        sock = self.endpoints.bind("gateway") if self.endpoints is not None else None
        self.gateway = CellGateway(
            self.driver_cfg, self.cell_id, self.sink, host=self.host, sock=sock
        )
        variables = self.gateway.start()
        if self.endpoints is not None:
            variables[GATEWAY_URL_ENV] = self.endpoints.agent_url(
                "gateway", variables[GATEWAY_URL_ENV]
            )
        return clean | variables

    def follow(self, adapter: AgentAdapter, cgroup: CellCgroup | None = None) -> None:
        """Parse the agent's output into ``trace.jsonl`` while it runs, if it writes a stream, and
        send its events and the resource use of ``cgroup`` (None: of this process's children) to
        the live sink."""
        if self.live is not None:
            usage = None if cgroup is None else functools.partial(cgroup_usage, cgroup)
            gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")  # Ray's, for this cell's GPUs
            self.forwarder = LiveForwarder(
                self.cell_id, self.live, usage, gpus, seq_offset=self.seq_offset
            )
            self.forwarder.start()
        parser = adapter.stream_parser()
        if parser is not None:
            self.follower = TraceFollower(
                self.cell_dir / "agent.log",
                self.cell_dir / TRACE_FILE,
                parser,
                self.agent_cfg.name,
                on_events=self.forwarder.add_events if self.forwarder else None,
            )
            self.follower.start()

    def close(self) -> dict[str, Any]:
        """Finish the trace and the gateway; returns the cell's driver usage fields (gateway
        side)."""
        usage: dict[str, Any] = {}
        try:
            stats = self.follower.stop() if self.follower is not None else None
            if self.forwarder is not None:
                self.forwarder.stop()  # after the follower: its last events go out too
            if stats is not None:
                summary = TraceSummary(
                    cell_id=self.cell_id,
                    agent=self.agent_cfg.name,
                    events=stats.events,
                    messages=stats.messages,
                    tool_calls=stats.tool_calls,
                    tokens_in=stats.tokens_in,
                    tokens_out=stats.tokens_out,
                    unparsed_lines=stats.unparsed_lines,
                    path=str(self.cell_dir / TRACE_FILE),
                )
                self.sink.record_trace(summary)
        finally:
            if self.gateway is not None:
                usage = self.gateway.close()
        return usage
