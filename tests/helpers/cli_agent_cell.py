"""A CLI agent's cell as the adapter tests lay it out: the workspace, the composed config, the
gateway token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autorl.agent_schema import CliAgentConfig
from autorl.agents.cli import find_binary
from autorl.config import compose
from autorl.errors import ConfigError

TOKEN = "gw-token"


def workspace(root: Path) -> Path:
    ws = root / "cell" / "workspace"
    (ws / "data").mkdir(parents=True)
    (ws / "code").mkdir()
    (ws / "data" / "train.jsonl").write_text('{"question": "1+1?", "answer": "#### 2"}\n' * 5)
    (ws / "description.md").write_text("# GSM8K\nSolve grade-school math.\n")
    (ws / "instructions.md").write_text("# Instructions\nSubmit to the grading API.\n")
    (ws / "run_meta.json").write_text(json.dumps({"timeout_s": 900}))
    return ws


def cli_config(agent: str) -> CliAgentConfig:
    """The composed config of a CLI agent."""
    cfg = compose([f"agent={agent}"]).agent
    assert isinstance(cfg, CliAgentConfig)
    return cfg


def require_cli(agent: str) -> None:
    """Fail the test, saying how to install it, when the real CLI of ``agent`` is missing."""
    try:
        find_binary(cli_config(agent))
    except ConfigError as error:
        pytest.fail(f"this test needs the real {agent} CLI (make test-deps installs it): {error}")
