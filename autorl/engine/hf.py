"""HF transformers engine: batched, left-padded, greedy generation on CPU or one GPU."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from agent_kit.protocol import ChatMessage, cut_at_stop

logger = logging.getLogger(__name__)


class HFEngine:
    """Greedy generation with ``transformers``; implements :class:`autorl.engine.base.GenerationEngine`.

    Prompts are processed in chunks of ``batch_size`` with left padding, so one call serves a
    whole evaluation set. Batched output equals one-by-one output (stack-notes.md §5).
    """

    def __init__(self, model_dir: Path, *, batch_size: int = 64, device: str | None = None) -> None:
        """Load the model and tokenizer from ``model_dir`` (raises what transformers raises)."""
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
        # The ignore: transformers' decorator on PreTrainedModel.to hides its signature from mypy.
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(self.device)  # type: ignore[arg-type]
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
