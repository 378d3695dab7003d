"""Inference engines used by the grader (HF transformers here; vLLM on GPU hosts).

:data:`ENGINES` maps an engine name to its class; each takes ``(model_dir, *, batch_size, base_dir)``.
``base_dir`` is the grader's copy of the cell's base model: a LoRA adapter in ``model_dir`` is
always applied to it, whatever base its ``adapter_config.json`` names (issue #12); every engine
must keep that rule (:func:`autorl.engine.hf.load_adapter_on_base`).
"""

from autorl.registry import Registry

ENGINES: Registry[type] = Registry("engine", {"hf": "autorl.engine.hf:HFEngine"})
