"""Online RL through the grading API: an ALFWorld cell's GRPO stage plays its rollouts through the
env endpoints, learns from their rewards, and its reward rises.

What each cell's log must show: every RL iteration's rollouts and the env-endpoint calls they took,
and what the update did to the rollouts it trained on (the log-likelihood of those that won more
than their group ends above that of the others, which falls; pooled over the seeds, the winners'
rises: the learning signal checked where it acts); then
the recipe's probe, the same 128 rollouts of the 8 replayed games played before RL and after it
with the same sampling noise (``agent_kit.hf_noise``).

Why the probe and not the batches' means: another draw of the same policy's 32 rollouts moves a
batch's mean by about 0.08, as much as a few batches of RL move it, so asserting a rise of the means
passes or fails by the draw. Played with the same noise, a rollout changes only where the policy
changed. Why three seeds: one seed's probe still moves by chance, and a single seed's rise or fall
says little (bench/README.md, "the probe", has each seed's figures); the claim is that the probe
pooled over seeds 0, 1 and 2 rises, more of its rollouts winning more after RL than fewer.
"""

from __future__ import annotations

import csv
import re
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import sweep_command, sweep_env

pytestmark = pytest.mark.integration
BATCHES = 5
SEEDS = (0, 1, 2)
# bench/README.md's CI-sized ALFWorld cell: 60 training games in rooms without distractors, 6 eval
# games, SFT 3 x 60 = 180 steps of 6 packed games (a policy that wins a few of its sampled
# rollouts), then 5 RL batches of 8 replayed games x 4 rollouts, and a probe of 4 batches' worth of
# rollouts. SFT and RL end by their step counts, not by the clock: the budget is a ceiling the
# recipe checks before each RL iteration, set far above what an idle machine needs, so that a CI
# machine loaded by the other test worker still runs all five batches. The cells run one at a time.
CELL = [
    "task=alfworld",
    "model=small",
    f"seed={','.join(map(str, SEEDS))}",
    "budget.seconds=3000",
    "cell.cpus=2",
    "cluster.num_cpus=3",
    "task.build.fixture.train_size=60",
    "task.build.fixture.eval_size=6",
    "task.build.fixture.extra_receptacle_kinds=0",
    "task.build.fixture.distractor_objects=0",
    "agent.sft.max_steps=60",
    "agent.sft.per_device_train_batch_size=32",
    f"agent.online_grpo.batches={BATCHES}",
    "agent.online_grpo.probe=4",
    "progress=false",
]
ITERATION = re.compile(
    r"RL iteration (\d+)/\d+: (\d+) rollouts, (\d+) env-endpoint calls \(\d+ in all\), "
    r"mean rollout reward ([\d.]+), inadmissible actions \d+ %(?:; update: log-likelihood of "
    r"rollouts reinforced ([-+][\d.]+), penalized ([-+][\d.]+))?"
)
PROBE = re.compile(
    r"RL probe \(32 x 4 rollouts of the first batch's episodes, the same sampling noise before and "
    r"after\): mean reward ([\d.]+) before RL, ([\d.]+) after; (\d+) of 128 rollouts rose, (\d+) "
    r"fell"
)


def _checked_cell(log: str) -> tuple[list[tuple[float, float]], tuple[float, float, int, int]]:
    """One cell's RL iterations checked; its updates' ``(reinforced, penalized)`` and its probe's
    ``(before, after, rose, fell)``."""
    assert (
        "RL replays 8 training episodes (8 of them in SFT's), 8 a batch, with 16 SFT sequences"
        in log
    ), log[-3000:]
    iterations = ITERATION.findall(log)
    assert [int(n) for n, *_ in iterations] == list(range(1, BATCHES + 1)), log[-3000:]
    # Every rollout is a reset and at least one step through the endpoints (an ALFWorld game
    # takes up to 20).
    assert all(int(calls) >= 2 * int(rollouts) for _, rollouts, calls, *_ in iterations), iterations
    # An iteration updates only where a group of rollouts has wins and losses: a batch that won
    # nothing has nothing to learn from, so it may not update, but every update must move the
    # log-likelihoods the right way.
    updates = [(float(up), float(down)) for *_, up, down in iterations if up]
    assert updates, f"no iteration had wins and losses in a group: {iterations}"
    assert all(up > down for up, down in updates), updates
    # The penalized rollouts always fall; the reinforced ones' small rise can come out below 0 for
    # one seed (the push on the losers shares their tokens), so that is asserted pooled.
    assert sum(down for _, down in updates) < 0, updates
    assert "submitted output/v2" in log
    probe = PROBE.search(log)
    assert probe, log[-3000:]
    return updates, (float(probe[1]), float(probe[2]), int(probe[3]), int(probe[4]))


def test_grpo_on_env_endpoint_rollouts_raises_the_reward(
    tmp_path: Path, ray_tmp: Path, cache_dir: Path
) -> None:
    done = subprocess.run(
        sweep_command(tmp_path / "out", ray_tmp, *CELL),
        env=sweep_env(cache_dir),
        capture_output=True,
        text=True,
        timeout=5400,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sweep_dir,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    with open(sweep_dir / "results.csv") as handle:
        rows = sorted(csv.DictReader(handle), key=lambda row: int(row["seed"]))
    assert [int(row["seed"]) for row in rows] == list(SEEDS)
    cells = sweep_dir / "cells"
    checked = {
        row["seed"]: _checked_cell((cells / row["cell_id"] / "agent.log").read_text())
        for row in rows
    }
    # Most iterations learn: at most one per seed without wins and losses in any group.
    updates = [u for seed_updates, _ in checked.values() for u in seed_updates]
    assert len(updates) >= len(SEEDS) * (BATCHES - 1), f"updates per seed: {checked}"
    # Pooled over the seeds, the rollouts that won more than their group become more likely.
    assert sum(up for up, _ in updates) > 0, f"updates per seed: {checked}"
    probes = {seed: probe for seed, (_, probe) in checked.items()}
    # Pooled over the seeds: the mean of the probe's rollouts before and after, and their count.
    before = sum(p[0] for p in probes.values()) / len(probes)
    after = sum(p[1] for p in probes.values()) / len(probes)
    rose, fell = sum(p[2] for p in probes.values()), sum(p[3] for p in probes.values())
    assert after > before and rose > fell, f"probe per seed (before, after, rose, fell): {probes}"
