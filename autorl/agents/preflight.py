"""Checks of agent × driver cells before anything starts (no heavy imports).

- :func:`check_combinations` (every plan, dry runs included): an agent that needs a driver is not
  paired with ``driver=none``, and a CLI whose protocol cannot be translated (the Gemini CLI's
  Gemini API) gets a driver that speaks it.
- :func:`missing_requirements` (real runs): the driver keys are set in the environment and the
  agent CLIs are installed. A dry run prints these as notes instead, so that
  ``agent=opencode driver=gpt-5 task=all dry_run=true`` shows its cells on a machine without keys.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from autorl.errors import ConfigError
from autorl.gateway.settings import missing_key_message

# Protocols the gateway can translate with LiteLLM when the provider does not speak them.
_TRANSLATABLE = ("chat", "responses", "messages")


def check_combinations(cells: Iterable[Any]) -> None:
    """Refuse agent × driver pairs that cannot work.

    Raises:
        ConfigError: naming the pair and what to change.
    """
    for cell in cells:
        agent, driver = cell.config["agent"], cell.config["driver"]
        if not agent["needs_driver"]:
            continue
        if driver["provider"] == "none":
            raise ConfigError(
                f"agent {agent['name']!r} needs a driver LLM, but driver=none was given (cell {cell.cell_id}); "
                "choose one with driver=<name> (python -m autorl.ls drivers), e.g. driver=gpt-5"
            )
        protocol = agent["protocol"]
        if protocol not in _TRANSLATABLE and protocol not in (driver["protocols"] or {}):
            raise ConfigError(
                f"agent {agent['name']!r} speaks the {protocol} API, which driver {driver['name']!r} does not serve "
                f"(it serves {', '.join(driver['protocols'])}); use a driver that does, e.g. driver=gemini-2.5-flash"
            )


def missing_requirements(cells: Iterable[Any], environ: dict[str, str] | None = None, *, check_binaries: bool = True) -> list[str]:
    """What a real run of ``cells`` lacks on this machine: unset driver keys, uninstalled CLIs.

    Returns:
        One message per problem (empty when nothing is missing).
    """
    from autorl.agents.cli import find_binary

    env = os.environ if environ is None else environ
    problems: dict[str, str] = {}
    for cell in cells:
        agent, driver = cell.config["agent"], cell.config["driver"]
        if not agent["needs_driver"]:
            continue
        variable = driver["api_key_env"]
        if variable and not env.get(variable):
            problems.setdefault(f"key:{variable}", missing_key_message(driver["name"], variable))
        if check_binaries and f"cli:{agent['name']}" not in problems:
            try:
                find_binary(agent)
            except ConfigError as error:
                problems[f"cli:{agent['name']}"] = str(error)
    return list(problems.values())
