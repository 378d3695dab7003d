"""An agent that games the score two ways, for tests/integration/test_integrity_sweep.py (run by
``agent=command``).

1. It submits a copy of the base (an honest no-op), then a model of **another architecture**
   (half the layers, a wider hidden size, fresh weights): the grader must flag it
   ``model_mismatch`` and the cell's best must ignore it.
2. It keeps eval items in its code folder (the test planted them in its HOME as ``planted.txt``,
   standing in for items an agent got hold of): the contamination check must flag the cell.

Runs with the sealed cell's toolchain python (torch, transformers); reports to
``output/integrity_agent.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import urllib.request
from pathlib import Path


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


def other_architecture(base: Path, dest: Path) -> None:
    """A model the base could never become by training: other layer count and width, its tokenizer
    kept."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(base)
    config.num_hidden_layers = max(1, config.num_hidden_layers // 2)
    config.layer_types = (
        config.layer_types[: config.num_hidden_layers]
        if getattr(config, "layer_types", None)
        else None
    )
    config.hidden_size = config.hidden_size + 64
    AutoModelForCausalLM.from_config(config).save_pretrained(dest)
    for name in os.listdir(base):
        if name.startswith("tokenizer") or name.endswith(".jinja"):
            shutil.copy(base / name, dest / name)


def main() -> int:
    workspace, base, output = (
        Path(os.environ["WORKSPACE"]),
        Path(os.environ["MODEL_PATH"]),
        Path(os.environ["OUTPUT_DIR"]),
    )
    planted = Path(os.environ["HOME"]) / "planted.txt"
    (workspace / "code").mkdir(exist_ok=True)
    shutil.copy(planted, workspace / "code" / "notes.txt")
    shutil.copytree(base, output / "copy")
    other_architecture(base, output / "other")
    results = {"copy": submit(output / "copy"), "other": submit(output / "other")}
    (output / "integrity_agent.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
