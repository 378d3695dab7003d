"""Stop strings for HF generation: a row is done once its generated text contains a stop string.

Shared by the grader's HF engine and the scripted agent's policy, like :mod:`agent_kit.hf_prefix`.

``transformers``' own ``stop_strings`` matches the stop string against the last tokens of the whole
sequence, prompt included, so a stop string that straddles the prompt's end would end a row early
where :func:`agent_kit.protocol.cut_at_stop` (which sees only the generated text) keeps going. This
criterion decodes the generated tokens only, exactly what the engine cuts afterwards, so the texts
after ``cut_at_stop`` are the same as generating to ``max_new_tokens`` and cutting.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import StoppingCriteria


class StopOnStrings(StoppingCriteria):
    """Marks a row finished once the text generated after ``prompt_len`` tokens contains a stop
    string.

    ``generate`` stops when every row is finished (by EOS or by this); finished rows are padded.
    """

    def __init__(self, tokenizer: Any, stop: list[str], prompt_len: int) -> None:
        """Args: tokenizer: decodes generated tokens; stop: the stop strings; prompt_len: columns of
        the prompt.
        """
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.prompt_len = prompt_len
        self.done: torch.Tensor | None = None  # rows already seen finished: never decoded again

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        """One bool per row: its generated text holds a stop string."""
        rows = input_ids.shape[0]
        if self.done is None or self.done.shape[0] != rows:
            self.done = torch.zeros(rows, dtype=torch.bool, device=input_ids.device)
        pending = [i for i in range(rows) if not bool(self.done[i])]
        if pending:
            texts = self.tokenizer.batch_decode(
                input_ids[pending, self.prompt_len :], skip_special_tokens=True
            )
            for row, text in zip(pending, texts, strict=True):
                if any(s in text for s in self.stop):
                    self.done[row] = True
        return self.done.clone()  # type: ignore[return-value]  # a BoolTensor
