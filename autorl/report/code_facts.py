"""Facts read from an agent's code: which training method it uses and its key hyperparameters.

Detection is static and explainable: every method found comes with the file and the text that
gave it away (a TRL trainer or config class, a ``trl <method>`` command line, a recipe file's
``sft-…``/``grpo-…`` keys, a run folder named after the method). Nothing here imports the
agent's code or unpickles its files.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

METHODS = ("SFT", "GRPO", "PPO", "DPO")

# Class names of TRL trainers/configs and the `trl <cmd>` CLI; word boundaries keep "SFTTrainerX"
# out.
_CODE_SIGNALS: dict[str, re.Pattern[str]] = {
    m: re.compile(rf"\b(?:{m}Trainer|{m}Config)\b|\btrl\s+{m.lower()}\b") for m in METHODS
}
# Keys and folder names such as "sft-steps", "grpo_lr", "runs/ppo/"; also the method as a whole
# value.
_KEY_SIGNALS: dict[str, re.Pattern[str]] = {
    m: re.compile(rf"(?:^|[^a-z]){m.lower()}(?:$|[^a-z])") for m in METHODS
}

# Canonical hyperparameter -> spellings seen in TRL configs, argparse flags and recipe files.
HYPERPARAMETERS: dict[str, tuple[str, ...]] = {
    "learning_rate": ("learning_rate", "learning-rate", "lr"),
    "steps": ("max_steps", "max-steps", "steps", "num_steps", "train_steps"),
    "epochs": ("num_train_epochs", "epochs", "num_epochs"),
    "batch_size": ("per_device_train_batch_size", "batch_size", "batch-size", "train_batch_size"),
    "gradient_accumulation_steps": ("gradient_accumulation_steps", "grad_accum"),
    "num_generations": ("num_generations", "generations", "num-generations"),
    "max_length": ("max_length", "max_seq_length", "max-length"),
    "max_completion_length": (
        "max_completion_length",
        "max-completion",
        "max_completion",
        "max_new_tokens",
        "max-completion-length",
    ),
    "beta": ("beta",),
    "temperature": ("temperature",),
    "lora_r": ("lora_r", "lora_rank"),
    "warmup_steps": ("warmup_steps",),
}
_SPELLING = {s: canon for canon, spellings in HYPERPARAMETERS.items() for s in spellings}
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
# `name = 1e-5`, `name: 8`, `name=8,` (python kwargs, YAML, TOML) and `--name 8` / `--name=8`
# (shell).
# The separator is `=` or `:` with blanks around, or blanks alone: two blank runs side by side
# (`\s*\s\s*`) would backtrack quadratically over a long run of them in the agent's code.
_ASSIGN = re.compile(rf"(?<![\w.])(?:--)?([A-Za-z_][\w-]*)(?:\s*[=:]\s*|\s+)({_NUMBER})(?![\w.])")


@dataclass(frozen=True)
class MethodEvidence:
    """One place that shows a training method.

    Attributes:
        method: One of :data:`METHODS`.
        path: The file (relative to ``code/``).
        text: The matching text.
    """

    method: str
    path: str
    text: str


@dataclass
class CodeFacts:
    """What a code revision shows.

    Attributes:
        evidence: Every method signal found, in file order.
        hyperparameters: ``{path: {prefix: {canonical name: value}}}`` where ``prefix`` is a
            method (lower case) for keys like ``grpo-lr`` and ``""`` for unprefixed keys.
    """

    evidence: list[MethodEvidence] = field(default_factory=list)
    hyperparameters: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    @property
    def methods(self) -> list[str]:
        """The methods found, in :data:`METHODS` order."""
        found = {e.method for e in self.evidence}
        return [m for m in METHODS if m in found]

    def hyperparameters_for(self, method: str | None) -> dict[str, Any]:
        """The hyperparameters of ``method``: unprefixed ones from files that show this method or no
        method at all, overlaid with keys prefixed by the method (``grpo_lr``) from any file.

        >>> recipe = '{"sft-lr": 0.003, "grpo-lr": 2e-05, "seed": 1, "batch_size": 8}'
        >>> facts = scan_files({"recipe.json": recipe,
        ...                     "sft.py": "SFTConfig(per_device_train_batch_size=64)"})
        >>> facts.hyperparameters_for("GRPO")
        {'batch_size': 8, 'learning_rate': 2e-05}
        """
        shown: dict[str, set[str]] = {}
        for e in self.evidence:
            shown.setdefault(e.path, set()).add(e.method)
        merged: dict[str, Any] = {}
        prefixed: dict[str, Any] = {}
        for path, by_prefix in self.hyperparameters.items():
            if path not in shown or (method is not None and method in shown[path]):
                for name, value in by_prefix.get("", {}).items():
                    merged.setdefault(name, value)
            if method:
                for name, value in by_prefix.get(method.lower(), {}).items():
                    prefixed.setdefault(name, value)
        return dict(sorted((merged | prefixed).items()))


def _split_prefix(name: str) -> tuple[str, str]:
    """``"grpo-lr"`` → ``("grpo", "lr")``; ``"learning_rate"`` → ``("", "learning_rate")``."""
    lowered = name.lower()
    for method in METHODS:
        m = method.lower()
        for sep in ("-", "_", "."):
            if lowered.startswith(m + sep):
                return m, lowered[len(m) + 1 :]
    return "", lowered


def _as_number(raw: str) -> int | float:
    value = float(raw)
    return int(value) if re.fullmatch(r"[-+]?\d+", raw) else value


def _add_hyperparameter(facts: CodeFacts, path: str, name: str, value: Any) -> None:
    prefix, bare = _split_prefix(name)
    canon = _SPELLING.get(bare) or _SPELLING.get(bare.replace("-", "_"))
    if canon is None or isinstance(value, bool) or not isinstance(value, int | float):
        return
    # The first value found in a file wins (a config's definition before later re-uses).
    facts.hyperparameters.setdefault(path, {}).setdefault(prefix, {}).setdefault(canon, value)


def _walk_json(facts: CodeFacts, path: str, data: Any, trail: str = "") -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            key_s = str(key)
            _note_key(facts, path, key_s)
            _walk_json(facts, path, value, key_s)
            _add_hyperparameter(facts, path, key_s, value)
    elif isinstance(data, list):
        for item in data:
            _walk_json(facts, path, item, trail)
    elif isinstance(data, str):
        _scan_code_text(facts, path, data)


def _note_key(facts: CodeFacts, path: str, key: str) -> None:
    for method, pattern in _KEY_SIGNALS.items():
        if pattern.search(key.lower()):
            facts.evidence.append(MethodEvidence(method, path, f"key {key!r}"))


def _scan_code_text(facts: CodeFacts, path: str, text: str) -> None:
    for method, pattern in _CODE_SIGNALS.items():
        for match in pattern.finditer(text):
            facts.evidence.append(MethodEvidence(method, path, match.group(0)))
            break


def scan_files(files: dict[str, str]) -> CodeFacts:
    """Scan a revision's text files (path relative to ``code/`` → content).

    Args:
        files: The files to scan; binary files should be left out by the caller.

    Returns:
        The methods (with evidence) and hyperparameters the files show.

    >>> code = ("from trl import GRPOTrainer, GRPOConfig\\n"
    ...         "cfg = GRPOConfig(learning_rate=1e-6, num_generations=8)")
    >>> facts = scan_files({"train.py": code})
    >>> facts.methods, facts.hyperparameters_for("GRPO")
    (['GRPO'], {'learning_rate': 1e-06, 'num_generations': 8})
    >>> scan_files({"runs/sft/log.txt": "loss 1.2"}).methods
    ['SFT']
    """
    facts = CodeFacts()
    for path in sorted(files):
        text = files[path]
        for part in path.lower().split("/")[:-1]:
            for method, pattern in _KEY_SIGNALS.items():
                if pattern.search(part):
                    facts.evidence.append(MethodEvidence(method, path, f"folder {part!r}"))
        if path.endswith(".json"):
            try:
                _walk_json(facts, path, json.loads(text))
                continue
            except ValueError:
                pass
        _scan_code_text(facts, path, text)
        for name, value in _ASSIGN.findall(text):
            _add_hyperparameter(facts, path, name, _as_number(value))
    return facts


def added_text(diff: str) -> dict[str, str]:
    """The lines a unified git diff adds, per file (``b/`` path relative to ``code/``).

    >>> added_text("diff --git a/x.py b/x.py\\n+++ b/x.py\\n@@ -0,0 +1 @@\\n"
    ...            "+from trl import DPOTrainer\\n")
    {'x.py': 'from trl import DPOTrainer'}
    """
    out: dict[str, list[str]] = {}
    current: str | None = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            target = line[4:].strip()
            current = None if target == "/dev/null" else target.removeprefix("b/")
            if current is not None:
                out.setdefault(current, [])
        elif line.startswith("+") and current is not None:
            out[current].append(line[1:])
    return {path: "\n".join(lines) for path, lines in out.items()}


def trainer_class_in_model(model_dir_files: dict[str, bytes]) -> str | None:
    """The TRL config class recorded in a saved model's ``training_args.bin``, if exactly one.

    ``Trainer.save_model`` pickles its arguments there; the class name is plain text in the
    pickle, so it is found without unpickling (which would run code from the agent's files).

    >>> pickled = b"\\x80\\x02ctrl.trainer.grpo_config\\nGRPOConfig\\nq"
    >>> trainer_class_in_model({"training_args.bin": pickled})
    'GRPO'
    >>> trainer_class_in_model({}) is None
    True
    """
    blob = model_dir_files.get("training_args.bin", b"")
    found = [m for m in METHODS if f"{m}Config".encode() in blob]
    return found[0] if len(found) == 1 else None
