"""A real agent CLI (OpenAI Codex, installed from the npm registry) runs a whole cell end to end.

``python -m autorl.sweep agent=codex driver=local`` with ``driver.base_url`` pointed at the replay
LLM server (tests/helpers/replay_llm_server.py: a stand-in for the paid OpenAI API that speaks
the real Responses protocol, streaming). Codex talks to the cell's driver gateway, which forwards
to the replay server with the driver key; the scripted conversation makes Codex write a training
script into code/, run it (a small real perturbation of the base model, saved with transformers)
and submit output/v1 to the grading API with curl.

``make test`` installs the CLI first, at its pinned version, into ``<agents_dir>/codex/``
(``python -m autorl.agents.install codex``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autorl.agents.cli import find_binary, installed_path, installed_version
from autorl.config import compose
from autorl.errors import ConfigError
from autorl.schema import CliAgentConfig
from tests.helpers.replay_llm_server import ReplayLLM, ReplayServer
from tests.integration.conftest import query, sweep_env

pytestmark = pytest.mark.integration
CELL = "gsm8k.codex.local.tiny.s0"
SECRET = "sk-autorl-test-driver-key"

TRAIN_PY = """\
import os, shutil, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
base = os.environ["MODEL_PATH"]
model = AutoModelForCausalLM.from_pretrained(base)
tokenizer = AutoTokenizer.from_pretrained(base)
torch.manual_seed(0)
with torch.no_grad():
    for param in model.parameters():
        param.add_(1e-4 * torch.randn_like(param))
shutil.rmtree("output/v1.tmp", ignore_errors=True)
model.save_pretrained("output/v1.tmp")
tokenizer.save_pretrained("output/v1.tmp")
os.rename("output/v1.tmp", "output/v1")
print("saved output/v1")
"""


def _steps() -> list[str]:
    # Codex's exec_command returns after its yield time even if a command still runs, so the
    # submit step waits for the model folder, which train.py renames into place when complete.
    submit = (
        "for i in $(seq 1 600); do [ -f output/v1/config.json ] && break; sleep 1; done; "
        "curl -s -X POST \"$GRADING_SERVER_URL/submit\" -H \"Authorization: Bearer $GRADING_TOKEN\" "
        "-H 'Content-Type: application/json' -d '{\"model_path\": \"output/v1\"}'"
    )
    return [
        f"mkdir -p code && cat > code/train.py <<'EOF'\n{TRAIN_PY}EOF",
        "env > code/agent_env.txt",
        f"{sys.executable} code/train.py",
        submit,
    ]


@pytest.fixture()
def codex_installed() -> None:
    agent = compose(["agent=codex"]).agent
    assert isinstance(agent, CliAgentConfig)
    try:
        binary = find_binary(agent)
    except ConfigError as error:
        pytest.fail(f"this test needs the real Codex CLI (make test installs it): {error}")
    pinned = agent.install.version
    assert (binary, installed_version(agent)) == (str(installed_path(agent)), pinned), (
        f"this test runs the pinned Codex CLI {pinned} from {installed_path(agent)}: "
        "python -m autorl.agents.install codex")


def test_codex_runs_a_cell_through_the_gateway(codex_installed: None, tmp_path: Path, ray_tmp: Path, cache_dir: Path) -> None:
    replay = ReplayServer(ReplayLLM(_steps(), "Submitted output/v1.", tmp_path / "llm_requests.jsonl")).start()
    out_dir = tmp_path / "out"
    command = [
        sys.executable, "-m", "autorl.sweep", "agent=codex", "driver=local", f"driver.base_url={replay.base_url}",
        "driver.api_key_env=AUTORL_TEST_DRIVER_KEY", "driver.price_per_mtok={input: 1.0, output: 4.0}",
        "task.build.fixture.train_size=200", "task.build.fixture.eval_size=40",  # scoring is not under test here
        "budget.seconds=420", f"out_dir={out_dir}", "progress=false",
        "cluster.include_dashboard=false", "cluster.num_cpus=2", f"cluster.temp_dir={ray_tmp}",
    ]
    env = sweep_env(cache_dir) | {"AUTORL_TEST_DRIVER_KEY": SECRET}
    try:
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    finally:
        replay.stop()
    (sweep_dir,) = [p for p in out_dir.iterdir() if p.is_dir()]
    cell_dir = sweep_dir / "cells" / CELL
    log = (cell_dir / "agent.log").read_text() if (cell_dir / "agent.log").exists() else "(no agent.log)"
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:] + log[-3000:]

    # The CLI wrote and ran the training script, and the grading API scored its submission.
    workspace = cell_dir / "workspace"
    assert "AutoModelForCausalLM" in (workspace / "code" / "train.py").read_text()
    assert (workspace / "output" / "v1" / "config.json").exists()
    db = sweep_dir / "records.sqlite"
    [(status, score)] = query(db, "SELECT status, score FROM submissions WHERE cell_id = ?", CELL)
    assert status == "scored" and score is not None, log[-3000:]
    [(exit_class, exit_code, tokens_in, tokens_out, cost)] = query(
        db, "SELECT exit_class, exit_code, tokens_in, tokens_out, cost_usd FROM cells WHERE cell_id = ?", CELL)
    assert (exit_class, exit_code) == ("exited", 0)

    # The gateway recorded every model call (streamed Responses API) and summed them into the cell.
    calls = query(db, "SELECT protocol, stream, status_code, tokens_in, tokens_out, cost_usd FROM driver_calls WHERE cell_id = ?", CELL)
    requests = [json.loads(line) for line in (tmp_path / "llm_requests.jsonl").read_text().splitlines()]
    assert len(calls) == len(requests) >= 5
    assert all(c[:3] == ("responses", 1, 200) and c[3] > 0 and c[4] > 0 for c in calls)
    assert tokens_in == sum(c[3] for c in calls) and tokens_out == sum(c[4] for c in calls)
    assert cost == pytest.approx((tokens_in * 1.0 + tokens_out * 4.0) / 1e6)
    # The provider got the real key; the agent only ever had the cell's gateway token.
    assert {r["headers"]["authorization"] for r in requests} == {f"Bearer {SECRET}"}
    agent_env = (workspace / "code" / "agent_env.txt").read_text()
    assert SECRET not in agent_env and "AUTORL_DRIVER_TOKEN=" in agent_env

    # The CLI's JSON stream was parsed into the cell's trace, with the same calls as tool calls.
    trace = [json.loads(line) for line in (cell_dir / "trace.jsonl").read_text().splitlines()]
    commands = [e["input"]["command"] for e in trace if e["kind"] == "tool_call"]
    assert len(commands) == 4 and "code/train.py" in commands[2] and "/submit" in commands[3]
    submit_results = [e["output"].replace(" ", "") for e in trace if e["kind"] == "tool_result" and "submission_id" in e["output"]]
    assert submit_results and '"status":"scored"' in submit_results[-1], trace[-6:]
    [(tool_calls, trace_in)] = query(db, "SELECT tool_calls, tokens_in FROM traces WHERE cell_id = ?", CELL)
    assert tool_calls == 4 and trace_in > 0
