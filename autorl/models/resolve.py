"""Resolve a ``conf/model/*.yaml`` entry to a local model folder (a cell's first step)."""

from __future__ import annotations

from pathlib import Path

from autorl.errors import ConfigError, PrerequisiteError
from autorl.schema import ModelConfig, ModelKind


def model_build(kind: ModelKind | str, hub_id: str | None) -> str:
    """The build a base model comes from: ``tiny-b1``, ``small-b3``, or a hub model's id.

    A cell records it; a completed cell recorded on another build runs again when its sweep
    resumes, since its scores measured another model.

    >>> model_build("tiny", None)
    'tiny-b1'
    >>> model_build("hub", "Qwen/Qwen2.5-0.5B-Instruct")
    'Qwen/Qwen2.5-0.5B-Instruct'
    """
    from autorl.models.small import SMALL_BUILD_VERSION
    from autorl.models.tiny import TINY_BUILD_VERSION

    kind = ModelKind(kind)
    if kind == ModelKind.tiny:
        return f"tiny-b{TINY_BUILD_VERSION}"
    if kind == ModelKind.small:
        return f"small-b{SMALL_BUILD_VERSION}"
    return str(hub_id)


def resolve_model(model_cfg: ModelConfig, cache_dir: Path) -> Path:
    """Return a local folder holding the model, building or downloading it once.

    ``tiny`` and ``small`` are built offline; ``hub`` models are downloaded into
    ``cache_dir/models`` with ``huggingface_hub.snapshot_download`` (idempotent: a complete
    snapshot is reused).

    Raises:
        ConfigError: a hub model without ``hub_id``.
        PrerequisiteError: when a hub model cannot be downloaded (e.g. no network).
    """
    if model_cfg.kind == ModelKind.tiny:
        from autorl.models.tiny import ensure_tiny_model

        return ensure_tiny_model(cache_dir / "models")
    if model_cfg.kind == ModelKind.small:
        from autorl.models.small import ensure_small_model

        return ensure_small_model(cache_dir)
    hub_id = model_cfg.hub_id
    if not hub_id:
        raise ConfigError(
            f"model {model_cfg.name!r} has kind hub but no hub_id: set hub_id in "
            "its conf/model file"
        )
    from huggingface_hub import snapshot_download

    target = cache_dir / "models" / hub_id.replace("/", "--")
    try:
        return Path(snapshot_download(repo_id=hub_id, local_dir=target))
    except Exception as error:  # noqa: BLE001 - hub errors come in many types; all mean "not reachable"
        raise PrerequisiteError(
            f"cannot download {hub_id} from the Hugging Face hub: {error}. "
            "Use model=tiny offline, or pre-fill the cache folder on a machine with network."
        ) from error
