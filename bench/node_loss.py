"""Benchmark: cell-seconds and driver tokens lost per node failure, resume vs restart, and the
checkpoint's cost on a scripted GSM8K cell's wall time (issue #43 item 5).

Two parts, one run:

1. **Checkpoint cost** (measured). A workspace whose ``output/`` holds 1 GB of model-sized files
   (a few safetensors-sized shards of random bytes, a config and a tokenizer), with small files in
   ``code/`` and the agent's HOME. The scripted GSM8K agent's real SFT
   (``agent_kit.scripted.common._train_sft``, TRL on the tiny model and the task's fixture rows)
   runs in a child process in that workspace, side by side: alone, and while this process takes
   :func:`autorl.workspace.checkpoint.take_snapshot` of the workspace every ``--interval-s``
   (scaled down so several happen), freezing the child with SIGSTOP for the listing as the cell's
   cgroup would be. Then :func:`autorl.workspace.checkpoint_restore.restore_snapshot` rebuilds the
   latest checkpoint in a fresh folder. Printed: the checkpoints (first: the 1 GB copy; then
   incremental), frozen time, the training's wall time with and without, and the extrapolation to
   the default ``cell.checkpoint.every_s`` over a cell's wall time, against the 2 % target.
2. **Node loss** (simulated, Monte Carlo with a fixed seed). Node failures arrive at a rate per
   node-hour on cells of ``--cell-hours`` of work; a failure can also hit during setup or restore.
   ``restart`` loses all the work done plus the attempt's setup; ``resume`` loses the work since
   the last checkpoint plus setup and restore, and pays the checkpoints' cost all along. The
   restore time and the checkpoint cost come from part 1; setup time and driver tokens per agent
   hour are assumed (printed as such).

    python bench/node_loss.py                       # both parts, the defaults
    python bench/node_loss.py --json out.json --train-steps 300 --interval-s 20

Light imports (no Ray); the training child imports TRL.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MB = 1 << 20
#: What the default config checkpoints at (``conf/config.yaml`` ``cell.checkpoint.every_s``).
DEFAULT_EVERY_S = 600.0
TARGET = 0.02


# --- part 2: the simulation ----------------------------------------------------------------------


@dataclass(frozen=True)
class LossModel:
    """The inputs of one failure-rate simulation.

    Attributes:
        work_s: Agent work a cell needs (seconds of its budget).
        every_s: Seconds of work between two checkpoints (resume only).
        setup_s: Wall time an attempt spends before the agent runs (placement, sandbox, model).
        restore_s: Wall time a resumed attempt spends restoring its checkpoint.
        checkpoint_share: Wall time the checkpoints add per second of work (resume only).
        tokens_per_hour: Driver tokens an agent spends per hour of work.
    """

    work_s: float
    every_s: float
    setup_s: float
    restore_s: float
    checkpoint_share: float
    tokens_per_hour: float


@dataclass(frozen=True)
class LossFigures:
    """A mode's mean figures over the draws.

    Attributes:
        failures_per_cell: Node failures a cell sees before it completes.
        lost_s_per_failure: Cell-seconds (wall time on the cell's GPUs) lost per failure: the
            cell's wall time minus its failure-free wall time, over its failures.
        lost_work_s_per_failure: Of those, agent work done again.
        lost_tokens_per_failure: Driver tokens spent on work done again.
        lost_s_per_cell: Cell-seconds lost per cell, failures and checkpoint cost together (against
            a failure-free cell without checkpoints).
        checkpoint_s_per_cell: Wall time the checkpoints add to a cell (resume only).
    """

    failures_per_cell: float
    lost_s_per_failure: float
    lost_work_s_per_failure: float
    lost_tokens_per_failure: float
    lost_s_per_cell: float
    checkpoint_s_per_cell: float


def kept_after_failure(mode: str, done_s: float, every_s: float) -> float:
    """Work (seconds) an attempt keeps when its node dies after ``done_s`` seconds of its work.

    ``restart`` keeps nothing; ``resume`` keeps the work up to its last checkpoint, one every
    ``every_s`` of work.

    >>> kept_after_failure("restart", 3700.0, 600.0), kept_after_failure("resume", 3700.0, 600.0)
    (0.0, 3600.0)
    """
    if mode == "restart":
        return 0.0
    if mode == "resume":
        return math.floor(done_s / every_s) * every_s
    raise ValueError(f"mode {mode!r} is neither resume nor restart")


def simulate_cell(
    mode: str, model: LossModel, rate_per_hour: float, rng: random.Random
) -> tuple[int, float, float]:
    """One cell to completion under node failures (exponential times between them).

    Returns:
        ``(failures, wall_s, lost_work_s)``: the failures it saw, its wall time over all attempts,
        and the agent work it did again.
    """
    share = model.checkpoint_share if mode == "resume" else 0.0
    progress = 0.0
    failures = 0
    wall = 0.0
    lost_work = 0.0
    while True:
        before = model.setup_s + (model.restore_s if mode == "resume" and progress > 0 else 0.0)
        needed = before + (model.work_s - progress) * (1.0 + share)
        alive = rng.expovariate(rate_per_hour / 3600.0) if rate_per_hour > 0 else math.inf
        if alive >= needed:
            return failures, wall + needed, lost_work
        failures += 1
        wall += alive
        done = max(0.0, alive - before) / (1.0 + share)
        kept = kept_after_failure(mode, done, model.every_s)
        lost_work += done - kept
        progress += kept


def simulate(
    mode: str, model: LossModel, rate_per_hour: float, draws: int, seed: int
) -> LossFigures:
    """Mean figures of ``draws`` cells of ``mode`` (``resume`` or ``restart``) at a failure rate."""
    rng = random.Random(seed)
    share = model.checkpoint_share if mode == "resume" else 0.0
    failure_free = model.setup_s + model.work_s * (1.0 + share)
    plain = model.setup_s + model.work_s
    failures = 0
    lost_wall = 0.0
    lost_work = 0.0
    for _ in range(draws):
        count, wall, work = simulate_cell(mode, model, rate_per_hour, rng)
        failures += count
        lost_wall += wall - failure_free
        lost_work += work
    per = 1.0 / failures if failures else 0.0
    return LossFigures(
        failures_per_cell=failures / draws,
        lost_s_per_failure=lost_wall * per,
        lost_work_s_per_failure=lost_work * per,
        lost_tokens_per_failure=lost_work * per * model.tokens_per_hour / 3600.0,
        lost_s_per_cell=(lost_wall / draws) + (failure_free - plain),
        checkpoint_s_per_cell=failure_free - plain,
    )


# --- part 1: the measured checkpoint cost ---------------------------------------------------------


def make_workspace(root: Path, output_mb: int, shards: int) -> dict[str, Path]:
    """A cell's trees: ``output/`` of ``output_mb`` MB (``shards`` safetensors-sized files of random
    bytes, a config, a tokenizer), ``code/`` and ``home/`` of small files (scripts, logs, a CLI's
    session)."""
    trees = {name: root / name for name in ("code", "output", "home")}
    model = trees["output"] / "v0"
    model.mkdir(parents=True)
    per_shard = output_mb * MB // shards
    for index in range(shards):
        with open(model / f"model-{index + 1:05d}-of-{shards:05d}.safetensors", "wb") as handle:
            for _ in range(per_shard // (16 * MB)):
                handle.write(os.urandom(16 * MB))
            handle.write(os.urandom(per_shard % (16 * MB)))
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (model / "tokenizer.json").write_bytes(os.urandom(2 * MB))
    for index in range(200):
        (trees["code"] / "scripts").mkdir(parents=True, exist_ok=True)
        (trees["code"] / "scripts" / f"step_{index}.py").write_text(f"print({index})\n" * 40)
    for index in range(300):
        session = trees["home"] / ".codex" / "sessions" / f"{index % 10}"
        session.mkdir(parents=True, exist_ok=True)
        (session / f"rollout-{index}.jsonl").write_bytes(os.urandom(4096))
    return trees


class StopFreezer:
    """A :class:`autorl.workspace.checkpoint.Freezer` of one process group: SIGSTOP / SIGCONT
    stand in for the cell's cgroup freezer (no cgroup is delegated to a benchmark)."""

    def __init__(self, pgid: int) -> None:
        self.pgid = pgid

    def freeze(self, timeout_s: float = 5.0) -> bool:
        """Stop every process of the group."""
        try:
            os.killpg(self.pgid, signal.SIGSTOP)
        except ProcessLookupError:
            return False
        return True

    def thaw(self) -> None:
        """Let them run again."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGCONT)


def train_worker(workspace: Path, data: Path, base: Path, steps: int) -> None:
    """The child: the scripted GSM8K agent's SFT, as its recipe calls it, in ``workspace``.

    Only the budget lookup is replaced (there is no grading API here): the deadline callback gets
    a budget far larger than the run."""
    import yaml

    import agent_kit.scripted.common as common
    from agent_kit.scripted import settings as kinds
    from tasks.gsm8k.agent.recipe import load_rows

    common.remaining_s = lambda: 1.0e9
    os.chdir(workspace)
    rows = load_rows(data)
    conversations = [
        [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["solution"]}]
        for r in rows
    ]
    scripted = yaml.safe_load((ROOT / "conf" / "agent" / "scripted.yaml").read_text())
    sft = {**scripted["sft"], "max_steps": steps}
    settings = kinds.ScriptedSettings(
        recipe_dir="",
        recipe="recipe:run",
        seed=0,
        sft=kinds.SftSettings(**sft),
        grpo=kinds.GrpoSettings(**scripted["grpo"]),
        online_grpo=kinds.OnlineGrpoSettings(**scripted["online_grpo"]),
    )
    started = time.monotonic()
    common._train_sft(settings, conversations, str(base), workspace / "output" / "v1", 0.7)
    print(json.dumps({"train_s": time.monotonic() - started}), flush=True)


@dataclass(frozen=True)
class TrainRun:
    """One training run of the child, with the checkpoints taken beside it.

    Attributes:
        wall_s: The child's wall time, start to exit.
        train_s: The SFT call's own time (as the child measured it).
        cpu_s: The child's CPU time (user and system), which other work on the machine does not
            lengthen as it does the wall time.
        load: The machine's 1-minute load average at the run's end.
        checkpoints: Each checkpoint's figures (``SnapshotResult`` fields that matter here).
    """

    wall_s: float
    train_s: float
    cpu_s: float
    load: float
    checkpoints: list[dict[str, Any]]


def run_training(
    args: argparse.Namespace,
    workspace: Path,
    trees: dict[str, Path],
    store_dir: Path | None,
    data: Path,
    base: Path,
    steps: int | None = None,
) -> TrainRun:
    """Train once in ``workspace`` (``steps``, default ``--train-steps``); with ``store_dir``,
    checkpoint its trees every interval."""
    from autorl.cell_schema import CheckpointConfig
    from autorl.workspace.checkpoint import CheckpointStore, take_snapshot

    shutil.rmtree(workspace / "output" / "v1", ignore_errors=True)
    shutil.rmtree(workspace / "code" / "runs", ignore_errors=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--train-worker", str(workspace)]
    command += f"--data {data} --base {base} --train-steps {steps or args.train_steps}".split()
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(args.threads),
        # As autorl starts its agents: idle OpenMP threads sleep instead of spinning on shared
        # cores (bench/omp_wait_policy.py).
        "OMP_WAIT_POLICY": "PASSIVE",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
        "TRANSFORMERS_VERBOSITY": "error",
    }
    log = workspace.parent / "train.log"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with open(log, "wb") as errors:  # the child keeps its own descriptor of the log
        child = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=errors, env=env, start_new_session=True
        )
    taken: list[dict[str, Any]] = []
    stop = threading.Event()

    def checkpoints() -> None:
        assert store_dir is not None
        store = CheckpointStore(store_dir)
        cfg = CheckpointConfig(
            enabled=True,
            every_s=args.interval_s,
            max_bytes=128 << 30,
            max_files=500000,
            max_file_bytes=32 << 30,
        )
        freezer = StopFreezer(child.pid)
        while not stop.wait(args.interval_s):
            cpu = time.thread_time()
            result = take_snapshot(store, trees, cfg, freezer=freezer)
            taken.append(
                {
                    "at_s": round(time.monotonic() - started, 2),
                    "cpu_s": round(time.thread_time() - cpu, 4),
                    "total_s": result.total_s,
                    "frozen_s": result.frozen_s,
                    "files": result.files,
                    "files_read": result.files_read,
                    "bytes_total": result.bytes_total,
                    "bytes_new": result.bytes_new,
                    "frozen": result.frozen,
                }
            )

    thread = threading.Thread(target=checkpoints, daemon=True) if store_dir else None
    if thread:
        thread.start()
    out, _ = child.communicate()
    wall = time.monotonic() - started
    stop.set()
    if thread:
        thread.join()
    if child.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"training child exited {child.returncode}:\n{tail}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    train_s = float(json.loads(out.decode().strip().splitlines()[-1])["train_s"])
    return TrainRun(wall, train_s, cpu_s, os.getloadavg()[0], taken)


def extrapolate(first_s: float, incremental_s: float, every_s: float, cell_s: float) -> float:
    """Share of a cell's wall time its checkpoints take: one full copy of the output (the first),
    then an incremental one every ``every_s``.

    >>> round(extrapolate(10.0, 0.5, 600.0, 6000.0), 6)  # 10 checkpoints: 10 + 9 * 0.5 s
    0.002417
    """
    count = math.floor(cell_s / every_s)
    if count == 0:
        return 0.0
    return (first_s + (count - 1) * incremental_s) / cell_s


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Part 1: the workspace, the training runs side by side, the restore."""
    from autorl.models.tiny import ensure_tiny_model
    from autorl.workspace.checkpoint import CheckpointStore, restore_snapshot
    from tasks.gsm8k.fixture import fixture_rows

    base = ensure_tiny_model(Path(args.cache_dir) / "models")
    data = work / "data"
    data.mkdir()
    with open(data / "train.jsonl", "w") as handle:
        for row in fixture_rows(0, args.train_rows):
            handle.write(json.dumps(row) + "\n")
    started = time.monotonic()
    trees = make_workspace(work / "ws", args.output_mb, args.shards)
    made_s = time.monotonic() - started
    print(f"workspace: output/ {args.output_mb} MB in {args.shards} shards, made in {made_s:.1f} s")
    warm = run_training(args, work / "ws", trees, None, data, base, steps=2)
    print(f"  warm-up run (2 steps, not counted): wall {warm.wall_s:.1f} s", flush=True)
    runs: dict[str, list[TrainRun]] = {"without": [], "with": []}
    # ABBA order: a drift of the machine's load over the runs weighs on both sides alike.
    order = [
        label
        for pair in range(args.repeats)
        for label in (("without", "with") if pair % 2 == 0 else ("with", "without"))
    ]
    for index, label in enumerate(order):
        store = work / f"store-{index}" if label == "with" else None
        if store:
            store.mkdir()
        run = run_training(args, work / "ws", trees, store, data, base)
        runs[label].append(run)
        spent = ", ".join(f"{c['total_s']:.2f}" for c in run.checkpoints)
        print(
            f"  run {index + 1}/{len(order)} {label:>7} checkpoints: wall {run.wall_s:6.1f} s, "
            f"train {run.train_s:6.1f} s, CPU {run.cpu_s:6.1f} s, load {run.load:.1f}, "
            f"checkpoints taken: {len(run.checkpoints)} [{spent}] s",
            flush=True,
        )
    last_store = work / f"store-{max(i for i, label in enumerate(order) if label == 'with')}"
    dest = work / "restored"
    dest.mkdir()
    started = time.monotonic()
    restored = restore_snapshot(CheckpointStore(last_store), {n: dest / n for n in trees})
    restore_s = time.monotonic() - started
    with_runs = runs["with"]
    every = [c for r in with_runs for c in r.checkpoints]
    firsts = [r.checkpoints[0] for r in with_runs if r.checkpoints]
    later = [c for r in with_runs for c in r.checkpoints[1:]]
    if not firsts or not later:
        raise RuntimeError("fewer than two checkpoints per run: lower --interval-s")

    def mean(checkpoints: list[dict[str, Any]], key: str) -> float:
        return float(sum(c[key] for c in checkpoints) / len(checkpoints))

    return {
        "runs": {k: [asdict(r) for r in v] for k, v in runs.items()},
        "restore_s": restore_s,
        "restored_bytes": restored.bytes,
        "restored_files": restored.files,
        **{f"first_{key}": mean(firsts, key) for key in ("total_s", "frozen_s", "cpu_s")},
        **{f"incremental_{key}": mean(later, key) for key in ("total_s", "frozen_s", "cpu_s")},
        "max_frozen_s": max(c["frozen_s"] for c in every),
        "all_frozen": all(c["frozen"] for c in every),
        "first_bytes_new": firsts[0]["bytes_new"],
        "checkpoints_per_run": [len(r.checkpoints) for r in with_runs],
    }


def report_cost(args: argparse.Namespace, measured: dict[str, Any]) -> dict[str, Any]:
    """Print part 1's table; the checkpoint cost figures, measured and extrapolated."""
    runs = measured["runs"]
    print()
    print("Checkpoint cost (measured)")
    ratios: dict[str, float] = {}
    for key, what in (("wall_s", "wall"), ("cpu_s", "CPU")):
        without = [r[key] for r in runs["without"]]
        with_ = [r[key] for r in runs["with"]]
        ratios[key] = (sum(with_) / len(with_)) / (sum(without) / len(without)) - 1.0
        print(
            f"  training {what} time: without {', '.join(f'{w:.1f}' for w in without)} s; "
            f"with a checkpoint every {args.interval_s:g} s {', '.join(f'{w:.1f}' for w in with_)}"
            f" s; measured ratio {100 * ratios[key]:+.2f} %"
        )
    print(f"  checkpoints per run with: {measured['checkpoints_per_run']}")
    for kind, what in (
        ("first", f"copies {measured['first_bytes_new'] / MB:.0f} MB"),
        ("incremental", "unchanged files are not read"),
    ):
        print(
            f"  {kind} checkpoint ({what}): {measured[f'{kind}_total_s']:.3f} s wall, "
            f"{measured[f'{kind}_cpu_s']:.3f} s CPU, frozen {measured[f'{kind}_frozen_s']:.4f} s"
        )
    print(
        f"  longest freeze {measured['max_frozen_s']:.4f} s, every listing frozen: "
        f"{measured['all_frozen']}; restore of the latest checkpoint {measured['restore_s']:.2f} s "
        f"({measured['restored_files']} files, {measured['restored_bytes'] / MB:.0f} MB)"
    )
    print()
    print(
        f"Extrapolated to every_s = {DEFAULT_EVERY_S:g} s: one full copy of output/, then "
        "incremental ones; share of the cell's wall time"
    )
    print(
        f"  {'cell wall time':<20} {'checkpoints':>11} {'frozen':>8} {'CPU':>8} "
        f"{'whole wall':>10}  target <= 2 % (on whole wall)"
    )
    extrapolated: dict[str, Any] = {}
    for hours in (1, 4, 12):
        cell_s = hours * 3600.0
        shares = {
            name: extrapolate(
                measured[f"first_{key}"], measured[f"incremental_{key}"], DEFAULT_EVERY_S, cell_s
            )
            for name, key in (("frozen", "frozen_s"), ("cpu", "cpu_s"), ("wall", "total_s"))
        }
        count = math.floor(cell_s / DEFAULT_EVERY_S)
        extrapolated[f"{hours}h"] = {"cell_s": cell_s, "checkpoints": count, **shares}
        print(
            f"  {f'{hours} h ({cell_s:.0f} s)':<20} {count:>11} {100 * shares['frozen']:>7.3f}% "
            f"{100 * shares['cpu']:>7.3f}% {100 * shares['wall']:>9.3f}%  "
            f"{'met' if shares['wall'] <= TARGET else 'missed'}"
        )
    full_every = measured["first_total_s"] / DEFAULT_EVERY_S
    print(
        f"  worst case, a new {args.output_mb} MB output every interval (a full copy each time): "
        f"{100 * full_every:.2f} % ({'met' if full_every <= TARGET else 'missed'})"
    )
    return {"measured_ratio": ratios, "extrapolated": extrapolated, "full_copy": full_every}


def report_loss(args: argparse.Namespace, measured: dict[str, Any], share: float) -> list[Any]:
    """Print part 2's table: the simulation at each failure rate, resume and restart."""
    model = LossModel(
        work_s=args.cell_hours * 3600.0,
        every_s=DEFAULT_EVERY_S,
        setup_s=args.setup_s,
        restore_s=measured["restore_s"],
        checkpoint_share=share,
        tokens_per_hour=args.tokens_per_hour,
    )
    print()
    print(
        f"Node loss, simulated: {args.draws} cells per rate and mode, seed {args.seed}, "
        f"{args.cell_hours:g} h of work per cell, a checkpoint every {DEFAULT_EVERY_S:g} s"
    )
    print(
        f"  measured: restore {model.restore_s:.2f} s, checkpoint cost {100 * share:.3f} % of wall "
        f"time (whole checkpoint time, {args.cell_hours:g} h cell)"
    )
    print(
        f"  assumed: setup {model.setup_s:g} s per attempt, {model.tokens_per_hour:,.0f} driver "
        "tokens per agent hour, failures independent (exponential), no termination notice"
    )
    print(
        f"  {'failures/node-h':>15} {'mode':>8} {'failures/cell':>13} {'lost s/failure':>14} "
        f"{'redone work s':>13} {'tokens/failure':>14} {'lost s/cell':>11} {'ckpt s/cell':>11}"
    )
    rows = []
    for rate in args.rates:
        for mode in ("restart", "resume"):
            figures = simulate(mode, model, rate, args.draws, args.seed)
            rows.append({"rate_per_node_hour": rate, "mode": mode, **asdict(figures)})
            print(
                f"  {rate:>15g} {mode:>8} {figures.failures_per_cell:>13.3f} "
                f"{figures.lost_s_per_failure:>14.0f} {figures.lost_work_s_per_failure:>13.0f} "
                f"{figures.lost_tokens_per_failure:>14,.0f} {figures.lost_s_per_cell:>11.0f} "
                f"{figures.checkpoint_s_per_cell:>11.0f}"
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run both parts and print them; write ``--json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-mb", type=int, default=1024, help="size of output/")
    parser.add_argument("--shards", type=int, default=4, help="safetensors files in output/")
    parser.add_argument("--train-steps", type=int, default=150, help="SFT steps per training run")
    parser.add_argument("--train-rows", type=int, default=600, help="fixture rows to train on")
    parser.add_argument("--interval-s", type=float, default=10.0, help="checkpoint interval here")
    parser.add_argument("--repeats", type=int, default=2, help="pairs of runs (without, with)")
    parser.add_argument("--threads", type=int, default=2, help="the training's torch threads")
    parser.add_argument("--rates", type=float, nargs="+", default=[0.01, 0.05, 0.1])
    parser.add_argument("--cell-hours", type=float, default=12.0)
    parser.add_argument("--setup-s", type=float, default=300.0, help="assumed setup per attempt")
    parser.add_argument("--tokens-per-hour", type=float, default=2.0e6, help="assumed")
    parser.add_argument("--draws", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--cache-dir", default=os.environ.get("AUTORL_CACHE_DIR", "~/.cache/autorl")
    )
    parser.add_argument("--root", type=Path, help="working folder (default: a new one in /tmp)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--train-worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--base", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.cache_dir = str(Path(args.cache_dir).expanduser())
    if args.train_worker:
        train_worker(args.train_worker, args.data, args.base, args.train_steps)
        return 0
    work = Path(tempfile.mkdtemp(prefix="node-loss-", dir=args.root))
    try:
        measured = measure(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cost = report_cost(args, measured)
    # The simulated cells pay the checkpoints' whole wall time, as if training stopped for it.
    share = extrapolate(
        measured["first_total_s"],
        measured["incremental_total_s"],
        DEFAULT_EVERY_S,
        args.cell_hours * 3600.0,
    )
    rows = report_loss(args, measured, share)
    if args.json:
        args.json.write_text(
            json.dumps({"measured": measured, "cost": cost, "loss": rows}, indent=1, default=str)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
