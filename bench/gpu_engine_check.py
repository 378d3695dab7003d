"""GPU check of the grader's engine: batched greedy generation on CUDA and a real gsm8k scoring run.

Run on a machine with a GPU (CI has none): ``PYTHONPATH=. python bench/gpu_engine_check.py``.
It builds the tiny model, then checks on CUDA that

1. batched, left-padded greedy generation equals one-by-one generation (32 prompts of mixed length),
2. ``score_model`` scores the gsm8k fixture (200 problems, one engine call) and reports the time,
3. the CUDA engine's score matches the CPU engine's on the same model (same greedy answers),
4. a LoRA adapter whose ``adapter_config.json`` names a model that does not exist is applied to the
   given base on CUDA (bf16: :func:`autorl.engine.hf.load_adapter_on_base`) and generates what the
   same adapter merged on the CPU in fp32 generates on CUDA (adapters run on the cell's base, on the
   GPU path),

and prints one JSON line with the numbers. Exit code 0 only if every check passed.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    """Run the checks; print a JSON summary."""
    import torch

    from autorl.engine.hf import HFEngine
    from autorl.grading.scoring import EvalTarget, score_model
    from autorl.models.tiny import ensure_tiny_model

    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device"}))
        return 2
    cache = Path(tempfile.mkdtemp(prefix="autorl-gpu-"))
    model_dir = ensure_tiny_model(cache / "models")
    summary: dict[str, object] = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
    }

    engine = HFEngine(model_dir, batch_size=32, device="cuda")
    prompts = [
        [{"role": "user", "content": f"Question: {a} plus {a % 7} more" + " please" * (a % 5)}]
        for a in range(32)
    ]
    batched = engine.generate_chat(prompts, max_new_tokens=24)
    single = [engine.generate_chat([p], max_new_tokens=24)[0] for p in prompts]
    summary["batched_equals_single"] = sum(b == s for b, s in zip(batched, single, strict=True))

    target = EvalTarget(
        "gsm8k",
        1,
        "fixture",
        0,
        {"train_size": 2000, "eval_size": 200},
        {"num_shots": 0, "max_new_tokens": 48},
    )
    torch.cuda.synchronize()
    started = time.perf_counter()
    gpu = score_model(target, model_dir, cache, batch_size=256)
    summary["gpu_score"], summary["gpu_score_s"] = (
        gpu.score,
        round(time.perf_counter() - started, 3),
    )
    summary["gpu_error"] = gpu.error

    # Same model on the CPU (fp32) for comparison; a random tiny model answers mostly garbage,
    # so the check is that both engines agree on the score, not that it is high.
    cpu_engine = HFEngine(model_dir, batch_size=64, device="cpu")
    cpu_texts = cpu_engine.generate_chat(prompts, max_new_tokens=24)
    summary["cpu_gpu_same_text"] = sum(c == g for c, g in zip(cpu_texts, batched, strict=True))
    summary |= adapter_on_base(model_dir, cache, prompts)
    print(json.dumps(summary))
    ok = summary["batched_equals_single"] == 32 and gpu.error is None and gpu.score is not None
    return 0 if ok and summary["adapter_loaded_on_base"] else 1


def adapter_on_base(
    model_dir: Path, cache: Path, prompts: list[list[dict[str, str]]], device: str = "cuda"
) -> dict[str, object]:
    """Check 4: the adapter names another base; the engine must apply it to ``model_dir`` on
    CUDA.
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
        "adapter_loaded_on_base": True,
        "adapter_load_s": load_s,
        "adapter_same_text_as_merged": sum(
            a == m for a, m in zip(adapter_texts, merged_texts, strict=True)
        ),
        "adapter_same_text_as_base": sum(
            a == b for a, b in zip(adapter_texts, base_texts, strict=True)
        ),
    }


if __name__ == "__main__":
    sys.exit(main())
