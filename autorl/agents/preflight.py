"""What a real run of agent × driver cells needs on this machine, checked before anything starts
(no heavy imports).

:func:`missing_requirements`: the driver keys are set in the environment and the agent CLIs are
installed. A dry run prints these as notes instead, so that
``agent=opencode driver=gpt-5 task=all dry_run=true`` shows its cells on a machine without keys.
Pairs that can never work (an agent that needs a driver with ``driver=none``) are refused earlier,
by every plan: :func:`autorl.config.check_combinations`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from autorl.agent_schema import CliAgentConfig
from autorl.errors import ConfigError
from autorl.gateway.settings import missing_key_message

if TYPE_CHECKING:
    from autorl.grid import CellSpec


def missing_requirements(
    cells: Iterable[CellSpec], environ: dict[str, str] | None = None, *, check_binaries: bool = True
) -> list[str]:
    """What a real run of ``cells`` lacks on this machine: unset driver keys, uninstalled CLIs.

    Returns:
        One message per problem (empty when nothing is missing).
    """
    from autorl.agents.cli import find_binary

    env = os.environ if environ is None else environ
    problems: dict[str, str] = {}
    for cell in cells:
        agent, driver = cell.config.agent, cell.config.driver
        if not agent.needs_driver:
            continue
        variable = driver.api_key_env
        if variable and not env.get(variable):
            problems.setdefault(f"key:{variable}", missing_key_message(driver.name, variable))
        if (
            check_binaries
            and isinstance(agent, CliAgentConfig)
            and f"cli:{agent.name}" not in problems
        ):
            try:
                find_binary(agent)
            except ConfigError as error:
                problems[f"cli:{agent.name}"] = str(error)
    return list(problems.values())
