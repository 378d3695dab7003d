"""The GPU check: the grader's engine and the agent's training on CUDA, offline, in minutes.

Run on any machine with a CUDA GPU and this repository's ``.venv`` (torch and transformers; no
Ray, vLLM or network): ``PYTHONPATH=. python bench/gpu_check.py``. ``--device cpu`` runs the same
checks with the CPU as the device, to try the script itself (``tests/unit/test_gpu_check.py``).
It builds the tiny model, then checks on the device that

1. batched, left-padded greedy generation equals one-by-one generation (32 prompts of mixed length),
2. ``score_model`` scores the gsm8k fixture (200 problems, one engine call), with its time,
3. the device's greedy texts are the CPU engine's on the same model (at least 30 of 32),
4. a LoRA adapter whose ``adapter_config.json`` names a model that does not exist is applied to the
   given base (:func:`autorl.engine.hf.load_adapter_on_base`) and generates what the same adapter
   merged in fp32 generates (at least 30 of 32), and not what the bare base does,
5. TRL's SFT, configured as the scripted recipe configures it, trains on the device: a finite loss
   that falls over its steps on the gsm8k fixture's training problems,
6. the model it saved passes the grader's identity check against the base: the same architecture,
   a weight distance above 0 and below 1,

and prints one line per check and one JSON line with the numbers. Exit code 0 only if every check
passed, 1 if one failed, 2 without a CUDA device.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROMPTS = 32
# Greedy texts of two numerically different paths (CUDA and CPU kernels) may part on a near tie.
MIN_SAME = 30


@dataclass(frozen=True)
class Check:
    """One check of the script: what it measured, what passing needs, and whether it did."""

    name: str
    passed: bool
    measured: object
    needs: str


def verdict(checks: list[Check], numbers: dict[str, object]) -> int:
    """Print each check and a JSON summary; 0 when every check passed, else 1."""
    for check in checks:
        mark = "ok  " if check.passed else "FAIL"
        print(f"{mark} {check.name}: {check.measured!r} (needs {check.needs})")
    print(json.dumps({**numbers, "checks": [asdict(c) for c in checks]}, default=str))
    return 0 if checks and all(c.passed for c in checks) else 1


def _same(a: list[str], b: list[str]) -> int:
    return sum(x == y for x, y in zip(a, b, strict=True))


def main(argv: list[str] | None = None) -> int:
    """Run the checks on ``--device`` (default cuda)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu to try the script")
    device = parser.parse_args(argv).device
    import torch

    from autorl.engine.hf import HFEngine
    from autorl.grading.scoring import EvalTarget, score_model
    from autorl.models.tiny import ensure_tiny_model

    if device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device"}))
        return 2
    cache = Path(tempfile.mkdtemp(prefix="autorl-gpu-"))
    model_dir = ensure_tiny_model(cache / "models")
    on_cuda = device == "cuda"
    numbers: dict[str, object] = {
        "device": torch.cuda.get_device_name(0) if on_cuda else "cpu",
        "torch": torch.__version__,
    }
    engine = HFEngine(model_dir, batch_size=PROMPTS, device=device)
    prompts = [
        [{"role": "user", "content": f"Question: {a} plus {a % 7} more" + " please" * (a % 5)}]
        for a in range(PROMPTS)
    ]
    batched = engine.generate_chat(prompts, max_new_tokens=24)
    single = [engine.generate_chat([p], max_new_tokens=24)[0] for p in prompts]
    target = EvalTarget(
        "gsm8k", 1, "fixture", 0,
        {"train_size": 2000, "eval_size": 200}, {"num_shots": 0, "max_new_tokens": 48},
    )  # fmt: skip
    if on_cuda:
        torch.cuda.synchronize()
    started = time.perf_counter()
    scored = score_model(target, model_dir, cache, batch_size=256)
    numbers["score_s"] = round(time.perf_counter() - started, 3)
    # A random tiny model answers mostly garbage: the check is that the paths agree, not that
    # the score is high.
    cpu_texts = HFEngine(model_dir, batch_size=64, device="cpu").generate_chat(
        prompts, max_new_tokens=24
    )
    adapter = adapter_on_base(model_dir, cache, prompts, device)
    numbers["adapter_load_s"] = adapter["load_s"]
    losses, trained, numbers["sft_s"] = sft_on_device(model_dir, cache, device)
    differences, distance = identity(model_dir, trained)
    checks = [
        Check("batched equals one by one", _same(batched, single) == PROMPTS,
              _same(batched, single), f"{PROMPTS} of {PROMPTS}"),
        Check("gsm8k fixture scored", scored.error is None and scored.score is not None,
              scored.error or scored.score, "a score and no error"),
        Check("same greedy texts as the CPU", _same(cpu_texts, batched) >= MIN_SAME,
              _same(cpu_texts, batched), f">= {MIN_SAME} of {PROMPTS}"),
        Check("adapter on the given base generates as its merge",
              adapter["same_as_merged"] >= MIN_SAME, adapter["same_as_merged"],
              f">= {MIN_SAME} of {PROMPTS}"),
        Check("the adapter changes what the base generates",
              adapter["same_as_base"] < PROMPTS, adapter["same_as_base"],
              f"< {PROMPTS} of {PROMPTS}"),
        Check("SFT's loss is finite and falls",
              all(math.isfinite(x) for x in losses) and len(losses) > 1 and losses[-1] < losses[0],
              [round(x, 3) for x in losses], "finite, last below first"),
        Check("the trained model passes the identity check",
              not differences and 0 < distance < 1, {"differences": differences,
              "distance": round(distance, 4)}, "no differences, 0 < distance < 1"),
    ]  # fmt: skip
    return verdict(checks, numbers)


def adapter_on_base(
    model_dir: Path, cache: Path, prompts: list[list[dict[str, str]]], device: str = "cuda"
) -> dict[str, float]:
    """Check 4: the adapter names another base; the engine must apply it to ``model_dir``.

    Returns:
        ``load_s``, and how many of the prompts' texts equal the merge's and the bare base's.
    """
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from autorl.engine.hf import HFEngine

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    lora = LoraConfig(
        r=8,
        lora_alpha=16,
        target_modules=["q_proj", "v_proj", "down_proj"],
        init_lora_weights=False,
    )
    peft_model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), lora)
    adapter_dir, merged_dir = cache / "adapter", cache / "merged"
    peft_model.save_pretrained(adapter_dir)
    tokenizer.save_pretrained(adapter_dir)
    config_file = adapter_dir / "adapter_config.json"
    config = json.loads(config_file.read_text())
    # What a hostile agent would name.
    config["base_model_name_or_path"] = "/nonexistent/another-base-model"
    config_file.write_text(json.dumps(config))
    peft_model.merge_and_unload().save_pretrained(merged_dir)
    tokenizer.save_pretrained(merged_dir)
    started = time.perf_counter()
    on_base = HFEngine(adapter_dir, batch_size=32, device=device, base_dir=model_dir)
    load_s = round(time.perf_counter() - started, 3)
    adapter_texts = on_base.generate_chat(prompts, max_new_tokens=24)
    merged_texts = HFEngine(merged_dir, batch_size=32, device=device).generate_chat(
        prompts, max_new_tokens=24
    )
    base_texts = HFEngine(model_dir, batch_size=32, device=device).generate_chat(
        prompts, max_new_tokens=24
    )
    return {
        "load_s": load_s,
        "same_as_merged": _same(adapter_texts, merged_texts),
        "same_as_base": _same(adapter_texts, base_texts),
    }


def sft_on_device(model_dir: Path, cache: Path, device: str) -> tuple[list[float], Path, float]:
    """Checks 5: SFT of the base on 64 gsm8k fixture problems, 24 steps, on ``device``.

    The settings are the scripted agent's (``conf/agent/scripted.yaml`` ``sft:``, TRL's names) but
    for the step count; bf16 on CUDA where the GPU has it.

    Returns:
        The logged losses, the saved model's folder and the training seconds.
    """
    import torch
    import yaml
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from autorl.task_spec import get_task
    from autorl.tasks import build_task_data

    data = build_task_data(get_task("gsm8k"), "fixture", cache / "tasks", seed=0)
    rows = [json.loads(line) for line in (data.public_dir / "train.jsonl").open()][:64]
    dataset = Dataset.from_list([
        {"messages": [{"role": "user", "content": r["question"]},
                      {"role": "assistant", "content": r["answer"]}]}
        for r in rows
    ])  # fmt: skip
    recipe = yaml.safe_load((REPO / "conf" / "agent" / "scripted.yaml").read_text())
    stage = {**recipe["sft"], "max_steps": 24, "logging_steps": 4}
    target = cache / "sft"
    config = SFTConfig(
        **stage, output_dir=str(cache / "sft-runs"), report_to=[], save_strategy="no", seed=0,
        use_cpu=device == "cpu", bf16=device == "cuda" and torch.cuda.is_bf16_supported(),
    )  # fmt: skip
    trainer = SFTTrainer(
        model=str(model_dir),
        args=config,
        train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )
    started = time.perf_counter()
    trainer.train()
    seconds = round(time.perf_counter() - started, 3)
    trainer.save_model(str(target))
    trainer.processing_class.save_pretrained(str(target))
    losses = [float(entry["loss"]) for entry in trainer.state.log_history if "loss" in entry]
    return losses, target, seconds


def identity(base: Path, trained: Path) -> tuple[list[str], float]:
    """Check 6: the grader's identity check of ``trained`` against ``base``."""
    from autorl.grading.identity import BaseModel
    from autorl.grading.model_checks import check_loadable_model

    report = BaseModel(base).check(trained, check_loadable_model(trained))
    return list(report.differences), float(report.weight_distance)


if __name__ == "__main__":
    sys.exit(main())
