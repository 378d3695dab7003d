"""The gateway of one cell as the Workspace actor runs it: started before the agent, its calls
sent to the Recorder actor, its totals returned when the agent is done."""

from __future__ import annotations

import secrets
import threading
from typing import Any

from autorl.agents.cli import GATEWAY_TOKEN_ENV, GATEWAY_URL_ENV
from autorl.gateway.app import Gateway
from autorl.gateway.settings import DriverSettings
from autorl.records.store import DriverCall


class CellGateway:
    """Starts a :class:`Gateway` for a cell's driver; records every call through ``recorder``.

    Args:
        driver_cfg: The cell's composed driver config.
        cell_id: The cell.
        recorder: The Recorder actor handle (``record_driver_calls`` is called without waiting).
        host: Loopback address.

    Raises:
        ConfigError: if the driver is invalid or its key variable is unset.
    """

    def __init__(self, driver_cfg: dict[str, Any], cell_id: str, recorder: Any, host: str = "127.0.0.1") -> None:
        settings = DriverSettings.from_config(driver_cfg)
        self.recorder = recorder
        self._refs: list[Any] = []
        self._lock = threading.Lock()
        self.token = secrets.token_urlsafe(32)
        self.gateway = Gateway(settings, token=self.token, api_key=settings.api_key(), cell_id=cell_id, sink=self._send, host=host)

    def _send(self, call: DriverCall) -> None:
        ref = self.recorder.record_driver_calls.remote([call])
        with self._lock:
            self._refs.append(ref)

    def start(self) -> dict[str, str]:
        """Serve; returns the variables that hand the gateway to the agent's adapter."""
        self.gateway.start()
        return {GATEWAY_URL_ENV: self.gateway.url, GATEWAY_TOKEN_ENV: self.token}

    def close(self) -> dict[str, Any]:
        """Stop serving, wait until every call is recorded, return ``{tokens_in, tokens_out, cost_usd}``."""
        import ray

        self.gateway.stop()
        with self._lock:
            refs, self._refs = self._refs, []
        ray.get(refs)
        totals = self.gateway.totals()
        return {"tokens_in": totals["tokens_in"], "tokens_out": totals["tokens_out"], "cost_usd": totals["cost_usd"]}
