"""What the gateway needs of a driver config (:class:`autorl.schema.DriverConfig`), checked.

The driver config itself is typed by the schema and composed like every config (a cell's comes
with the cell; :func:`autorl.config.load_driver_config` loads one by name for the judges and the
report's summariser). :class:`DriverSettings` adds what the schema cannot say: a driver that
serves an agent has a provider, a model, a URL and at least one protocol.

Imports nothing heavy: ``autorl.config`` and the sweep's preflight use it before anything starts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from autorl.agent_schema import ApiProtocol
from autorl.errors import ConfigError
from autorl.schema import DriverConfig, Provider

PROVIDERS = tuple(Provider)
# The wire protocols the gateway serves, each on its own route (see autorl.gateway.app).
PROTOCOLS = tuple(ApiProtocol)
# Protocols the gateway can translate with LiteLLM when the provider does not speak them.
TRANSLATABLE = ("chat", "responses", "messages")
# LiteLLM's model prefix for each provider, used when a call must be translated.
LITELLM_PREFIX = {
    "openai": "openai",
    "openai_compatible": "openai",
    "anthropic": "anthropic",
    "google": "gemini",
}
# The variables through which a cell's gateway is handed to the agent's adapter (set by the
# Workspace actor from :meth:`autorl.gateway.cell.CellGateway.start`; read by the CLI adapters).
GATEWAY_URL_ENV = "AUTORL_DRIVER_URL"
GATEWAY_TOKEN_ENV = "AUTORL_DRIVER_TOKEN"


@dataclass(frozen=True)
class DriverSettings:
    """Everything the gateway needs to know about one driver.

    Attributes:
        name: Driver name (``conf/driver/<name>.yaml``).
        provider: One of :data:`PROVIDERS`.
        model: The provider's model id; every forwarded call uses it when ``enforce_model``.
        base_url: The provider's main API root (LiteLLM's ``api_base`` for translated calls).
        api_key_env: Environment variable holding the real key, or None for keyless servers.
        protocols: Protocol → base URL the provider speaks natively; calls on other protocols
            are translated with LiteLLM.
        price_in: USD per million input tokens, or None when unknown (cost stays empty).
        price_out: USD per million output tokens, or None.
        max_tokens: Token budget of the cell (input + output), or None.
        max_cost_usd: Cost budget of the cell, or None.
        timeout_s: Timeout of one upstream call.
        max_attempts: Attempts per call on provider 429/5xx and connection errors.
        initial_backoff_s: First retry delay; doubles on every further attempt.
        max_backoff_s: Longest retry delay (also caps a provider's ``Retry-After``).
        enforce_model: Rewrite the requested model to :attr:`model` (so a CLI's side calls to
            another model still go to, and are billed as, the configured driver).
        default_max_output_tokens: Output tokens that a call naming no maximum of its own reserves
            of the budgets while it runs (:mod:`autorl.gateway.budget`).
    """

    name: str
    provider: str
    model: str
    base_url: str
    api_key_env: str | None
    protocols: dict[str, str]
    price_in: float | None
    price_out: float | None
    max_tokens: int | None
    max_cost_usd: float | None
    timeout_s: float
    max_attempts: int
    initial_backoff_s: float
    max_backoff_s: float
    enforce_model: bool
    default_max_output_tokens: int = 32_000

    @classmethod
    def from_config(cls, cfg: DriverConfig) -> DriverSettings:
        """Check that a driver config can serve an agent, and flatten it for the gateway.

        Raises:
            ConfigError: naming the bad field and how to fix it.
        """
        name = cfg.name
        if cfg.provider == Provider.none:
            raise ConfigError(
                f"driver {name!r} has no provider: it cannot serve an agent that needs a driver"
            )
        if not cfg.model or not cfg.base_url:
            raise ConfigError(f"driver {name!r}: set driver.model and driver.base_url")
        if not cfg.protocols:
            raise ConfigError(
                f"driver {name!r}: driver.protocols must map some of {', '.join(PROTOCOLS)} to "
                "base URLs"
            )
        if cfg.budget.default_max_output_tokens < 1:
            raise ConfigError(
                f"driver {name!r}: driver.budget.default_max_output_tokens must be at least 1"
            )
        if cfg.gateway.max_attempts < 1:
            raise ConfigError(
                f"driver {name!r}: driver.gateway.max_attempts must be at least 1, got "
                f"{cfg.gateway.max_attempts}"
            )
        price, budget, gateway = cfg.price_per_mtok, cfg.budget, cfg.gateway
        return cls(
            name=name,
            provider=str(cfg.provider),
            model=cfg.model,
            base_url=cfg.base_url.rstrip("/"),
            api_key_env=cfg.api_key_env or None,
            protocols={str(k): v.rstrip("/") for k, v in cfg.protocols.items()},
            price_in=None if price is None else price.input,
            price_out=None if price is None else price.output,
            max_tokens=budget.max_tokens,
            max_cost_usd=budget.max_cost_usd,
            timeout_s=gateway.timeout_s,
            max_attempts=gateway.max_attempts,
            initial_backoff_s=gateway.initial_backoff_s,
            max_backoff_s=gateway.max_backoff_s,
            enforce_model=gateway.enforce_model,
            default_max_output_tokens=budget.default_max_output_tokens,
        )

    def api_key(self, environ: dict[str, str] | None = None) -> str | None:
        """The real key from the environment (None for a keyless driver).

        Raises:
            ConfigError: if the driver names a variable that is unset or empty.
        """
        if self.api_key_env is None:
            return None
        value = (os.environ if environ is None else environ).get(self.api_key_env, "")
        if not value:
            raise ConfigError(missing_key_message(self.name, self.api_key_env))
        return value

    def cost(self, tokens_in: int, tokens_out: int) -> float | None:
        """USD cost of a call from ``price_per_mtok``, or None when the price is unknown.

        >>> s = DriverSettings(
        ...     "d", "openai", "m", "u", None, {"chat": "u"},
        ...     1.25, 10.0, None, None, 1, 1, 1, 1, True,
        ... )
        >>> s.cost(1_000_000, 100_000)
        2.25
        """
        if self.price_in is None or self.price_out is None:
            return None
        return (tokens_in * self.price_in + tokens_out * self.price_out) / 1_000_000


def missing_key_message(driver: str, variable: str) -> str:
    """The error for a driver whose key variable is not set."""
    return (
        f"driver {driver!r} needs the environment variable {variable} (its API key), which is not "
        f"set; export {variable}=... before running the sweep, or choose another driver (python -m "
        "autorl.ls drivers)"
    )
