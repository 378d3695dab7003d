"""Each real agent CLI (every registered one) runs a whole cell end to end, against a scripted LLM.

``python -m autorl.sweep agent=codex,claude-code,gemini-cli,opencode,openhands driver=local``, one
sweep (not one per CLI: every sweep starts a Ray of its own), with the driver's endpoints pointed at
the replay LLM server (tests/helpers/replay_llm_server.py: a fake LLM standing in for the paid
OpenAI, Anthropic and Google APIs, which CI cannot reach; it speaks their real wire protocols,
streaming). The CLI talks to the cell's driver gateway in its own protocol (Codex: OpenAI Responses;
Claude Code: Anthropic Messages; Gemini CLI: Gemini generateContent; OpenCode and OpenHands: OpenAI
chat completions), and the gateway forwards each call to the replay server with the driver key. The
scripted conversation (the same for every cell: the server reads its place in it from each request)
makes the CLI, through its own shell tool, write a training script into code/, run it (a small real
perturbation of the base model, saved with transformers) and submit output/v1 to the grading API
with curl. Each test then checks its cell's submission record, parsed trace and the gateway's usage
records.

The cells run sealed (``sandbox.mode``, :data:`SANDBOX`): the CLI's install folder is bound
read-only into the sandbox and the grading API and gateway answer at loopback URLs inside it.

``make test`` installs the CLIs first, at their pinned versions, one folder each under
``.cache/agents/`` (``python -m autorl.agents.install <agent>``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from autorl.agent_schema import CliAgentConfig
from autorl.agents.cli import cli_agent_names, find_binary, installed_path, installed_version
from autorl.config import compose
from autorl.errors import ConfigError
from autorl.seal.toolchain import toolchain_dir, toolchain_python
from autorl.workspace.live import trace_event
from tests.helpers.replay_llm_server import ReplayLLM, ReplayServer
from tests.integration.conftest import query, sweep_env

pytestmark = pytest.mark.integration
SECRET = "sk-autorl-test-driver-key"
SANDBOX = "bwrap"  # the default sandbox.mode, which these cells run with

# A random perturbation: the five cells of one sweep submit different weights (the grader answers
# weights another cell already submitted with `duplicate`, not `scored`; every sealed workspace has
# the same path).
TRAIN_PY = """\
import os, shutil, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
base = os.environ["MODEL_PATH"]
model = AutoModelForCausalLM.from_pretrained(base)
tokenizer = AutoTokenizer.from_pretrained(base)
torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
with torch.no_grad():
    for param in model.parameters():
        param.add_(1e-4 * torch.randn_like(param))
shutil.rmtree("output/v1.tmp", ignore_errors=True)
model.save_pretrained("output/v1.tmp")
tokenizer.save_pretrained("output/v1.tmp")
os.rename("output/v1.tmp", "output/v1")
print("saved output/v1")
"""


@dataclass(frozen=True)
class Cli:
    """One CLI under test: the protocol its calls reach the provider in and how that sends the
    key."""

    agent: str
    protocol: str
    key_header: str

    @property
    def key_value(self) -> str:
        """The value of :attr:`key_header` that carries the driver key."""
        return f"Bearer {SECRET}" if self.key_header == "authorization" else SECRET


# The header each provider protocol carries its key in, as the gateway forwards a call.
KEY_HEADERS = {
    "responses": "authorization",
    "chat": "authorization",
    "messages": "x-api-key",
    "gemini": "x-goog-api-key",
}


def _clis() -> list[Cli]:
    """Every registered CLI agent, with the protocol its config names."""
    return [
        Cli(name, str(protocol), KEY_HEADERS[str(protocol)])
        for name in cli_agent_names()
        if (protocol := compose([f"agent={name}"]).agent.protocol)
    ]


CLIS = _clis()


def _agent_python() -> str:
    """The interpreter the scripted steps train with: the sealed agent's toolchain, else this one.

    An absolute path, because CLIs run their shell tool as a login shell (Codex: ``bash -lc``),
    whose ``/etc/profile`` resets ``PATH`` on the host.
    """
    return str(toolchain_python(toolchain_dir())) if SANDBOX == "bwrap" else sys.executable


def _steps() -> list[str]:
    # Some shell tools return before a long command ends (Codex's exec_command after its yield
    # time), so the submit step waits for the model folder, which train.py renames into place.
    # No command substitution: the Gemini CLI refuses commands with $(...) or backquotes.
    submit = (
        "timeout 300 sh -c 'until [ -f output/v1/config.json ]; do sleep 1; done'; "
        'curl -s -X POST "$GRADING_SERVER_URL/submit" -H "Authorization: Bearer $GRADING_TOKEN" '
        "-H 'Content-Type: application/json' -d '{\"model_path\": \"output/v1\"}'"
    )
    return [
        f"mkdir -p code && cat > code/train.py <<'EOF'\n{TRAIN_PY}EOF",
        "env > code/agent_env.txt && id -u > code/agent_uid.txt",
        f"{_agent_python()} code/train.py",
        submit,
    ]


def _command_of(tool_input: Any) -> str:
    """The shell command of a tool call's input, whatever the CLI names its argument."""
    if not isinstance(tool_input, dict):
        return str(tool_input)
    command = tool_input.get("command", tool_input.get("cmd", ""))
    return " ".join(command) if isinstance(command, list) else str(command)


def _require_installed(name: str) -> None:
    agent = compose([f"agent={name}"]).agent
    assert isinstance(agent, CliAgentConfig)
    try:
        binary = find_binary(agent)
    except ConfigError as error:
        pytest.fail(f"this test needs the real {name} CLI (make test-deps installs it): {error}")
    pinned = agent.install.version
    assert (binary, installed_version(agent)) == (str(installed_path(agent)), pinned), (
        f"this test runs the pinned {name} CLI {pinned} from {installed_path(agent)}: "
        f"python -m autorl.agents.install {name}"
    )


@dataclass(frozen=True)
class CliSweep:
    """The one sweep that runs a cell with each CLI, and what the replay server saw."""

    sweep_dir: Path
    requests: list[dict[str, Any]]
    duration_s: float


@pytest.fixture(scope="module")
def cli_sweep(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Iterator[CliSweep]:
    """``agent=codex,claude-code,...`` in one sweep: one Ray start and one baseline for five cells,
    two at a time (the CLIs mostly wait on their model). The replay server answers all five: it
    decides each turn from
    the request body alone."""
    for cli in CLIS:
        _require_installed(cli.agent)
    tmp = tmp_path_factory.mktemp("real-cli")
    ray_tmp = Path(tempfile.mkdtemp(prefix="ar-", dir="/tmp"))  # Ray's socket paths must stay short
    llm_log = tmp / "llm_requests.jsonl"
    replay = ReplayServer(ReplayLLM(_steps(), "Submitted output/v1.", llm_log)).start()
    base = f"http://127.0.0.1:{replay.port}"
    out_dir = tmp / "out"
    command = [
        sys.executable,
        "-m",
        "autorl.sweep",
        f"agent={','.join(c.agent for c in CLIS)}",
        "driver=local",
        f"driver.base_url={base}/v1",
        f"+driver.protocols.gemini={base}/v1beta",  # chat, responses and messages follow base_url
        "driver.api_key_env=AUTORL_TEST_DRIVER_KEY",
        "driver.price_per_mtok={input: 1.0, output: 4.0}",
        "task.build.fixture.train_size=200",
        "task.build.fixture.eval_size=40",  # scoring is not under test here
        "budget.seconds=420",
        f"out_dir={out_dir}",
        "progress=false",  # sandbox: the default (SANDBOX)
        # The grader's CPU and two cells at a time.
        "cluster.include_dashboard=false",
        "cluster.num_cpus=3",
        f"cluster.temp_dir={ray_tmp}",
    ]
    env = sweep_env(cache_dir) | {"AUTORL_TEST_DRIVER_KEY": SECRET}
    started = time.monotonic()
    try:
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    finally:
        replay.stop()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert out_dir.is_dir(), result.stdout[-3000:] + result.stderr[-3000:]
    (sweep_dir,) = [p for p in out_dir.iterdir() if p.is_dir()]
    assert result.returncode == 0, (
        result.stdout[-3000:]
        + result.stderr[-3000:]
        + "".join(
            f"\n--- {log}:\n{log.read_text()[-2000:]}"
            for log in sweep_dir.glob("cells/*/agent.log")
        )
    )
    requests = [json.loads(line) for line in llm_log.read_text().splitlines()]
    yield CliSweep(sweep_dir, requests, time.monotonic() - started)


def test_the_replay_server_saw_exactly_the_calls_the_gateways_recorded(cli_sweep: CliSweep) -> None:
    """Every request the provider got went through a cell's gateway and was recorded once, in its
    protocol."""
    calls = query(
        cli_sweep.sweep_dir / "records.sqlite",
        "SELECT protocol FROM driver_calls WHERE status_code = 200",
    )
    recorded = sorted(str(protocol) for (protocol,) in calls)
    assert recorded == sorted(r["protocol"] for r in cli_sweep.requests)


@pytest.mark.parametrize("cli", CLIS, ids=[c.agent for c in CLIS])
def test_cli_runs_a_cell_through_the_gateway(cli: Cli, cli_sweep: CliSweep) -> None:
    cell = f"gsm8k.{cli.agent}.local.tiny.s0"
    sweep_dir = cli_sweep.sweep_dir
    cell_dir = sweep_dir / "cells" / cell
    log = (
        (cell_dir / "agent.log").read_text()
        if (cell_dir / "agent.log").exists()
        else "(no agent.log)"
    )
    # The CLI wrote and ran the training script, and the grading API scored its submission.
    workspace = cell_dir / "workspace"
    train = workspace / "code" / "train.py"
    assert train.exists() and "AutoModelForCausalLM" in train.read_text(), log[-3000:]
    assert (workspace / "output" / "v1" / "config.json").exists(), log[-3000:]
    db = sweep_dir / "records.sqlite"
    [(status, score)] = query(db, "SELECT status, score FROM submissions WHERE cell_id = ?", cell)
    assert status == "scored" and score is not None, log[-3000:]
    [(exit_class, exit_code, sandbox, tokens_in, tokens_out, cost)] = query(
        db,
        "SELECT exit_class, exit_code, sandbox, tokens_in, tokens_out, cost_usd FROM cells WHERE "
        "cell_id = ?",
        cell,
    )
    assert (exit_class, exit_code, sandbox) == ("exited", 0, SANDBOX), log[-3000:]

    # The gateway recorded every model call in the CLI's protocol and summed them into the cell.
    calls = query(
        db,
        "SELECT protocol, status_code, tokens_in, tokens_out, error FROM driver_calls WHERE "
        "cell_id = ?",
        cell,
    )
    served = [c for c in calls if c[1] == 200]
    assert len(served) >= len(_steps()) + 1, calls
    assert all(c[0] == cli.protocol and c[2] > 0 and c[3] > 0 for c in served), calls
    assert tokens_in == sum(c[2] for c in calls) and tokens_out == sum(c[3] for c in calls)
    assert cost == pytest.approx((tokens_in * 1.0 + tokens_out * 4.0) / 1e6)
    # The provider got the real key in this protocol's header (OpenCode and OpenHands share theirs);
    # the agent only ever had the cell's gateway token.
    assert {
        r["headers"].get(cli.key_header)
        for r in cli_sweep.requests
        if r["protocol"] == cli.protocol
    } == {cli.key_value}
    agent_env = (workspace / "code" / "agent_env.txt").read_text()
    assert SECRET not in agent_env and "AUTORL_DRIVER_TOKEN=" in agent_env
    # Sealed, the CLI and its commands ran as a host uid of the cell's own (the sweep runs as root
    # here).
    uid = int((workspace / "code" / "agent_uid.txt").read_text())
    assert uid >= 200_000 if os.geteuid() == 0 else uid == os.geteuid()

    # The CLI's JSON stream was parsed into the cell's trace: the four steps as tool calls, the
    # scored submission among the tool results, the counts in the record store.
    trace = [json.loads(line) for line in (cell_dir / "trace.jsonl").read_text().splitlines()]
    commands = [
        _command_of(e["input"])
        for e in trace
        if e["kind"] == "tool_call" and _command_of(e["input"])
    ]
    assert len(commands) == 4 and "code/train.py" in commands[2] and "/submit" in commands[3], (
        commands
    )
    outputs = [
        str(e.get("output", "")).replace(" ", "").replace("\\", "")
        for e in trace
        if e["kind"] == "tool_result"
    ]
    assert any('"status":"scored"' in o for o in outputs if "submission_id" in o), trace[-6:]
    [(tool_calls, messages, trace_events)] = query(
        db, "SELECT tool_calls, messages, events FROM traces WHERE cell_id = ?", cell
    )
    assert (
        trace_events == len(trace)
        and tool_calls == sum(e["kind"] == "tool_call" for e in trace) >= 4
    )
    assert (
        messages == sum(e["kind"] == "message" and e.get("role") == "assistant" for e in trace) >= 1
    )
    # The same events reached the record store while the cell ran (the live viewer's steps), with
    # the commands and outputs as their text, and the agent's cgroup was sampled.
    live = query(
        db, "SELECT seq, kind, text FROM trace_events WHERE cell_id = ? ORDER BY seq", cell
    )
    expected = [trace_event(cell, e, 0.0) for e in trace]
    assert live == [(e.seq, e.kind, e.text) for e in expected]
    [(samples, memory)] = query(
        db, "SELECT COUNT(*), MAX(memory_bytes) FROM resource_samples WHERE cell_id = ?", cell
    )
    assert samples >= 1 and memory > 0, (samples, memory)
    print(
        f"{cli.agent} ({sandbox}): the five-cell sweep {cli_sweep.duration_s:.0f} s; gateway calls "
        f"{len(calls)} "
        f"({len(calls) - len(served)} not 200: {[c[1:2] + c[4:] for c in calls if c[1] != 200]}); "
        f"trace: {trace_events} events, {tool_calls} tool calls, {messages} messages"
    )
