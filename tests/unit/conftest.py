"""Fixtures shared by the unit tests."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from autorl.seal.cgroups import CellCgroup, CgroupLimits

# The gateway tests' fixtures (trap, replay, gateways, gate), shared by their modules.
from tests.helpers.gateway_cell import gate, gateways, replay, trap  # noqa: F401


@pytest.fixture
def make_group() -> Iterator[Callable[[CgroupLimits], CellCgroup]]:
    """Creates real cgroups; every one is killed and removed at the end, also when the test
    fails."""
    groups: list[CellCgroup] = []

    def make(limits: CgroupLimits) -> CellCgroup:
        group = CellCgroup.create(f"autorl-test-{os.getpid()}-{uuid.uuid4().hex[:8]}", limits)
        groups.append(group)
        return group

    yield make
    for group in groups:
        group.remove()
        assert not any(folder.exists() for folder in group.dirs.values())
