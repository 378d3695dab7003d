"""The task prompt every CLI agent starts with, and the paper's operating modes as variants of it.

The prompt carries everything the agent needs without asking anyone: the task
(``description.md``), the rules, budget and grading API (``instructions.md``), a look at the
workspace and the training data, and the mode (``agent.mode``):

- ``free``: any method;
- ``sft_only``: supervised fine-tuning only;
- ``rl_oriented``: the final model must come from reinforcement learning (an SFT warm-up allowed).
"""

from __future__ import annotations

import math
from pathlib import Path

from autorl.errors import ConfigError

MODES: dict[str, str] = {
    "free": (
        "Mode: free. Any post-training method is allowed (SFT, LoRA, DPO, GRPO, PPO, rejection "
        "sampling, ...). "
        "Choose whatever you expect to raise the score most within the budget."
    ),
    "sft_only": (
        "Mode: SFT only. Use supervised fine-tuning only (full or LoRA fine-tuning on the training "
        "data, or on data "
        "you derive from it). Do not use reinforcement-learning or preference methods (GRPO, PPO, "
        "RLOO, DPO, ...)."
    ),
    "rl_oriented": (
        "Mode: RL-oriented. The goal is reinforcement learning: your final submissions should come "
        "from an RL method "
        "(GRPO, PPO, RLOO, ...) with a reward you build from the task (for example exact-match on "
        "the training answers). "
        "A short SFT warm-up before RL is allowed."
    ),
}

_ROLE = (
    "You are an autonomous AI researcher doing post-training of a small language model. "
    "Complete the whole task on your own: nobody will answer questions or approve actions."
)
_SAMPLE_LINES = 3
FALLBACK_TOOL_TIMEOUT_S = 12 * 3600  # the paper's budget, for a launch whose budget is unknown
_SAMPLE_CHARS = 400


def _data_sample(data_dir: Path) -> str:
    lines: list[str] = []
    for path in sorted(data_dir.rglob("*"))[:20]:
        if not path.is_file():
            continue
        lines.append(f"- data/{path.relative_to(data_dir)} ({path.stat().st_size} bytes)")
        if path.suffix in (".jsonl", ".json", ".txt", ".csv"):
            with open(path, encoding="utf-8", errors="replace") as handle:
                for _, line in zip(range(_SAMPLE_LINES), handle, strict=False):
                    lines.append("    " + line.rstrip("\n")[:_SAMPLE_CHARS])
    return "\n".join(lines) or "(no data files)"


def tool_timeout_s(budget_s: float | None) -> int:
    """How long one shell command of a CLI may run: the whole budget (the cell stops everything at
    its end anyway), else :data:`FALLBACK_TOOL_TIMEOUT_S`. A CLI's own default (2 or 5 minutes)
    would cut a training run.

    >>> tool_timeout_s(899.5), tool_timeout_s(None)
    (900, 43200)
    """
    return FALLBACK_TOOL_TIMEOUT_S if budget_s is None else max(1, math.ceil(budget_s))


def build_prompt(workspace: Path, mode: str, budget: float | None) -> str:
    """The full task prompt for an agent working in ``workspace`` in operating mode ``mode``
    (``agent.mode``) with a time budget of ``budget`` seconds (None: unknown; the prompt then points
    at ``GET /time``).

    Raises:
        ConfigError: if ``mode`` is not one of :data:`MODES`.
    """
    mode = str(mode)
    if mode not in MODES:
        raise ConfigError(f"agent.mode must be one of {', '.join(MODES)}, got {mode!r}")
    entries = sorted(p.name + ("/" if p.is_dir() else "") for p in workspace.iterdir())
    budget_line = (
        f"You have {budget:.0f} seconds of wall-clock time in total, counted from `start_time` in "
        "run_meta.json; "
        'check what is left with `curl -s -H "Authorization: Bearer $GRADING_TOKEN" '
        "$GRADING_SERVER_URL/time`. "
        "Every process you start is stopped when the time is up, so submit early and often."
        if budget is not None
        else "Check the remaining time with `GET $GRADING_SERVER_URL/time`."
    )
    parts = [
        _ROLE,
        MODES[mode],
        f"# Task (description.md)\n\n{(workspace / 'description.md').read_text()}",
        f"# Instructions (instructions.md)\n\n{(workspace / 'instructions.md').read_text()}",
        f"# Your workspace (the current directory)\n\n{', '.join(entries)}\n\nTraining "
        f"data:\n{_data_sample(workspace / 'data')}",
        "# Time budget\n\n" + budget_line,
        "# How to work\n\n"
        "1. Read the files above; write your training code in code/ (for example code/train.py) "
        "and run it.\n"
        "2. Save each trained model as a full model folder under output/ (output/v1, output/v2, "
        "...), with its tokenizer.\n"
        '3. Submit it: `curl -s -X POST "$GRADING_SERVER_URL/submit" -H "Authorization: Bearer '
        '$GRADING_TOKEN" '
        "-H 'Content-Type: application/json' -d '{\"model_path\": \"output/v1\"}'` and read the "
        "score.\n"
        "4. Iterate: improve the method, submit again; the best valid submission counts.\n"
        "Start with a simple approach that gets a valid score quickly, then improve it.",
    ]
    return "\n\n".join(parts) + "\n"
