"""The scripted agent's settings: one typed file, written by its adapter, read by the agent.

``conf/agent/scripted.yaml`` holds the values (its ``sft``, ``grpo`` and ``online_grpo`` blocks are
typed by these dataclasses in autorl's config schema); the adapter writes them with the cell's
recipe and seed as JSON (:data:`SETTINGS_FILE`, in the workspace) and ``python -m
agent_kit.scripted --settings <file>`` reads them back with :meth:`ScriptedSettings.load`. A field
named as one of TRL's ``SFTConfig`` / ``GRPOConfig`` fields means what it means there, so the same
name runs from the YAML to the trainer.

Standard library only: the agent side runs with a toolchain that has no autorl.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

SETTINGS_FILE = "scripted_settings.json"


def _help(text: str) -> Any:
    """A required field with its help text (TRL's ``metadata={"help": ...}``)."""
    return field(metadata={"help": text})


@dataclass
class SftSettings:
    """The supervised fine-tuning stage (TRL's ``SFTConfig`` names)."""

    max_steps: int = _help("optimizer steps")
    per_device_train_batch_size: int = _help("examples per step")
    learning_rate: float = _help("AdamW learning rate")
    max_length: int = _help("tokens per example (prompt + answer), longer ones are cut")


@dataclass
class GrpoSettings:
    """The GRPO stage of single-turn tasks: TRL's ``GRPOTrainer`` on the task's rule reward."""

    max_steps: int = _help("optimizer steps")
    per_device_train_batch_size: int = _help("completions per step")
    num_generations: int = _help("completions per prompt; must divide per_device_train_batch_size")
    learning_rate: float = _help("AdamW learning rate")
    max_completion_length: int = _help("tokens per sampled completion")
    beta: float = _help("KL coefficient against the reference model (0: no reference model)")
    temperature: float = _help("sampling temperature of the completions")


@dataclass
class OnlineGrpoSettings:
    """The RL stage of interactive tasks: GRPO on rollouts played through the grading API's env
    endpoints (:mod:`agent_kit.scripted.interactive`). Fields named as TRL's ``GRPOConfig``'s mean
    what they mean there; the others have no TRL counterpart."""

    batches: int = _help("rollout batches played; each is trained on num_iterations times")
    per_device_train_batch_size: int = _help("rollouts per batch (every update uses them all)")
    num_generations: int = _help(
        "rollouts of each training episode in a batch (the group of the group baseline)"
    )
    learning_rate: float = _help("AdamW learning rate (one optimizer for the whole stage)")
    num_iterations: int = _help("optimizer steps per batch; after the first, PPO-clipped")
    epsilon: float = _help("the clip range of the probability ratio")
    temperature: float = _help(
        "sampling temperature of the rollouts; the update scores tokens at the same one"
    )
    episodes: int = _help(
        "training episodes the batches replay, a batch's worth at a time (a fixed draw by the "
        "cell's seed, outside the expert's when enough are left); 0: a fresh draw every batch"
    )
    sft_mix: int = _help(
        "SFT's expert sequences added to each update, keeping the policy near SFT's (0: none)"
    )
    sft_mix_weight: float = _help(
        "the weight of each mixed SFT sequence (a rollout's is its advantage)"
    )
    probe: int = _help(
        "batches' worth of rollouts of the first batch's episodes, played before RL and again "
        "after it with the same sampling noise, so the two rewards differ by what RL changed "
        "(0: no probe)"
    )

    def check(self, prefix: str = "", error: Callable[[str], Exception] = ValueError) -> None:
        """Refuse a replayed pool, an SFT mix or a probe that cannot mean anything.

        Args:
            prefix: Where the block sits in the caller's config, for the message (``agent.``).
            error: The exception type to raise.

        Raises:
            ValueError: (or ``error``) a negative ``episodes``, ``sft_mix``, ``sft_mix_weight``
                or ``probe``.
        """
        zero_means = {
            "episodes": "a fresh draw every batch",
            "sft_mix": "no SFT sequences mixed in",
            "sft_mix_weight": "no SFT sequences mixed in",
            "probe": "no probe",
        }
        for name, meaning in zero_means.items():
            if (value := getattr(self, name)) < 0:
                raise error(
                    f"{prefix}online_grpo.{name} must be at least 0 (0: {meaning}), got {value}"
                )


@dataclass
class ScriptedSettings:
    """Everything one run of the scripted agent is told (besides its environment variables).

    Attributes:
        recipe_dir: The task's agent-side package (a copy of ``tasks/<id>/agent``).
        recipe: The recipe's ``module:attr`` inside that package, a ``run(settings) -> int``.
        seed: The cell's seed: data order and sampling vary with it.
        sft: The SFT stage.
        grpo: The GRPO stage of single-turn tasks.
        online_grpo: The RL stage of interactive tasks.
    """

    recipe_dir: str
    recipe: str
    seed: int
    sft: SftSettings
    grpo: GrpoSettings
    online_grpo: OnlineGrpoSettings

    def with_sft(self, **changes: Any) -> ScriptedSettings:
        """A copy with some SFT settings changed (e.g. a task that needs longer sequences)."""
        return dataclasses.replace(self, sft=dataclasses.replace(self.sft, **changes))

    def flat(self) -> dict[str, Any]:
        """One level of ``<stage>_<field>`` keys (``sft_max_steps``), as the agent records them in
        ``code/recipe.json``: a reader of the agent's code (autorl's report) tells each stage's
        values apart by that prefix."""
        flat: dict[str, Any] = {}
        for name, value in dataclasses.asdict(self).items():
            if isinstance(value, dict):
                flat |= {f"{name}_{key}": item for key, item in value.items()}
            else:
                flat[name] = value
        return flat

    def to_json(self) -> str:
        """The settings file's text."""
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"

    def write(self, path: Path) -> None:
        """Write the settings file."""
        path.write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScriptedSettings:
        """Settings from the file's JSON object.

        Raises:
            ValueError: A key is missing or unknown (the message names it), or a value has the
                wrong type.
        """
        sections = {"sft": SftSettings, "grpo": GrpoSettings, "online_grpo": OnlineGrpoSettings}
        top = _typed(cls, data, "", skip=set(sections))
        for name, kind in sections.items():
            top[name] = kind(**_typed(kind, data[name], f"{name}."))
        return cls(**top)

    @classmethod
    def load(cls, path: Path) -> ScriptedSettings:
        """Read a settings file (:meth:`from_dict`).

        Raises:
            ValueError: It is not valid JSON or does not hold valid settings.
        """
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not JSON: {error}") from error
        if not isinstance(data, dict):
            raise ValueError(f"{path} must hold a JSON object, not {type(data).__name__}")
        try:
            return cls.from_dict(data)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from error


_D = TypeVar("_D")
_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str,)}


def _typed(kind: type[_D], data: Any, where: str, skip: set[str] | None = None) -> dict[str, Any]:
    """``data``'s values of ``kind``'s fields (but ``skip``), checked against the field types.

    Raises:
        ValueError: ``data`` is no object, a key is missing or unknown, or a value's type is wrong.
    """
    if not isinstance(data, Mapping):
        what = where.rstrip(".") or "the settings"
        raise ValueError(f"{what} must be an object, not {type(data).__name__}")
    names = {f.name: f for f in dataclasses.fields(kind)}  # type: ignore[arg-type]
    unknown, missing = sorted(set(data) - set(names)), sorted(set(names) - set(data))
    if unknown or missing:
        raise ValueError(
            f"settings {kind.__name__}: unknown key(s) {[where + k for k in unknown]}, missing "
            f"key(s) {[where + k for k in missing]}; its keys are {sorted(names)}"
        )
    values = {}
    for name, spec in names.items():
        if skip and name in skip:
            continue
        value = data[name]
        allowed = _TYPES.get(str(spec.type), ())
        if allowed and (isinstance(value, bool) or not isinstance(value, allowed)):
            raise ValueError(f"{where}{name} must be {spec.type}, got {value!r}")
        values[name] = float(value) if spec.type == "float" else value
    return values
