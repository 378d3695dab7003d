"""The agent adapter interface and its lookup from a config's ``adapter: module:Class`` string."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from autorl.errors import ConfigError


@dataclass(frozen=True)
class LaunchContext:
    """What an adapter may use to build the agent's command line."""

    workspace: Path
    agent_cfg: dict[str, Any]
    driver_cfg: dict[str, Any]
    env: dict[str, str]
    cell_dir: Path | None = None  # the cell folder (outside the workspace), for files the agent must not see
    seed: int = 0  # the cell's seed: agents that take one (the scripted agent) vary their runs by it


@dataclass(frozen=True)
class AgentLaunch:
    """The agent's command line and full environment."""

    command: list[str]
    env: dict[str, str]


class AgentAdapter(Protocol):
    """Builds the non-interactive launch of one kind of agent."""

    def launch(self, ctx: LaunchContext) -> AgentLaunch:
        """Return the command and environment that start the agent in ``ctx.workspace``."""
        ...


def load_adapter(agent_cfg: dict[str, Any]) -> AgentAdapter:
    """Instantiate the adapter named by ``agent_cfg['adapter']`` (``module:Class``).

    Raises:
        ConfigError: if the string is malformed or names nothing importable.
    """
    target = str(agent_cfg.get("adapter") or "")
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"agent {agent_cfg.get('name')!r}: 'adapter' must be 'module:Class', got {target!r}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"agent {agent_cfg.get('name')!r}: cannot load adapter {target!r}: {error}") from error
    adapter: AgentAdapter = factory()
    return adapter
