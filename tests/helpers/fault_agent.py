"""A cheap agent for tests/integration/test_faults.py (run by ``agent=command``, standard library
only).

It writes a line into ``code/`` (so a code revision is taken), submits the base model with one
weights nudged in their last bits (a new weights hash, so every attempt's submission is really
scored, never served from the score cache; the same behaviour), waits for the score, writes the
answer to ``output/fault_agent.json``, then stays alive while the file named by its first argument
(hold) exists, so that the test can break things while the cell runs. While the file named by its
second argument (gate) exists, it waits before submitting.

Started in a workspace restored from a checkpoint (``output/fault_agent.json`` is already there: the
cell lost its node after the first run had its answer), it writes what it found to
``output/resumed.json`` and works on (sleeps) until its budget ends.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import struct
import sys
import time
import urllib.request
from pathlib import Path


def nudge(model: Path) -> None:
    """Flip random low mantissa bits of the first 16 weights of ``model.safetensors`` (little-endian
    fp32 or bf16: every 4th byte is an element's lowest byte); 3**16 variants, so two attempts
    practically never submit the same weights."""
    path = model / "model.safetensors"
    data = bytearray(path.read_bytes())
    (header_len,) = struct.unpack("<Q", data[:8])
    start = 8 + header_len  # the tensor data starts right after the JSON header
    for i in range(16):
        data[start + 4 * i] ^= random.choice((1, 2, 3))
    path.write_bytes(bytes(data))


def submit(model_dir: Path) -> dict:
    """POST /submit and wait for the score."""
    request = urllib.request.Request(
        os.environ["GRADING_SERVER_URL"] + "/submit",
        data=json.dumps(
            {"model_path": str(model_dir.relative_to(os.environ["WORKSPACE"]))}
        ).encode(),
        headers={
            "Authorization": f"Bearer {os.environ['GRADING_TOKEN']}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=600) as response:  # noqa: S310 - the cell's own API
        return json.loads(response.read())


def token_sha() -> str:
    """A digest of this run's grading token (each placement of a cell gets new tokens)."""
    return hashlib.sha256(os.environ["GRADING_TOKEN"].encode()).hexdigest()


def resumed(output: Path, code: Path) -> int:
    """The restored workspace's first run's answer and code, saved; then the rest of the budget."""
    found = {
        "answer": json.loads((output / "fault_agent.json").read_text()),
        "attempt_txt": (code / "attempt.txt").read_text(),
        "nudged_files": sorted(p.name for p in (output / "nudged").iterdir()),
        "token_sha": token_sha(),
    }
    (output / "resumed.json").write_text(json.dumps(found, indent=1))
    print("resumed from a checkpoint: output/fault_agent.json was restored", flush=True)
    while True:
        time.sleep(1)


def main() -> int:
    hold, gate = Path(sys.argv[1]), Path(sys.argv[2])
    output, base = Path(os.environ["OUTPUT_DIR"]), Path(os.environ["MODEL_PATH"])
    code = (
        Path(os.environ["WORKSPACE"]) / "code"
    )  # something for the code revision taken at submission
    if (output / "fault_agent.json").exists():
        return resumed(output, code)
    code.mkdir(exist_ok=True)
    (code / "attempt.txt").write_text(f"nonce {random.random()}\n")
    shutil.copytree(base, output / "nudged")
    nudge(output / "nudged")
    while gate.exists():
        time.sleep(0.2)
    answer = submit(output / "nudged") | {"token_sha": token_sha()}
    (output / "fault_agent.json").write_text(json.dumps(answer, indent=1))
    print(f"submitted output/nudged: {answer.get('status')} {answer.get('score')}", flush=True)
    while hold.exists():
        time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
