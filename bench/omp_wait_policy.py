"""Measurement: training throughput of processes that share cores, with OpenMP's idle threads
spinning or sleeping.

Ray counts CPUs, it does not pin them: two cells of 2 CPUs each on a 4-core node, or a cell beside a
grader, run their torch threads on the same cores whenever the counts are over-subscribed for a
moment (a grader starting, a test runner beside a sweep). torch's OpenMP threads spin while they
wait for work by default (``OMP_WAIT_POLICY`` unset); spinning threads burn the cycles a neighbour
needs. autorl starts agents and the local cluster with ``OMP_WAIT_POLICY=PASSIVE``
(``autorl/actors/workspace.py``, ``autorl/cluster.py``).

This script runs the same training loop (AdamW steps of an MLP about the `small` model's width,
``--threads`` threads) alone and as ``--processes`` copies at once, under each policy, side by side
in one run, and prints the steps per second of each process and in all.

    python bench/omp_wait_policy.py --seconds 20
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

WORKER = """
import sys, time, torch
torch.manual_seed(0)
def block():
    return (torch.nn.Linear(256, 768), torch.nn.GELU(), torch.nn.Linear(768, 256))
model = torch.nn.Sequential(*[layer for _ in range(4) for layer in block()])
x = torch.randn(8, 250, 256)
optimizer = torch.optim.AdamW(model.parameters(), 1e-4)
start, steps = time.monotonic(), 0
while time.monotonic() - start < float(sys.argv[1]):
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    steps += 1
print(steps / (time.monotonic() - start))
"""


def run(processes: int, policy: str | None, threads: int, seconds: float) -> list[float]:
    """Steps per second of each of ``processes`` copies of the loop started together under
    ``policy``.
    """
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | {
        "OMP_NUM_THREADS": str(threads)
    }
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(seconds)], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(processes)
    ]
    return [float(p.communicate()[0]) for p in procs]


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each run")
    parser.add_argument(
        "--threads", type=int, default=2, help="torch threads per process (a cell's cell.cpus)"
    )
    parser.add_argument(
        "--processes", type=int, default=2, help="processes sharing the cores in the second run"
    )
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; {args.threads} threads a process; {args.seconds:.0f} s a run")
    print(f"{'OMP_WAIT_POLICY':<16} {'processes':>9} {'steps/s each':>24} {'steps/s in all':>15}")
    for policy in (None, "PASSIVE"):
        for processes in (1, args.processes):
            rates = run(processes, policy, args.threads, args.seconds)
            each = ", ".join(f"{r:.2f}" for r in rates)
            print(
                f"{policy or '(unset: spin)':<16} {processes:>9} {each:>24} {sum(rates):>15.2f}",
                flush=True,
            )
            time.sleep(1)


if __name__ == "__main__":
    main()
