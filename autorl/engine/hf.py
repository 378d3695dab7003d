"""HF transformers engine: batched, left-padded, greedy generation on CPU or one GPU."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from agent_kit.protocol import ChatMessage, cut_at_stop
from autorl.errors import AutorlError

logger = logging.getLogger(__name__)


ADAPTER_CONFIG = "adapter_config.json"


class AdapterBaseMissing(AutorlError):
    """A LoRA adapter reached the engine without the cell's base model: the grader's error, not the agent's."""


class HFEngine:
    """Greedy generation with ``transformers``; implements :class:`autorl.engine.base.GenerationEngine`.

    Prompts are processed in chunks of ``batch_size`` with left padding, so one call serves a
    whole evaluation set. Batched output equals one-by-one output (stack-notes.md §5).
    """

    def __init__(
        self, model_dir: Path, *, batch_size: int = 64, device: str | None = None, base_dir: Path | None = None
    ) -> None:
        """Load the model and tokenizer from ``model_dir`` (raises what transformers raises).

        A folder with an ``adapter_config.json`` is a LoRA adapter: it is applied to ``base_dir`` and
        merged, whatever base its config names (:func:`load_adapter_on_base`); a full model ignores
        ``base_dir``. (The submission checks refuse a folder holding both a full model and an adapter,
        which transformers would load as the full model with the adapter on top.)

        Raises:
            AdapterBaseMissing: ``model_dir`` is an adapter and ``base_dir`` is None or not a folder.
        """
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.batch_size = batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        # Decoder-only batched generation needs left padding, whatever the saved tokenizer says.
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
        model: Any  # a PreTrainedModel; Any, as transformers' decorator on .to() hides its signature from mypy
        if (model_dir / ADAPTER_CONFIG).is_file():
            if base_dir is None or not base_dir.is_dir():
                raise AdapterBaseMissing(
                    f"{model_dir} is a LoRA adapter, but the grader was given no base model folder to apply it "
                    f"to (base_dir={base_dir}): pass the cell's base model as base_dir"
                )
            model = load_adapter_on_base(model_dir, base_dir, dtype=dtype, vocab_size=len(self.tokenizer))
        else:
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
        self.model = model.to(self.device)
        self.model.eval()

    def generate_chat(
        self, conversations: list[list[ChatMessage]], *, max_new_tokens: int, stop: list[str] | None = None
    ) -> list[str]:
        """Generate the assistant reply of each conversation with the model's chat template."""
        prompts = [
            str(self.tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True)) for c in conversations
        ]
        return self.generate_text(prompts, max_new_tokens=max_new_tokens, stop=stop, add_special_tokens=False)

    def generate_text(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str] | None = None, add_special_tokens: bool = True
    ) -> list[str]:
        """Generate a greedy completion of each prompt, in input order."""
        import torch

        outputs: list[str] = []
        max_len = getattr(self.model.config, "max_position_embeddings", None)
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start : start + self.batch_size]
            kwargs: dict[str, Any] = {"return_tensors": "pt", "padding": True, "add_special_tokens": add_special_tokens}
            if max_len:
                # Keep the prompt's end (the question) when it is too long for the context window.
                self.tokenizer.truncation_side = "left"
                kwargs |= {"truncation": True, "max_length": max(1, int(max_len) - max_new_tokens)}
            encoded = self.tokenizer(chunk, **kwargs).to(self.device)
            with torch.no_grad():
                generated = self.model.generate(
                    **encoded,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    pad_token_id=self.tokenizer.pad_token_id,
                )
            new_tokens = generated[:, encoded["input_ids"].shape[1] :]
            texts = self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
            outputs.extend(cut_at_stop(text, stop) for text in texts)
        return outputs


def load_adapter_on_base(adapter_dir: Path, base_dir: Path, *, dtype: Any, vocab_size: int) -> Any:
    """Loads ``base_dir`` and applies the LoRA adapter in ``adapter_dir`` to it, merged for generation.

    ``base_model_name_or_path`` is replaced by ``base_dir`` and ``init_lora_weights`` forced to the
    plain initialisation before PEFT sees the config: initialisations such as PiSSA rewrite base
    weights while the adapter is built, which would score weights the distance check never saw.

    Args:
        adapter_dir: The grader's copy of the adapter submission.
        base_dir: The grader's copy of the cell's base model.
        dtype: The torch dtype to load the base in.
        vocab_size: The submission tokenizer's size; the base's embeddings are resized up to it
            (an agent that added tokens trained the adapter on resized embeddings).

    Returns:
        The merged ``PreTrainedModel``.
    """
    from peft import LoraConfig, PeftModel
    from transformers import AutoModelForCausalLM

    config = LoraConfig.from_pretrained(str(adapter_dir))
    config.base_model_name_or_path = str(base_dir)
    config.init_lora_weights = True
    config.inference_mode = True
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=dtype)
    rows = int(base.get_input_embeddings().weight.shape[0])  # type: ignore[index]  # an Embedding's weight
    if vocab_size > rows:
        base.resize_token_embeddings(vocab_size)
    peft_model = PeftModel.from_pretrained(base, str(adapter_dir), config=config, is_trainable=False)
    return peft_model.merge_and_unload()
