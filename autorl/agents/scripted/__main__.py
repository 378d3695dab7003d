"""The scripted agent process: SFT on ``data/``, submit ``output/v1``; GRPO from v1, submit ``output/v2``.

It uses only what any agent gets: the environment variables (``TASK``, ``MODEL_PATH``,
``DATA_PATH``, ``OUTPUT_DIR``, ``GRADING_SERVER_URL``, ``GRADING_TOKEN``), the files of the
workspace and the grading API.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

_FINAL = re.compile(r"the answer is\s*:?\s*(-?[\d,]+(?:\.\d+)?)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def log(message: str) -> None:
    """Progress line on stdout (the cell's agent.log)."""
    print(f"[scripted {time.strftime('%H:%M:%S')}] {message}", flush=True)


def api(method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 3600) -> dict[str, Any]:
    """Call the grading API with the cell's token."""
    request = urllib.request.Request(
        os.environ["GRADING_SERVER_URL"] + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {os.environ['GRADING_TOKEN']}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - loopback URL from env
        return json.loads(response.read())  # type: ignore[no-any-return]


def final_number(text: str) -> str | None:
    """The number after "The answer is", else the last number; commas removed."""
    match = _FINAL.search(text)
    numbers = _NUMBER.findall(text)
    raw = match.group(1) if match else (numbers[-1] if numbers else None)
    return raw.replace(",", "").rstrip(".") if raw else None


def gsm8k_rows(data_dir: Path) -> list[dict[str, str]]:
    """Training rows as (prompt in the eval protocol, solution ending "The answer is N", gold)."""
    rows = []
    for line in (data_dir / "train.jsonl").read_text().splitlines():
        item = json.loads(line)
        working, _, gold = item["answer"].rpartition("####")
        prompt = f"Question: {item['question']}\nLet's think step by step\nAnswer:"
        solution = f"{working.strip()} The answer is {gold.strip()}"
        rows.append({"prompt": prompt, "solution": solution, "gold": gold.strip().replace(",", "")})
    return rows


def common_args(output_dir: Path) -> dict[str, Any]:
    """Trainer settings shared by SFT and GRPO (CPU-safe; see stack-notes.md §4)."""
    import torch

    on_gpu = torch.cuda.is_available()
    return dict(
        output_dir=str(output_dir), report_to="none", logging_steps=10, save_strategy="no",
        dataloader_num_workers=0, bf16=on_gpu, use_cpu=not on_gpu, disable_tqdm=True,
    )


def sft(args: argparse.Namespace, rows: list[dict[str, str]], target: Path) -> None:
    """Supervised fine-tuning of the base model on the training solutions."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    dataset = Dataset.from_list(
        [{"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["solution"]}]} for r in rows]
    )
    tokenizer = AutoTokenizer.from_pretrained(os.environ["MODEL_PATH"])
    config = SFTConfig(
        max_steps=args.sft_steps, per_device_train_batch_size=args.sft_batch_size, learning_rate=args.sft_lr,
        lr_scheduler_type="cosine", warmup_steps=min(20, args.sft_steps // 10), max_length=args.sft_max_length,
        **common_args(Path("code/runs/sft")),
    )
    trainer = SFTTrainer(model=os.environ["MODEL_PATH"], args=config, train_dataset=dataset, processing_class=tokenizer)
    result = trainer.train()
    log(f"SFT done: {result.global_step} steps, loss {result.training_loss:.3f}")
    trainer.save_model(str(target))
    tokenizer.save_pretrained(str(target))


def grpo(args: argparse.Namespace, rows: list[dict[str, str]], start: Path, target: Path) -> None:
    """GRPO from ``start`` with the task's rule reward (exact match of the final number)."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    def exact_match(completions: list[Any], gold: list[str], **_: Any) -> list[float]:
        texts = [c[0]["content"] if isinstance(c, list) else str(c) for c in completions]
        return [1.0 if final_number(t) == g else 0.0 for t, g in zip(texts, gold, strict=True)]

    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}], "gold": r["gold"]} for r in rows])
    tokenizer = AutoTokenizer.from_pretrained(str(start))
    config = GRPOConfig(
        max_steps=args.grpo_steps, per_device_train_batch_size=args.grpo_batch_size, num_generations=args.grpo_generations,
        max_completion_length=args.grpo_max_completion, learning_rate=args.grpo_lr, beta=0.0, temperature=1.0,
        **common_args(Path("code/runs/grpo")),
    )
    trainer = GRPOTrainer(model=str(start), reward_funcs=exact_match, args=config, train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    log(f"GRPO done: mean reward per logging window {[round(r, 3) for r in rewards]}")
    trainer.save_model(str(target))
    tokenizer.save_pretrained(str(target))


def submit(path: str) -> dict[str, Any]:
    """Submit a model folder and log the grader's answer."""
    answer = api("POST", "/submit", {"model_path": path})
    log(f"submitted {path}: status={answer['status']} score={answer['score']} improvement={answer['improvement']}")
    return answer


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The recipe's knobs (set from conf/agent/scripted.yaml by the adapter)."""
    parser = argparse.ArgumentParser(prog="python -m autorl.agents.scripted")
    for name, kind in [("sft-steps", int), ("sft-batch-size", int), ("sft-lr", float), ("sft-max-length", int),
                       ("grpo-steps", int), ("grpo-batch-size", int), ("grpo-generations", int), ("grpo-lr", float),
                       ("grpo-max-completion", int)]:
        parser.add_argument(f"--{name}", type=kind, required=True)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    """Run the recipe; the exit code is 0 when both stages were submitted."""
    args = parse_args(argv)
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    task = os.environ["TASK"]
    if task != "gsm8k":
        log(f"no recipe for task {task!r}; exiting without a submission")
        return 3
    rows = gsm8k_rows(Path(os.environ["DATA_PATH"]))
    log(f"task {task}: {len(rows)} training rows; budget left {api('GET', '/time')['remaining']:.0f} s")
    output = Path(os.environ["OUTPUT_DIR"])
    Path("code").mkdir(exist_ok=True)
    (Path("code") / "recipe.json").write_text(json.dumps({"stage1": "sft", "stage2": "grpo", **vars(args)}, indent=2))
    sft(args, rows, output / "v1")
    submit("output/v1")
    remaining = api("GET", "/time")["remaining"]
    if remaining < 30:
        log(f"only {remaining:.0f} s left; skipping GRPO")
        return 0
    grpo(args, rows, output / "v1", output / "v2")
    submit("output/v2")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
