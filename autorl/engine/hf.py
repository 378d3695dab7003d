"""HF transformers engine: batched, left-padded, greedy generation on CPU or one GPU, kept warm
across submissions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_kit.hf_prefix import PrefixCache, generate_rows, supports_prefix_cache
from autorl.engine.base import ChatTemplateEngine
from autorl.engine.chat_render import RenderLimits
from autorl.engine.decoding import greedy_generation_config
from autorl.engine.hf_swap import load_into, model_signature, read_safetensors
from autorl.errors import AutorlError

logger = logging.getLogger(__name__)


ADAPTER_CONFIG = "adapter_config.json"


class AdapterBaseMissing(AutorlError):
    """A LoRA adapter reached the engine without the cell's base model: the grader's error, not the
    agent's.
    """


class HFEngine(ChatTemplateEngine):
    """Greedy generation with ``transformers``; implements
    :class:`autorl.engine.base.GenerationEngine`.

    Prompts are processed in chunks of ``batch_size`` with left padding, so one call serves a whole
    evaluation set. Batched greedy output equals one-by-one output. Warm: a later
    submission of the same architecture is loaded into the same modules (:meth:`swap`); a row stops
    generating once its text holds a stop string (:class:`agent_kit.hf_stop.StopOnStrings`); prompt
    prefixes already encoded are reused (:class:`PrefixCache`). Neither changes a text.
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        batch_size: int = 64,
        device: str | None = None,
        base_dir: Path | None = None,
        prefix_cache: bool = True,
        prefix_cache_mb: int = 512,
        min_shared_tokens: int = 16,
        render_limits: RenderLimits | None = None,
    ) -> None:
        """Load the model and tokenizer from ``model_dir`` (raises what transformers raises).

        A folder with an ``adapter_config.json`` is a LoRA adapter: it is applied to ``base_dir``
        and merged, whatever base its config names (:func:`load_adapter_on_base`); a full model
        ignores ``base_dir``. (The submission checks refuse a folder holding both a full model and
        an adapter, which transformers would load as the full model with the adapter on top.)

        Args:
            prefix_cache: Reuse the key/values of prompt prefixes encoded before
                (conf/engine/hf.yaml).
            prefix_cache_mb: Memory the kept key/values may take.
            min_shared_tokens: A prefix all rows of a batch share is encoded once when at least this
                long.
            render_limits: Time and size limits of the chat template's render process (None:
                the defaults).

        Raises:
            AdapterBaseMissing: ``model_dir`` is an adapter and ``base_dir`` is None or not a
                folder.
        """
        import torch
        from transformers import AutoModelForCausalLM

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.batch_size = batch_size
        self.tokenizer = _load_tokenizer(model_dir)
        self.dtype = engine_dtype(self.device)
        # a PreTrainedModel; Any, as transformers' decorator on .to() hides its signature from mypy
        model: Any
        adapter = (model_dir / ADAPTER_CONFIG).is_file()
        if adapter:
            _require_base(model_dir, base_dir)
            assert base_dir is not None
            model = load_adapter_on_base(
                model_dir, base_dir, dtype=self.dtype, vocab_size=len(self.tokenizer)
            )
        else:
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=self.dtype)
        self.model = model.to(self.device)
        self.model.eval()
        self.render_limits = render_limits
        # Greedy with the task's lengths and stops: never the submission's generation_config.json.
        weights_dir = base_dir if adapter and base_dir is not None else model_dir
        config = self.model.config
        self.generation_config = greedy_generation_config(weights_dir, config, self.tokenizer)
        self.model.generation_config = self.generation_config
        # The cell's base weights, for adapters swapped in.
        self._base: tuple[Path, dict[str, Any]] | None = None
        self.prefix: PrefixCache | None = None
        if prefix_cache and supports_prefix_cache(self.model.config):
            self.prefix = PrefixCache(
                self.model, max_bytes=prefix_cache_mb << 20, min_shared_tokens=min_shared_tokens
            )

    def swap(self, model_dir: Path, *, base_dir: Path | None = None) -> bool:
        """Load the submission in ``model_dir`` into this engine's modules instead of building a new
        engine.

        A full model's safetensors weights are copied in; an adapter is merged onto a fresh copy of
        ``base_dir``'s weights (read once, then held in memory). Kept prompt key/values are dropped.

        Returns:
            ``False``, with the engine unchanged, when the submission (for an adapter: ``base_dir``)
            has another config than the loaded model, weights that do not fit its modules, weights
            that are
            not safetensors, or a tokenizer that needs more embeddings: build a new engine then.

        Raises:
            AdapterBaseMissing: ``model_dir`` is an adapter and ``base_dir`` is None or not a
                folder.
            Exception: What loading the submission raises (as the constructor would); the engine may
                then hold partly loaded weights and must be discarded.
        """
        from transformers import AutoConfig

        adapter = (model_dir / ADAPTER_CONFIG).is_file()
        if adapter:
            _require_base(model_dir, base_dir)
            assert base_dir is not None
        weights_dir = base_dir if adapter and base_dir is not None else model_dir
        if model_signature(AutoConfig.from_pretrained(weights_dir)) != model_signature(
            self.model.config
        ):
            return False
        tokenizer = _load_tokenizer(model_dir)
        rows = int(self.model.get_input_embeddings().weight.shape[0])
        if adapter and len(tokenizer) > rows:
            return False  # the cold path resizes the base's embeddings: another architecture
        state = self._base_state(weights_dir) if adapter else read_safetensors(model_dir)
        if state is None or not load_into(self.model, state):
            return False
        if adapter:
            self.model = apply_adapter(self.model, model_dir, base_dir=weights_dir)
            self.model.eval()
        self.generation_config = greedy_generation_config(weights_dir, self.model.config, tokenizer)
        self.model.generation_config = self.generation_config
        self.tokenizer = tokenizer
        self.reset_render_budget()
        if self.prefix is not None:
            self.prefix.model = self.model
            self.prefix.clear()
        return True

    def close(self) -> None:
        """Drop the model, the kept key/values and the held base weights."""
        import gc

        self.close_renderer()
        self.prefix = None
        self._base = None
        self.model = None
        gc.collect()

    def generate_text(
        self,
        prompts: list[str],
        *,
        max_new_tokens: int,
        stop: list[str] | None = None,
        add_special_tokens: bool = True,
    ) -> list[str]:
        """Generate a greedy completion of each prompt, in input order."""
        outputs: list[str] = []
        for start in range(0, len(prompts), self.batch_size):
            rows = self._token_ids(
                prompts[start : start + self.batch_size], add_special_tokens, max_new_tokens
            )
            # Passed as well as set on the model: generate() fills what a call leaves unset from
            # the model's, and reads no generation keys of config.json when given one.
            outputs += generate_rows(
                self.model,
                self.tokenizer,
                rows,
                self.prefix,
                max_new_tokens=max_new_tokens,
                stop=stop,
                do_sample=False,
                generation_config=self.generation_config,
            )
        return outputs

    def _token_ids(
        self, prompts: list[str], add_special_tokens: bool, max_new_tokens: int
    ) -> list[Any]:
        """Each prompt's token ids (1-D tensors), keeping its end within the model's window."""
        import torch

        kwargs: dict[str, Any] = {"add_special_tokens": add_special_tokens}
        max_len = getattr(self.model.config, "max_position_embeddings", None)
        if max_len:
            # Keep the prompt's end (the question) when it is too long for the context window.
            self.tokenizer.truncation_side = "left"
            kwargs |= {"truncation": True, "max_length": max(1, int(max_len) - max_new_tokens)}
        return [
            torch.tensor(ids, dtype=torch.long)
            for ids in self.tokenizer(prompts, **kwargs)["input_ids"]
        ]

    def _base_state(self, base_dir: Path) -> dict[str, Any] | None:
        """``base_dir``'s weights, read on first use and held (on the CPU) for later adapters."""
        if self._base is None or self._base[0] != base_dir:
            state = read_safetensors(base_dir)
            if state is None:
                return None
            self._base = (base_dir, state)
        return self._base[1]


def dtype_name(device: str, *, bf16_supported: Callable[[], bool] | None = None) -> str:
    """The torch dtype the engines load a model in on ``device``: ``bfloat16`` on a CUDA GPU that
    supports it, else ``float32``.

    The CPU stays float32, so CPU scores stay those of every earlier CPU run; a GPU without bf16
    (before Ampere) gets float32 too rather than float16, whose range overflows in some models.

    Args:
        device: ``cpu``, ``cuda`` or ``cuda:<index>``.
        bf16_supported: Whether the GPU computes in bf16 (a seam; None: ask torch).

    >>> dtype_name("cpu"), dtype_name("cuda:1", bf16_supported=lambda: True)
    ('float32', 'bfloat16')
    >>> dtype_name("cuda", bf16_supported=lambda: False)
    'float32'
    """
    if device.split(":")[0] != "cuda":
        return "float32"
    if bf16_supported is None:
        import torch

        bf16_supported = torch.cuda.is_bf16_supported
    return "bfloat16" if bf16_supported() else "float32"


def engine_dtype(device: str) -> Any:
    """The ``torch.dtype`` of :func:`dtype_name` for ``device``."""
    import torch

    return getattr(torch, dtype_name(device))


def _load_tokenizer(model_dir: Path) -> Any:
    """The tokenizer of ``model_dir``, set up for batched decoder-only generation (left padding)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # Decoder-only batched generation needs left padding, whatever the saved tokenizer says.
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _require_base(model_dir: Path, base_dir: Path | None) -> None:
    """Raise :class:`AdapterBaseMissing` unless ``base_dir`` is a folder (``model_dir`` is an
    adapter).
    """
    if base_dir is None or not base_dir.is_dir():
        raise AdapterBaseMissing(
            f"{model_dir} is a LoRA adapter, but the grader was given no base model folder to "
            f"apply it to (base_dir={base_dir}): pass the cell's base model as base_dir"
        )


def load_adapter_on_base(adapter_dir: Path, base_dir: Path, *, dtype: Any, vocab_size: int) -> Any:
    """Loads ``base_dir`` and applies the LoRA adapter in ``adapter_dir`` to it, merged for
    generation.

    Args:
        adapter_dir: The grader's copy of the adapter submission.
        base_dir: The grader's copy of the cell's base model.
        dtype: The torch dtype to load the base in.
        vocab_size: The submission tokenizer's size; the base's embeddings are resized up to it
            (an agent that added tokens trained the adapter on resized embeddings).

    Returns:
        The merged ``PreTrainedModel``.
    """
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=dtype)
    rows = int(base.get_input_embeddings().weight.shape[0])  # type: ignore[index]  # an Embedding's weight
    if vocab_size > rows:
        base.resize_token_embeddings(vocab_size)
    return apply_adapter(base, adapter_dir, base_dir=base_dir)


def apply_adapter(base: Any, adapter_dir: Path, *, base_dir: Path) -> Any:
    """Applies the LoRA adapter in ``adapter_dir`` to the loaded ``base`` and merges it (``base`` is
    modified).

    ``base_model_name_or_path`` is replaced by ``base_dir`` and ``init_lora_weights`` forced to the
    plain initialisation before PEFT sees the config: initialisations such as PiSSA rewrite base
    weights while the adapter is built, which would score weights the distance check never saw.

    Returns:
        The merged ``PreTrainedModel`` (the same modules as ``base``).
    """
    from peft import LoraConfig, PeftModel

    config = LoraConfig.from_pretrained(str(adapter_dir))
    config.base_model_name_or_path = str(base_dir)
    config.init_lora_weights = True
    config.inference_mode = True
    peft_model = PeftModel.from_pretrained(
        base, str(adapter_dir), config=config, is_trainable=False
    )
    return peft_model.merge_and_unload()
