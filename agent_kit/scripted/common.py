"""What every scripted recipe shares: the grading API client, logging and the TRL stages."""

from __future__ import annotations

import dataclasses
import json
import os
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_kit.scripted.progress import PROGRESS, workspace_key
from agent_kit.scripted.settings import ScriptedSettings

ChatRow = dict[str, Any]
Reward = Callable[..., list[float]]


def log(message: str) -> None:
    """Progress line on stdout (the cell's agent.log)."""
    print(f"[scripted {time.strftime('%H:%M:%S')}] {message}", flush=True)


def api(
    method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 3600
) -> dict[str, Any]:
    """Call the grading API with the cell's token."""
    request = urllib.request.Request(
        os.environ["GRADING_SERVER_URL"] + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={
            "Authorization": f"Bearer {os.environ['GRADING_TOKEN']}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - loopback URL from env
        return json.loads(response.read())  # type: ignore[no-any-return]


def submit(path: str) -> dict[str, Any]:
    """Submit a model folder (relative to the workspace) and log the grader's answer.

    On a resume (:mod:`agent_kit.scripted.progress`) a folder whose stage was skipped and had been
    submitted is not submitted again: the cell keeps that submission, and its recorded answer is
    returned. One whose request was under way when the run stopped is looked up first among the
    cell's submissions.
    """
    earlier = PROGRESS.submitted_before(path)
    if earlier is None and PROGRESS.pending_submission(path):
        earlier = _made_before(path)
    if earlier is not None:
        log(
            f"resume: not submitting {path} again; it was submission "
            f"#{earlier.get('submission_id')} (score {earlier.get('score')})"
        )
        PROGRESS.record_submission(path, earlier)
        return earlier
    PROGRESS.submitting(path)
    answer = api("POST", "/submit", {"model_path": path})
    PROGRESS.record_submission(path, answer)
    log(
        f"submitted {path}: status={answer['status']} score={answer['score']} "
        f"improvement={answer['improvement']}"
    )
    return answer


def _made_before(path: str) -> dict[str, Any] | None:
    """The cell's latest submission of ``path`` (from ``GET /submissions``); None if there is none
    or the API cannot say (then it is submitted again: a second score beats none)."""
    try:
        listed = api("GET", "/submissions", timeout=60).get("submissions")
    except (OSError, ValueError) as error:
        log(f"resume: could not list the cell's submissions ({error}); submitting {path} again")
        return None
    key = workspace_key(path)
    matches = [
        s
        for s in listed or []
        if isinstance(s, dict)
        and isinstance(s.get("model_path"), str)
        and workspace_key(s["model_path"]) == key
    ]
    return matches[-1] if matches else None


def remaining_s() -> float:
    """Seconds of budget left, from the grading API."""
    return float(api("GET", "/time")["remaining"])


def stop_at_deadline(share: float) -> Any:
    """A ``transformers.TrainerCallback`` that ends training once ``share`` of the budget left now
    is spent, so that a stage slower than planned (a larger model, a busy CPU) still leaves time to
    save
    and submit instead of being killed at the budget's end with nothing submitted."""
    from transformers import TrainerCallback

    deadline = time.monotonic() + share * remaining_s()

    class StopAtDeadline(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            """Ask the trainer to stop after this step once the deadline has passed."""
            if time.monotonic() > deadline:
                control.should_training_stop = True
            return control

    return StopAtDeadline()


def _trainer_args(output_dir: Path, seed: int) -> dict[str, Any]:
    """Trainer settings shared by SFT and GRPO. TRL's configs default to bf16=True, which on a
    machine without a GPU raises unless bf16=False and use_cpu=True."""
    import torch

    on_gpu = torch.cuda.is_available()
    return dict(
        output_dir=str(output_dir),
        report_to="none",
        logging_steps=10,
        save_strategy="no",
        dataloader_num_workers=0,
        bf16=on_gpu,
        use_cpu=not on_gpu,
        disable_tqdm=True,
        seed=seed,
    )


def sft(
    settings: ScriptedSettings,
    conversations: list[list[dict[str, str]]],
    base: str,
    target: Path,
    time_share: float = 0.7,
) -> None:
    """Supervised fine-tuning of ``base`` on chat conversations; saves model and tokenizer to
    ``target``.

    Training stops early once ``time_share`` of the budget left at its start is spent. A resumed
    run that finished this stage before skips it (:mod:`agent_kit.scripted.progress`)."""
    if PROGRESS.finished("sft", target) is not None:
        return
    _train_sft(settings, conversations, base, target, time_share)
    PROGRESS.record("sft", target)


def _train_sft(
    settings: ScriptedSettings,
    conversations: list[list[dict[str, str]]],
    base: str,
    target: Path,
    time_share: float,
) -> None:
    """:func:`sft`'s training with TRL's ``SFTTrainer``."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    dataset = Dataset.from_list([{"messages": c} for c in conversations])
    tokenizer = AutoTokenizer.from_pretrained(base)
    stage = settings.sft
    config = SFTConfig(
        **dataclasses.asdict(stage),
        lr_scheduler_type="cosine",
        warmup_steps=min(20, stage.max_steps // 10),
        **_trainer_args(Path("code/runs/sft"), settings.seed),
    )
    trainer = SFTTrainer(
        model=base,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[stop_at_deadline(time_share)],
    )
    result = trainer.train()
    log(
        f"SFT done: {result.global_step} of {stage.max_steps} steps, loss "
        f"{result.training_loss:.3f}"
    )
    trainer.save_model(str(target))
    tokenizer.save_pretrained(str(target))


def grpo(
    settings: ScriptedSettings,
    rows: list[ChatRow],
    reward: Reward,
    start: Path,
    target: Path,
    time_share: float = 0.7,
) -> None:
    """GRPO from ``start`` with a rule reward; ``rows`` have a chat ``prompt`` plus the reward's
    columns.

    Training stops early once ``time_share`` of the budget left at its start is spent. A resumed
    run that finished this stage before skips it (:mod:`agent_kit.scripted.progress`)."""
    if PROGRESS.finished("grpo", target) is not None:
        return
    _train_grpo(settings, rows, reward, start, target, time_share)
    PROGRESS.record("grpo", target)


def _train_grpo(
    settings: ScriptedSettings,
    rows: list[ChatRow],
    reward: Reward,
    start: Path,
    target: Path,
    time_share: float,
) -> None:
    """:func:`grpo`'s training with TRL's ``GRPOTrainer``."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(str(start))
    stage = settings.grpo
    config = GRPOConfig(
        **dataclasses.asdict(stage), **_trainer_args(Path("code/runs/grpo"), settings.seed)
    )
    trainer = GRPOTrainer(
        model=str(start),
        # The ignore: trl types a reward as returning list[float | None] (None skips a sample), and
        # a list[float] is not one (lists are invariant) though trl reads it the same.
        reward_funcs=reward,  # type: ignore[arg-type]
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[stop_at_deadline(time_share)],
    )
    result = trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    log(
        f"GRPO done: {result.global_step} of {stage.max_steps} steps, mean reward per logging "
        "window "
        f"{[round(r, 3) for r in rewards]}"
    )
    trainer.save_model(str(target))
    tokenizer.save_pretrained(str(target))


def completion_texts(completions: list[Any]) -> list[str]:
    """The text of each TRL completion (conversational or plain)."""
    return [c[0]["content"] if isinstance(c, list) else str(c) for c in completions]


def longest_conversation_tokens(base: str, conversations: list[list[dict[str, str]]]) -> int:
    """Tokens of the longest conversation rendered with ``base``'s chat template."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    rendered = [str(tokenizer.apply_chat_template(c, tokenize=False)) for c in conversations]
    return max(
        (len(ids) for ids in tokenizer(rendered, add_special_tokens=False)["input_ids"]), default=0
    )
