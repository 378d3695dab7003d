"""Online RL through the grading API (issue #14): a DeepSearchQA cell's GRPO stage plays its rollouts through
the env endpoints and learns from their rewards.

What the log must show, iteration by iteration: the rollouts and the env-endpoint calls they took, the mean
rollout reward, and what the update did to the rollouts it trained on: the log-likelihood of those with a
positive advantage (they won more than their group) rises and that of those with a negative one falls. That
is the learning signal the rewards carry, checked where it acts; it fails if rewards, groups or advantages
are mixed up, or if the update ignores or reverses them.

A rising rollout reward is not asserted here. On this fixture the recipe's RL does not raise it beyond the
noise of 32 rollouts (standard error about 0.08 an iteration; bench/README.md, "Online RL"), so such an
assertion passes or fails by the draw (CI of 2026-11-28: 16 iterations, 0.25, 0.22, 0.41, 0.34 ... 0.25,
0.31, 0.38, 0.31; the test then asked for a rise of 0.05 and failed). Replaying the same 8 questions every
batch did not change that: seed 0 rose from 0.16 to about 0.3, seed 1 stayed near 0.35 (bench/README.md,
"the CI test's cell with a replayed pool").
"""

from __future__ import annotations

import csv
import re
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import sweep_command, sweep_env

pytestmark = pytest.mark.integration
# 4 and 6 asserted the same with more iterations (about 25 s each alone, 47 s in CI); every one of them had an update
# that raised its winners and lowered its losers (CI of 2026-11-29: +0.12/-2.54, +0.15/-1.69, +0.18/-1.26, +0.08/-0.50).
BATCHES = 2
# A small fixture (8 training questions about 4 towns) and a short SFT (4 x 15 = 60 steps of 8 packed
# questions): a policy that wins about a third of its sampled rollouts, so most groups of 4 hold both wins
# and losses. SFT and RL end by their step counts well inside the budget, however loaded the machine.
CELL = [
    "task=deepsearchqa", "model=small", "budget.seconds=1200", "cell.cpus=2", "cluster.num_cpus=3",
    "task.build.fixture.train_size=8", "task.build.fixture.eval_size=4", "task.build.fixture.distractor_towns=4",
    "agent.sft.steps=15", "agent.sft.batch_size=32", f"agent.online_grpo.batches={BATCHES}",
    "agent.online_grpo.batch_size=32", "agent.online_grpo.num_generations=4", "progress=false",
]
ITERATION = re.compile(r"RL iteration (\d+)/\d+: (\d+) rollouts, (\d+) env-endpoint calls \(\d+ in all\), "
                       r"mean rollout reward ([\d.]+)(?:; update: log-likelihood of rollouts reinforced ([-+][\d.]+), "
                       r"penalized ([-+][\d.]+))?")


def test_grpo_learns_from_env_endpoint_rollouts(tmp_path: Path, ray_tmp: Path, cache_dir: Path) -> None:
    done = subprocess.run(sweep_command(tmp_path / "out", ray_tmp, *CELL), env=sweep_env(cache_dir),
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sweep_dir,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    with open(sweep_dir / "results.csv") as handle:
        (row,) = csv.DictReader(handle)
    log = (sweep_dir / "cells" / row["cell_id"] / "agent.log").read_text()
    iterations = ITERATION.findall(log)
    assert [int(n) for n, *_ in iterations] == list(range(1, BATCHES + 1)), log[-3000:]
    # Every rollout is at least a reset and one step through the endpoints (DeepSearchQA: search, then answer).
    assert all(int(calls) >= 2 * int(rollouts) for _, rollouts, calls, *_ in iterations), iterations
    updates = [(float(up), float(down)) for *_, up, down in iterations if up]
    assert len(updates) >= BATCHES // 2, f"iterations with wins and losses in a group: {iterations}"
    assert all(up > down for up, down in updates), updates
    assert sum(up for up, _ in updates) > 0 > sum(down for _, down in updates), updates
    # The 8 questions are all the training data, so the pool RL replays is SFT's too.
    assert "RL replays 8 training episodes (8 of them in SFT's), 8 a batch, with 16 SFT sequences" in log, log[-3000:]
    assert "submitted output/v2" in log
