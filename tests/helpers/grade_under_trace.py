"""Check and score two submissions the way a cell's grader does, for a file-access trace.

``tests/unit/test_threat_model.py`` runs this script under ``strace -f`` to learn every file the
grader opens or probes inside a submitted folder (what transformers, PEFT and safetensors pick up
from it), so that each one has its row in ``docs/threat-model.md``. It serves the real grading API
over the real :class:`SubmissionService` (resolve, copy, checks, hash, identity against the base,
scoring on a small GSM8K fixture), submits a full model and a LoRA adapter, and prints the two
folders whose files count: the workspace's ``output/`` and the grader's copies.

Run ``python tests/helpers/grade_under_trace.py prepare <root> <cache_dir>`` first (it saves the
submissions, whose own writes are no part of the trace), then ``... grade <root> <cache_dir>``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx

from autorl.grading.api import GradingServer, create_app
from autorl.grading.model_checks import check_loadable_model, weights_hash
from autorl.grading.scoring import ScoreOutcome, score_model
from autorl.grading.service import CellGradingContext, SubmissionService
from autorl.models.tiny import ensure_tiny_model
from autorl.records.store import RecordStore
from autorl.workspace.run_meta import RunMeta
from tests.helpers.grading_cell import TARGET, StoreSink, save_variant

TOKEN = "trace-token"


def save_adapter(base: Path, dest: Path) -> Path:
    """A LoRA adapter of ``base`` with its tokenizer, as an agent that trains one saves it."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = LoraConfig(
        r=2, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    get_peft_model(AutoModelForCausalLM.from_pretrained(base), config).save_pretrained(dest)
    AutoTokenizer.from_pretrained(base).save_pretrained(dest)
    return dest


def prepare(root: Path, cache_dir: Path) -> None:
    """Save the two submissions into ``root``'s workspace."""
    base = ensure_tiny_model(cache_dir / "models")
    output = root / "workspace" / "output"
    output.mkdir(parents=True)
    save_variant(base, output / "full", noise_seed=1)
    save_adapter(base, output / "adapter")


def grade(root: Path, cache_dir: Path) -> None:
    """Serve a cell under ``root``, submit a full model and an adapter, print the folders traced."""
    base = ensure_tiny_model(cache_dir / "models")
    workspace = root / "workspace"
    output = workspace / "output"
    baseline = score_model(TARGET, base, cache_dir, batch_size=16).score
    assert baseline is not None
    copies = root / "grader_copies"
    store = RecordStore(root / "records.sqlite")
    run_meta = RunMeta(workspace / "run_meta.json", 600, root)
    run_meta.update(start_time=time.time())
    base_hash = weights_hash(check_loadable_model(base))
    ctx = CellGradingContext("trace", workspace, base_hash, baseline, 4, base_model_dir=base)

    def scorer(model_dir: Path, digest: str) -> tuple[ScoreOutcome, bool]:
        return score_model(TARGET, model_dir, cache_dir, batch_size=16, base_dir=base), False

    service = SubmissionService(ctx, scorer, StoreSink(store), run_meta, copies)
    app = create_app(
        service,
        run_meta,
        token=TOKEN,
        task_id="gsm8k",
        max_body_bytes=4096,
        submit_timeout_s=lambda: 300.0,
    )
    server = GradingServer(app)
    server.start()
    try:
        for name in ("full", "adapter"):
            answer = httpx.post(
                f"{server.url}/submit",
                json={"model_path": f"output/{name}"},
                headers={"authorization": f"Bearer {TOKEN}"},
                timeout=300,
            )
            if answer.json().get("status") not in ("scored", "duplicate"):
                raise SystemExit(f"submission {name} was not scored: {answer.text}")
    finally:
        server.stop()
        service.close()
        store.close()
    print(json.dumps({"traced": [str(output), str(copies)]}))


if __name__ == "__main__":
    {"prepare": prepare, "grade": grade}[sys.argv[1]](Path(sys.argv[2]), Path(sys.argv[3]))
