"""Inference engines used by the grader (HF transformers here; vLLM on GPU hosts).

:data:`ENGINES` maps an engine name to its class; each takes ``(model_dir, *, batch_size)``.
"""

from autorl.registry import Registry

ENGINES: Registry[type] = Registry("engine", {"hf": "autorl.engine.hf:HFEngine"})
