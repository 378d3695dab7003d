"""Joining a cluster: what goes wrong is a PrerequisiteError that says what to check."""

from __future__ import annotations

from typing import Any

import pytest
import ray
from ray.exceptions import AuthenticationError

from autorl.cluster import connect
from autorl.errors import PrerequisiteError
from autorl.schema import ClusterConfig


@pytest.mark.parametrize(
    "error",
    [
        AuthenticationError(
            "Token authentication is enabled but the token sent is not the cluster's"
        ),
        ConnectionError("Could not find any running Ray instance"),
    ],
)
def test_joining_with_a_wrong_token_or_address_names_what_to_check(
    monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise error

    monkeypatch.setattr(ray, "init", refuse)
    config = ClusterConfig(name="remote", description="", address="10.0.0.1:6379")
    with pytest.raises(PrerequisiteError) as raised:
        connect(config, "autorl-test")
    message = str(raised.value)
    assert "10.0.0.1:6379" in message and str(error).splitlines()[0] in message
    assert "cluster.auth_token_path" in message and "cluster.auth_mode" in message
