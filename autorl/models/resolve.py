"""Resolve a ``conf/model/*.yaml`` entry to a local model folder (SPEC §4 step 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autorl.errors import ConfigError, PrerequisiteError


def resolve_model(model_cfg: dict[str, Any], cache_dir: Path) -> Path:
    """Return a local folder holding the model, building or downloading it once.

    ``tiny`` is built offline; ``hub`` models are downloaded into ``cache_dir/models`` with
    ``huggingface_hub.snapshot_download`` (idempotent: a complete snapshot is reused).

    Raises:
        ConfigError: on an unknown model kind.
        PrerequisiteError: when a hub model cannot be downloaded (e.g. no network).
    """
    kind = model_cfg["kind"]
    if kind == "tiny":
        from autorl.models.tiny import ensure_tiny_model

        return ensure_tiny_model(cache_dir / "models")
    if kind == "hub":
        from huggingface_hub import snapshot_download

        target = cache_dir / "models" / str(model_cfg["hub_id"]).replace("/", "--")
        try:
            return Path(snapshot_download(repo_id=model_cfg["hub_id"], local_dir=target))
        except Exception as error:  # noqa: BLE001 - hub errors come in many types; all mean "not reachable"
            raise PrerequisiteError(
                f"cannot download {model_cfg['hub_id']} from the Hugging Face hub: {error}. "
                "Use model=tiny offline, or pre-fill the cache folder on a machine with network."
            ) from error
    raise ConfigError(f"model {model_cfg.get('name')!r}: unknown kind {kind!r} (expected 'tiny' or 'hub')")
