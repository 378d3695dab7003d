"""The gateway of one cell as the Workspace actor runs it: started before the agent, its calls sent
to a sink (the Recorder actor, through the Workspace), its totals returned when the agent is done.
"""

from __future__ import annotations

import secrets
import socket
from typing import Any, Protocol

from autorl.gateway.app import Gateway
from autorl.gateway.settings import GATEWAY_TOKEN_ENV, GATEWAY_URL_ENV, DriverSettings
from autorl.records.types import DriverCall
from autorl.schema import DriverConfig


class DriverCallSink(Protocol):
    """Where a cell's driver calls go (the Workspace actor wraps the Recorder actor; a list in
    tests).
    """

    def record_driver_call(self, call: DriverCall) -> None:
        """Send one call on; may return before it is stored, and must not block the agent's
        request.
        """
        ...

    def flush(self) -> None:
        """Return once every call sent so far is stored."""
        ...


class CellGateway:
    """Starts a :class:`Gateway` for a cell's driver; records every call through ``sink``.

    Args:
        driver_cfg: The cell's composed driver config.
        cell_id: The cell.
        sink: Receives every call (without waiting); flushed by :meth:`close`.
        host: Loopback address to bind when no ``sock`` is given.
        sock: An already-bound socket to serve on instead (a sealed cell's unix socket).

    Raises:
        ConfigError: if the driver is invalid or its key variable is unset.
    """

    def __init__(
        self,
        driver_cfg: DriverConfig,
        cell_id: str,
        sink: DriverCallSink,
        host: str = "127.0.0.1",
        sock: socket.socket | None = None,
    ) -> None:
        settings = DriverSettings.from_config(driver_cfg)
        self.sink = sink
        self.token = secrets.token_urlsafe(32)
        self.gateway = Gateway(
            settings,
            token=self.token,
            api_key=settings.api_key(),
            cell_id=cell_id,
            sink=sink.record_driver_call,
            host=host,
            sock=sock,
        )

    def start(self) -> dict[str, str]:
        """Serve; returns the variables that hand the gateway to the agent's adapter."""
        self.gateway.start()
        return {GATEWAY_URL_ENV: self.gateway.url, GATEWAY_TOKEN_ENV: self.token}

    def close(self) -> dict[str, Any]:
        """Stop serving, wait until every call is recorded, return
        ``{tokens_in, tokens_out, cost_usd}``.
        """
        self.gateway.stop()
        self.sink.flush()
        totals = self.gateway.totals()
        return {
            "tokens_in": totals["tokens_in"],
            "tokens_out": totals["tokens_out"],
            "cost_usd": totals["cost_usd"],
        }
