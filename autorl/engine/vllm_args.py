"""The keyword arguments of ``vllm.LLM`` from the vLLM engine's options (conf/engine/vllm.yaml).

Kept apart from :mod:`autorl.engine.vllm` and free of vLLM imports, so that the GPU options can be
checked (tests/unit/test_gpu_engines.py) where vLLM is not installed.
"""

from __future__ import annotations

from typing import Any

from autorl.errors import AutorlError


class VLLMEngineError(AutorlError):
    """The vLLM engine cannot serve this submission (and no other engine setting would)."""


def llm_kwargs(
    *,
    model: str,
    tokenizer: str,
    platform: str,
    batch_size: int,
    dtype: str | None,
    max_model_len: int | None,
    enable_prefix_caching: bool,
    kv_cache_gb: float | None,
    gpu_memory_utilization: float,
    tensor_parallel_size: int | None,
    visible_gpus: int,
    enforce_eager: bool,
    max_lora_rank: int | None,
    seed: int,
) -> dict[str, Any]:
    """The keyword arguments of ``vllm.LLM`` for an engine with these options
    (``conf/engine/vllm.yaml``).

    Args:
        platform: What vLLM runs on (``cpu``, ``cuda``).
        dtype: None: float32 on the CPU, as the HF engine; bfloat16 on a GPU.
        kv_cache_gb: The KV cache's size on the CPU; unused on a GPU, where
            ``gpu_memory_utilization`` leaves the KV cache what the weights do not take.
        tensor_parallel_size: None: ``visible_gpus`` (at least 1).
        visible_gpus: The CUDA devices this process sees (0 on the CPU).
        max_lora_rank: None: LoRA off; else the largest adapter rank served (one adapter at once).

    Raises:
        VLLMEngineError: ``tensor_parallel_size`` asks for more GPUs than this process sees.

    >>> kw = llm_kwargs(model="m", tokenizer="m", platform="cuda", batch_size=8, dtype=None,
    ...     max_model_len=4096, enable_prefix_caching=True, kv_cache_gb=1,
    ...     gpu_memory_utilization=0.5, tensor_parallel_size=None, visible_gpus=2,
    ...     enforce_eager=True, max_lora_rank=None, seed=0)
    >>> kw["tensor_parallel_size"], kw["distributed_executor_backend"], kw["dtype"]
    (2, 'mp', 'bfloat16')
    >>> "kv_cache_memory_bytes" in kw, kw["gpu_memory_utilization"], kw["max_model_len"]
    (False, 0.5, 4096)
    """
    gpu = platform != "cpu"
    parallel = max(1, tensor_parallel_size or (visible_gpus if gpu else 1))
    if gpu and parallel > max(visible_gpus, 1):
        raise VLLMEngineError(
            f"tensor_parallel_size={parallel} needs {parallel} GPUs, this grader sees "
            f"{visible_gpus}: raise grader.gpus or lower grader.engines.vllm.options."
            "tensor_parallel_size"
        )
    kwargs: dict[str, Any] = {
        "model": model,
        "tokenizer": tokenizer,
        "dtype": dtype or ("bfloat16" if gpu else "float32"),
        "max_model_len": max_model_len,
        "enable_prefix_caching": enable_prefix_caching,
        "enforce_eager": enforce_eager,
        "max_num_seqs": batch_size,
        "seed": seed,
        "tensor_parallel_size": parallel,
        # One device: the worker runs in the EngineCore's process. Several: one worker process
        # each, started by vLLM inside the grader actor (so on the GPUs Ray gave it).
        "distributed_executor_backend": "uni" if parallel == 1 else "mp",
        "worker_extension_cls": "autorl.engine.vllm.WeightSwapExtension",
        "enable_lora": max_lora_rank is not None,
        "gpu_memory_utilization": gpu_memory_utilization,
        # vLLM's own sampling defaults, not those of the submission's generation_config.json:
        # decoding is the task's (autorl.engine.decoding); end ids go with each request.
        "generation_config": "vllm",
    }
    if kv_cache_gb is not None and not gpu:
        kwargs["kv_cache_memory_bytes"] = int(kv_cache_gb * (1 << 30))
    if max_lora_rank is not None:
        kwargs |= {"max_lora_rank": max_lora_rank, "max_loras": 1}
    return kwargs


def visible_gpus() -> int:
    """The CUDA devices this process sees (``CUDA_VISIBLE_DEVICES``, which Ray sets per actor)."""
    import torch

    return int(torch.cuda.device_count())
