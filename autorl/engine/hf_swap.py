"""Loading another submission's weights into a built HF model (the warm engine's swap).

A submission with the same config as the loaded model (architecture, sizes, vocabulary, special
token ids) is copied into the same modules from its safetensors files; anything else (another
architecture, missing or reshaped weights, weights that are not safetensors) is refused, and the
caller builds a new engine with ``from_pretrained`` the way a cold grader would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

# Config keys that name or stamp a checkpoint without changing what the model computes.
_NAMING_KEYS = {
    "_name_or_path",
    "name_or_path",
    "transformers_version",
    "dtype",
    "torch_dtype",
    "_commit_hash",
    "_attn_implementation_autoset",
    "_attn_implementation",
}


def model_signature(config: Any) -> str:
    """What must be equal for two checkpoints to share modules: the config without naming keys."""
    data = {k: v for k, v in config.to_dict().items() if k not in _NAMING_KEYS}
    return json.dumps(data, sort_keys=True, default=str)


def read_safetensors(model_dir: Path) -> dict[str, torch.Tensor] | None:
    """Every tensor of ``model_dir``'s safetensors weights (single file or sharded); ``None``
    without them.

    Raises:
        Whatever ``safetensors`` raises for a damaged file (the submission's load error).
    """
    from safetensors.torch import load_file

    single = model_dir / "model.safetensors"
    if single.is_file():
        return load_file(str(single))
    index = model_dir / "model.safetensors.index.json"
    if not index.is_file():
        return None
    shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        state.update(load_file(str(model_dir / shard)))
    return state


def load_into(model: Any, state: dict[str, torch.Tensor]) -> bool:
    """Copy ``state`` into ``model``'s parameters and buffers; ``False`` (nothing copied) when it
    does not fit.

    It fits when every tensor of the model is in ``state`` with its shape, except tied ones whose
    partner is (``from_pretrained`` ties them the same way). Keys of ``state`` the model lacks are
    ignored, as ``from_pretrained`` ignores them.
    """
    own = model.state_dict()
    loaded_ptrs = {own[k].data_ptr() for k in state if k in own}
    for key, tensor in own.items():
        if key in state:
            if tuple(state[key].shape) != tuple(tensor.shape):
                return False
        elif tensor.data_ptr() not in loaded_ptrs:
            # From_pretrained would initialise it at random: leave that to a fresh build.
            return False
    copied: set[int] = set()
    with torch.no_grad():
        for (
            key,
            tensor,
        ) in own.items():  # a tied pair is copied once, from its first name (the input embeddings)
            if key in state and tensor.data_ptr() not in copied:
                tensor.copy_(state[key])
                copied.add(tensor.data_ptr())
    return True
