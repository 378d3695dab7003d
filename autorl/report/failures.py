"""Failure types and the evidence for each, from the records and the agent's log
(docs/design.md#records-and-the-report).

The taxonomy is the reference's (``core/skill.md``): ``code_error_runtime``,
``rollout_logic_wrong``, ``timeout_no_submission``, ``copy_model_fallback``,
``training_diverged``, ``unknown``, plus ``memory_limit`` (a sealed cell's agent killed at its
cgroup's memory limit before it submitted; the reference had no such limit). A submission that
beat the baseline has no failure type.
Every classification carries the evidence that decided it, so a reader can check it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from autorl.records.types import SubmissionRecord

FAILURE_TYPES = (
    "code_error_runtime",
    "rollout_logic_wrong",
    "timeout_no_submission",
    "copy_model_fallback",
    "training_diverged",
    "unknown",
    "memory_limit",
)
RL_METHODS = ("GRPO", "PPO")
# A score at or below this fraction of a positive baseline counts as a collapse of the model.
COLLAPSE_FRACTION = 0.5

# The agent's log is hostile text: no two blank runs side by side and no unbounded scan per
# match start, so a long line cannot make these backtrack quadratically.
_NAN = re.compile(
    r"\b(?:loss|grad_norm|reward)['\"]?\s*(?:[:=]\s*)?['\"]?[-+]?(?:nan|inf)\b", re.IGNORECASE
)
_REWARD = re.compile(
    r"\breward['\"]?\s*[:=]\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)", re.IGNORECASE
)
_REWARD_LIST = re.compile(r"\breward[^\[\n]{0,200}\[([-+0-9.eE,\s]*)\]", re.IGNORECASE)
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b.*")


@dataclass(frozen=True)
class Failure:
    """A failure type with the evidence for it.

    Attributes:
        type: One of :data:`FAILURE_TYPES`.
        evidence: Short human-readable facts (log lines, scores, statuses).
    """

    type: str
    evidence: tuple[str, ...]


def log_segments(log: str, subs: list[SubmissionRecord]) -> list[str]:
    """Split the agent log into one segment per submission.

    Segment *k* runs from the end of segment *k-1* to the first later line naming submission
    *k*'s model path; when no line names it, the segment is the rest of the log.

    >>> subs = [SubmissionRecord("c", i, f"output/v{i}", "scored") for i in (1, 2)]
    >>> log_segments("train a\\nsubmitted output/v1\\ntrain b\\nsubmitted output/v2\\ndone", subs)
    ['train a\\nsubmitted output/v1', 'train b\\nsubmitted output/v2']
    """
    lines = log.splitlines()
    out = []
    start = 0
    for sub in subs:
        name = re.compile(rf"(?<![\w/]){re.escape(sub.model_path.rstrip('/'))}(?![\w])")
        end = next((i for i in range(start, len(lines)) if name.search(lines[i])), None)
        if end is None:
            out.append("\n".join(lines[start:]))
            continue
        out.append("\n".join(lines[start : end + 1]))
        start = end + 1
    return out


def last_traceback(text: str) -> str | None:
    """The exception line of the last Python traceback in ``text``, if any.

    >>> last_traceback("x\\nTraceback (most recent call last):\\n"
    ...                "  File 'a.py'\\nValueError: bad lr\\n")
    'ValueError: bad lr'
    """
    lines = text.splitlines()
    starts = [
        i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")
    ]
    if not starts:
        return None
    for line in lines[starts[-1] + 1 :]:
        if _EXCEPTION.match(line.strip()) and not line.startswith(" "):
            return line.strip()[:300]
    return lines[starts[-1]][:300]


def logged_rewards(text: str) -> list[float]:
    """Every reward value the log shows (TRL log dicts and ``reward ... [list]`` lines).

    >>> logged_rewards("{'loss': 0.1, 'reward': 0.25}\\n"
    ...                "GRPO done: mean reward per logging window [0.0, 0.5]")
    [0.25, 0.0, 0.5]
    """
    values = [float(v) for v in _REWARD.findall(text)]
    for group in _REWARD_LIST.findall(text):
        values += [float(v) for v in re.findall(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", group)]
    return values


def classify_submission(
    sub: SubmissionRecord, baseline: float | None, method: str, segment: str
) -> Failure | None:
    """Failure type of one submission; None when it beat the baseline.

    Args:
        sub: The submission.
        baseline: The cell's baseline score, if known.
        method: The training method detected for it.
        segment: The part of the agent log that led to it.

    >>> copy = SubmissionRecord("c", 1, "o/v1", "copy_of_base", score=3.0)
    >>> classify_submission(copy, 3.0, "copy", "").type
    'copy_model_fallback'
    >>> better = SubmissionRecord("c", 1, "o/v1", "scored", score=9.0)
    >>> classify_submission(better, 3.0, "SFT", "") is None
    True
    """
    if sub.status == "copy_of_base":
        return Failure(
            "copy_model_fallback", ("the grader found the weights identical to the base model",)
        )
    nan = _NAN.search(segment)
    if sub.status == "invalid":
        error = (sub.error or "no error message").strip()[:300]
        if nan or re.search(r"\b(?:nan|inf)\b", error, re.IGNORECASE):
            return Failure(
                "training_diverged",
                (f"invalid submission: {error}",) + ((f"log: {nan.group(0)}",) if nan else ()),
            )
        return Failure("code_error_runtime", (f"invalid submission: {error}",))
    if sub.score is None:
        return Failure("unknown", (f"never scored (status {sub.status})",))
    if baseline is None or sub.score > baseline:
        return None
    facts = [f"score {sub.score:g} ≤ baseline {baseline:g}"]
    if nan:
        return Failure("training_diverged", (*facts, f"log: {nan.group(0)}"))
    if baseline > 0 and sub.score <= COLLAPSE_FRACTION * baseline:
        return Failure(
            "training_diverged", (*facts, f"score fell to ≤ {COLLAPSE_FRACTION:g} × baseline")
        )
    traceback = last_traceback(segment)
    if traceback:
        return Failure("code_error_runtime", (*facts, f"log: {traceback}"))
    rewards = logged_rewards(segment)
    if method in RL_METHODS and rewards and all(r == 0 for r in rewards):
        return Failure(
            "rollout_logic_wrong", (*facts, f"{method}: all {len(rewards)} logged rewards are 0")
        )
    return Failure("unknown", tuple(facts))


def classify_cell(
    *,
    submissions: int,
    valid: int,
    improvement: float | None,
    exit_class: str | None,
    exit_code: int | None,
    log: str,
    entry_failures: list[Failure | None],
) -> Failure | None:
    """The cell's failure type; None when its best submission beat the baseline.

    >>> classify_cell(submissions=0, valid=0, improvement=None, exit_class="timeout",
    ...               exit_code=None, log="", entry_failures=[]).type
    'timeout_no_submission'
    """
    if improvement is not None and improvement > 0:
        return None
    if submissions == 0:
        traceback = last_traceback(log)
        if exit_class == "timeout":
            return Failure(
                "timeout_no_submission",
                ("the agent ran out of budget without submitting a model",)
                + ((f"log: {traceback}",) if traceback else ()),
            )
        if exit_class == "memory":
            return Failure(
                "memory_limit",
                ("the agent was killed at its memory limit (cell.memory_gb) without submitting",)
                + ((f"log: {traceback}",) if traceback else ()),
            )
        if traceback:
            return Failure("code_error_runtime", (f"no submission; log: {traceback}",))
        if exit_class == "crashed" or (exit_code not in (None, 0)):
            return Failure(
                "code_error_runtime",
                (f"no submission; agent {exit_class} with exit code {exit_code}",),
            )
        return Failure(
            "unknown",
            (f"no submission; agent {exit_class or 'did not run'} (exit code {exit_code})",),
        )
    failures = [f for f in entry_failures if f is not None]
    if not failures:
        return Failure("unknown", ("no submission beat the baseline",))
    counts = Counter(f.type for f in failures)
    top = max(counts.values())
    # The most frequent type; on a tie the latest submission's.
    chosen = next(f for f in reversed(failures) if counts[f.type] == top)
    prefix = f"{valid}/{submissions} submissions scored; "
    return Failure(
        chosen.type, tuple(prefix + e if i == 0 else e for i, e in enumerate(chosen.evidence))
    )
