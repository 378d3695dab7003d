"""Reading a model's tensors from its weight files, and hashing them (used by the submission
checks).

Tensors are read one file handle at a time and one tensor (or a slice of its rows) at a time, so
memory stays bounded by the largest tensor read. torch and safetensors are imported inside the
functions that need them, so importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autorl.errors import AutorlError

if TYPE_CHECKING:
    import torch

__all__ = [
    "CorruptWeightsError",
    "ModelFiles",
    "TensorReaders",
    "tensor_locations",
    "weights_hash",
]

SAVE_HINT = "save the model with model.save_pretrained(path) and tokenizer.save_pretrained(path)"
# Bumped whenever the byte stream fed to the hash changes, so old and new hashes never collide.
_HASH_DOMAIN = b"autorl-weights-v1\0"


class CorruptWeightsError(AutorlError):
    """A weight file cannot be read; the submission is recorded as ``invalid`` with this message."""


@dataclass(frozen=True)
class ModelFiles:
    """The weight files of a model directory that passed :func:`check_loadable_model`.

    Attributes:
        weight_files: The files that hold the tensors, in a stable (sorted) order.
        is_adapter: True for a LoRA adapter directory, which is scored on its base model.
    """

    weight_files: tuple[Path, ...]
    is_adapter: bool


def tensor_locations(files: ModelFiles) -> dict[str, Path]:
    """Maps every tensor name of a model to the weight file that holds it.

    Raises:
        CorruptWeightsError: A weight file cannot be read, or two files hold a tensor of the same
            name.
    """
    where: dict[str, Path] = {}
    for path in files.weight_files:
        for name in _tensor_names(path):
            if name in where:
                raise CorruptWeightsError(
                    f"tensor {name!r} is stored in both {where[name].name} and {path.name}: "
                    "save the model again into an empty folder"
                )
            where[name] = path
    return where


def weights_hash(files: ModelFiles) -> str:
    """Hashes the tensors of a model, independent of file names, sharding and file metadata.

    The hash covers, for every tensor in name order, its name, dtype, shape and raw bytes, so two
    saves of the same weights (sharded or not, safetensors or ``.bin``) hash the same and any
    changed weight changes the hash. Tensors are read one at a time to keep memory bounded.

    Args:
        files: The weight files from :func:`check_loadable_model`.

    Returns:
        The sha256 hex digest.

    Raises:
        CorruptWeightsError: A weight file cannot be read (the message names the file and carries
            the library's error), two files hold a tensor of the same name, or there are no tensors.
    """
    where = tensor_locations(files)
    if not where:
        names = ", ".join(p.name for p in files.weight_files)
        raise CorruptWeightsError(f"the weight files ({names}) hold no tensors")

    digest = hashlib.sha256(_HASH_DOMAIN)
    with TensorReaders() as readers:
        for name in sorted(where):
            tensor = readers.get(where[name], name)
            _update_with_tensor(digest, name, tensor)
            del tensor
    return digest.hexdigest()


def _tensor_names(path: Path) -> list[str]:
    """Lists the tensor names in one weight file.

    Raises:
        CorruptWeightsError: The file cannot be opened or parsed.
    """
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as handle:
                return list(handle.keys())
        except MemoryError:
            raise
        except Exception as exc:  # any failure of the reader means the file is unusable
            raise _corrupt(path, exc) from exc
    return list(_load_bin(path))


def _load_bin(path: Path) -> dict[str, torch.Tensor]:
    """Loads a ``.bin`` state dict safely (no pickle code), memory-mapped where the format allows.

    Raises:
        CorruptWeightsError: The file cannot be loaded or does not hold a state dict.
    """
    import torch

    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            # Files in torch's legacy (pre-zip) format cannot be memory-mapped.
            if "mmap" not in str(exc):
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)
    except MemoryError:
        raise
    except Exception as exc:  # any failure of the reader means the file is unusable
        raise _corrupt(path, exc) from exc
    if not isinstance(state, dict):
        raise CorruptWeightsError(
            f"weight file {path.name} holds a {type(state).__name__}, not a state dict of tensors: "
            f"{SAVE_HINT}"
        )
    return {k: v for k, v in state.items() if isinstance(k, str) and isinstance(v, torch.Tensor)}


def _corrupt(path: Path, exc: BaseException) -> CorruptWeightsError:
    return CorruptWeightsError(
        f"weight file {path.name} cannot be read ({type(exc).__name__}: {exc}): save the model "
        "again with model.save_pretrained(path) and submit it again"
    )


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Turns any failure of a tensor reader on ``path`` into :class:`CorruptWeightsError` (the file
    is unusable).
    """
    try:
        yield
    except (CorruptWeightsError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of the reader means the file is unusable
        raise _corrupt(path, exc) from exc


class TensorReaders:
    """Reads tensors by name from several weight files, keeping each file open once.

    :meth:`rows` reads part of a tensor (safetensors slices, memory-mapped ``.bin``), so a caller
    can walk a large embedding matrix without holding it whole.
    """

    def __init__(self) -> None:
        """Open nothing yet: each file is opened on its first read."""
        self._handles: dict[Path, Any] = {}

    def __enter__(self) -> TensorReaders:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for handle in self._handles.values():
            close = getattr(handle, "__exit__", None)
            if close is not None:
                close(None, None, None)
        self._handles.clear()

    def get(self, path: Path, name: str) -> torch.Tensor:
        """Returns tensor ``name`` of ``path``.

        Raises:
            CorruptWeightsError: The tensor's data cannot be read.
        """
        with _reading(path):
            handle = self._handle(path)
            # A handle is a safetensors reader or a loaded state dict (see _open): either gives a
            # tensor.
            tensor: torch.Tensor = (
                handle[name] if isinstance(handle, dict) else handle.get_tensor(name)
            )
            return tensor

    def shape(self, path: Path, name: str) -> tuple[int, ...]:
        """Returns the shape of tensor ``name`` of ``path`` without reading its data.

        Raises:
            CorruptWeightsError: The file cannot be read.
        """
        with _reading(path):
            handle = self._handle(path)
            if isinstance(handle, dict):
                return tuple(handle[name].shape)
            return tuple(handle.get_slice(name).get_shape())

    def rows(self, path: Path, name: str, start: int, stop: int) -> torch.Tensor:
        """Returns rows ``start:stop`` (first dimension) of tensor ``name``; a 0-d tensor whole.

        Raises:
            CorruptWeightsError: The tensor's data cannot be read.
        """
        with _reading(path):
            handle = self._handle(path)
            if isinstance(handle, dict):
                tensor: torch.Tensor = handle[name]
                return tensor if tensor.dim() == 0 else tensor[start:stop]
            part = handle.get_slice(name)
            if not part.get_shape():
                return self.get(path, name)
            sliced: torch.Tensor = part[start:stop]
            return sliced

    def _handle(self, path: Path) -> Any:
        handle = self._handles.get(path)
        if handle is None:
            handle = self._open(path)
            self._handles[path] = handle
        return handle

    @staticmethod
    def _open(path: Path) -> Any:
        if path.suffix == ".safetensors":
            from safetensors import safe_open

            return safe_open(str(path), framework="pt").__enter__()
        return _load_bin(path)


def _update_with_tensor(digest: Any, name: str, tensor: torch.Tensor) -> None:
    """Feeds one tensor into the hash: length-prefixed name, dtype and shape, then its bytes."""
    import torch

    header = json.dumps([name, str(tensor.dtype), list(tensor.shape)]).encode("utf-8")
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    # The array's buffer (ndarray.data), as numpy types ndarray as a buffer only on Python 3.12+.
    data: memoryview | bytes = flat.view(torch.uint8).numpy().data if flat.numel() else b""
    digest.update(len(header).to_bytes(8, "little"))
    digest.update(header)
    digest.update(int(flat.numel() * flat.element_size()).to_bytes(8, "little"))
    digest.update(memoryview(data))
