"""Where unprivileged user namespaces are off (KubeRay pods, some Slurm sites), the sandbox
preflight names the kernel setting that is off and what to change, from a fake /proc/sys tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autorl.config import compose
from autorl.seal import preflight


def _proc_sys(root: Path, **values: int) -> Path:
    """A fake /proc/sys: each ``kernel__name=value`` as the file kernel/name."""
    for key, value in values.items():
        path = root.joinpath(*key.split("__"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{value}\n")
    return root


def test_each_setting_that_is_off_is_named_with_its_change(tmp_path: Path) -> None:
    root = _proc_sys(
        tmp_path,
        kernel__unprivileged_userns_clone=0,
        user__max_user_namespaces=0,
        user__max_mnt_namespaces=100,
        kernel__apparmor_restrict_unprivileged_userns=1,
    )
    off = preflight.userns_off(root)
    assert [entry.split(" ")[0] for entry in off] == [
        "kernel.unprivileged_userns_clone=0",
        "user.max_user_namespaces=0",
        "kernel.apparmor_restrict_unprivileged_userns=1",
    ]
    assert "sysctl -w kernel.unprivileged_userns_clone=1" in off[0]
    assert "sysctl -w user.max_user_namespaces=15000" in off[1]
    assert "Ubuntu 24.04" in off[2] and "apparmor_restrict_unprivileged_userns=0" in off[2]


def test_settings_that_allow_user_namespaces_or_are_absent_are_not_named(tmp_path: Path) -> None:
    root = _proc_sys(tmp_path, kernel__unprivileged_userns_clone=1, user__max_user_namespaces=15000)
    assert preflight.userns_off(root) == []
    advice = preflight.userns_advice(root)
    assert "allow them" in advice and "seccompProfile: {type: Unconfined}" in advice
    assert preflight.userns_off(tmp_path / "missing") == []


def test_the_bwrap_failure_names_the_setting_the_change_and_the_opt_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _proc_sys(tmp_path, user__max_user_namespaces=0)
    monkeypatch.setattr(preflight, "PROC_SYS", root)
    monkeypatch.setattr(preflight, "resolve_bwrap", lambda _: "/usr/bin/bwrap")
    failure = "exit 1: bwrap: No permissions to create new namespace"
    monkeypatch.setattr(preflight, "_probe", lambda *_: failure)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    problems = preflight.bwrap_problems(compose([]))
    (message,) = [p for p in problems if p.startswith("bubblewrap")]
    assert failure in message
    assert "user.max_user_namespaces=0 (above 0: sysctl -w user.max_user_namespaces" in message
    assert "kernel.unprivileged_userns_clone" not in message  # not on this (fake) kernel
    assert "KubeRay pod" in message and "securityContext privileged: true" in message
    assert "allowPrivilegeEscalation: true" in message and "Slurm" in message
    assert message.endswith("sandbox.mode=none")
