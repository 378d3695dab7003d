"""Checks a submitted model before it is queued for grading (docs/design.md#the-grading-api, "Input
rules").

Pure functions on the file system: no Ray, no HTTP. The grading API calls them in this order:

1. :func:`resolve_submission_path` turns the agent's ``model_path`` into a directory inside the
   workspace's ``output/`` (400 otherwise).
2. :func:`normalize_tokenizer_config` copies that directory into the grader's private folder and
   fixes known tokenizer quirks there.
3. :func:`check_loadable_model` and :func:`weights_hash` run on the private copy, so the weights
   that are hashed are the weights that get scored even if the agent rewrites ``output/`` meanwhile.

This module owns those checks, in that order. Reading and hashing tensors lives in
:mod:`autorl.grading.weights`; the limits, the file names, :class:`SubmissionRejected` and the
bounded, link-safe reads of the folder's files live in :mod:`autorl.grading.submission_files`
(both re-exported here where callers use them).

Every rejection is a :class:`SubmissionRejected` whose message says what is wrong and how to fix it.
torch, safetensors and transformers are imported inside the functions that need them, so importing
this module stays cheap.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from autorl.engine.decoding import GENERATION_CONFIG, generation_config_eos
from autorl.grading.bounded_copy import copy_at_most
from autorl.grading.submission_files import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    BIN_INDEX,
    MAX_JSON_BYTES,
    SAFE_INDEX,
    VOCAB_FILES,
    SubmissionRejected,
    check_sizes,
    load_json_object,
    present_file,
    refuse_remote_code,
    shown_path,
)
from autorl.grading.weights import (
    SAVE_HINT,
    CorruptWeightsError,
    ModelFiles,
    TensorReaders,
    tensor_locations,
    weights_hash,
)

__all__ = [
    "ADAPTER_CONFIG",
    "MAX_JSON_BYTES",
    "CorruptWeightsError",
    "ModelFiles",
    "SubmissionRejected",
    "TensorReaders",
    "check_loadable_model",
    "normalize_tokenizer_config",
    "resolve_submission_path",
    "tensor_locations",
    "weights_hash",
]


def resolve_submission_path(workspace: Path, model_path: object) -> Path:
    """Resolves a submitted ``model_path`` to a model directory inside ``workspace/output``.

    Relative paths are taken relative to ``workspace``; absolute paths are accepted only if they
    resolve inside ``output/``. Symlinks are followed, so a link inside ``output/`` that points
    elsewhere (e.g. at the base model under ``models/``) is refused like any other escape.

    Args:
        workspace: The cell's workspace root.
        model_path: The ``model_path`` field of the request, as decoded from JSON.

    Returns:
        The resolved (absolute, symlink-free) directory.

    Raises:
        SubmissionRejected: 400 if ``model_path`` is not a non-empty string, contains a NUL byte,
            resolves outside ``output/``, does not exist, or is not a directory.
    """
    example = 'submit the folder you saved the model to, e.g. {"model_path": "output/v1"}'
    if not isinstance(model_path, str):
        raise SubmissionRejected(
            400, f"model_path must be a string, got {type(model_path).__name__}: {example}"
        )
    if not model_path.strip():
        raise SubmissionRejected(400, f"model_path is empty: {example}")
    if "\0" in model_path:
        raise SubmissionRejected(
            400, f"model_path {model_path!r} contains a NUL byte: remove it; {example}"
        )

    output = (workspace / "output").resolve(strict=False)
    requested = workspace / model_path  # an absolute model_path replaces workspace here
    try:
        resolved = requested.resolve(strict=False)
    except (OSError, RuntimeError) as exc:  # RuntimeError: symlink loop (Python 3.11)
        # The reason only: the exception's text holds the host's absolute path.
        reason = exc.strerror if isinstance(exc, OSError) else "a symlink loop"
        raise SubmissionRejected(
            400, f"model_path {model_path!r} cannot be resolved ({reason}): {example}"
        ) from exc

    if not resolved.is_relative_to(output):
        lexical = Path(os.path.normpath(workspace.absolute() / model_path))
        if lexical.is_relative_to(workspace.absolute() / "output"):
            raise SubmissionRejected(
                400,
                f"model_path {model_path!r} is or goes through a symlink that points outside "
                f"output/ (to {shown_path(resolved, workspace)}): copy the model files into a real "
                "folder under output/ "
                "(e.g. output/v1) instead of linking to them, and submit that folder",
            )
        raise SubmissionRejected(
            400,
            f"model_path {model_path!r} resolves outside output/: save the model under output/ "
            "(e.g. output/v1) and submit that path",
        )
    try:
        exists = resolved.exists()
    except (
        OSError
    ) as exc:  # ENAMETOOLONG (a name over 255 bytes) and the like: no such path can exist
        raise SubmissionRejected(
            400,
            f"model_path {model_path!r} cannot exist here ({exc.strerror}): save the model under a "
            "short path such as output/v1 and submit that",
        ) from exc
    if not exists:
        raise SubmissionRejected(
            400,
            f"model_path {model_path!r} does not exist: save the model there first "
            f"({SAVE_HINT}), then submit the same path",
        )
    if not resolved.is_dir():
        raise SubmissionRejected(
            400,
            f"model_path {model_path!r} is a file, not a directory: submit the folder that "
            "holds config.json, the weights and the tokenizer files, e.g. output/v1",
        )
    return resolved


def check_loadable_model(model_dir: Path) -> ModelFiles:
    """Checks that a directory holds everything needed to load the model, without loading it.

    A full model needs ``config.json``, weight files (``*.safetensors``, ``pytorch_model*.bin``, or
    a sharded index with all its shards) and a tokenizer. A LoRA adapter directory
    (``adapter_config.json`` with ``adapter_model.safetensors`` or ``adapter_model.bin``) needs no
    ``config.json``. Weights are not read here: corrupt weights surface later, in
    :func:`weights_hash` or in the grader, and are recorded as an invalid submission.

    Args:
        model_dir: The model directory, normally from :func:`resolve_submission_path`.

    Returns:
        The weight files and whether the directory is an adapter.

    Raises:
        SubmissionRejected: 422 naming the missing or malformed piece; 400 if a needed file is a
            symlink that points outside the directory.
    """
    root = model_dir.resolve()
    check_sizes(root)

    config = present_file(root, "config.json")
    if config is not None:
        refuse_remote_code(load_json_object(config, "config.json"), "config.json")
    adapter_config = present_file(root, ADAPTER_CONFIG)
    full_weights = _full_model_weights(root)

    if config is not None and full_weights:
        if adapter_config is not None:
            # transformers would load the full model and then apply the adapter on top of it, so the
            # weights scored would not be the weights hashed.
            raise SubmissionRejected(
                422,
                f"the folder holds both a full model (config.json and weights) and a LoRA adapter "
                f"({ADAPTER_CONFIG}): save either into an empty folder (to submit a merged model, "
                f"delete {ADAPTER_CONFIG} and the adapter_model files)",
            )
        files, is_adapter = full_weights, False
    elif adapter_config is not None:
        _check_adapter_config(load_json_object(adapter_config, ADAPTER_CONFIG))
        adapter_weights = [p for n in ADAPTER_WEIGHTS if (p := present_file(root, n)) is not None]
        if not adapter_weights:
            raise SubmissionRejected(
                422,
                f"adapter weights missing: the folder has {ADAPTER_CONFIG} but neither "
                f"{' nor '.join(ADAPTER_WEIGHTS)}: save the adapter with "
                "peft_model.save_pretrained(path) (or merge it with merge_and_unload() and save "
                "the full model)",
            )
        # transformers/peft load the safetensors file when both exist, so only that one is scored.
        files, is_adapter = adapter_weights[:1], True
    elif config is None:
        raise SubmissionRejected(
            422,
            "config.json missing from the model folder (and it is not a LoRA adapter folder with "
            f"{ADAPTER_CONFIG}): {SAVE_HINT}",
        )
    else:
        raise SubmissionRejected(
            422,
            "model weights missing: no *.safetensors, pytorch_model*.bin or "
            f"{SAFE_INDEX} in the model folder: {SAVE_HINT}",
        )

    _check_tokenizer(root)
    return ModelFiles(weight_files=tuple(files), is_adapter=is_adapter)


def _check_adapter_config(config: dict[str, Any]) -> None:
    """Refuses an adapter the grader cannot score as ``base + scale * B @ A`` (see
    :mod:`autorl.grading.lora`).

    Raises:
        SubmissionRejected: 422 naming the unsupported settings.
    """
    from autorl.grading.lora import unsupported_adapter_features

    problems = unsupported_adapter_features(config)
    if problems:
        raise SubmissionRejected(
            422,
            f"{ADAPTER_CONFIG} uses what the grader does not support: {', '.join(problems)}: only "
            "plain LoRA adapters are scored; merge the adapter into the model "
            f"(peft_model.merge_and_unload()), then {SAVE_HINT}",
        )


def normalize_tokenizer_config(model_dir: Path, dest: Path) -> Path:
    """Copies a submitted model into the grader's folder and fixes known tokenizer quirks there.

    Only the top-level files are copied: loaders read nothing else, and sub-folders such as
    trainer ``checkpoint-*/`` directories can be many gigabytes. Symlinks are followed only when
    they resolve inside ``model_dir``; others are skipped, so a link cannot pull files from
    elsewhere on the machine into grading.

    The copy's ``generation_config.json`` keeps only its ``eos_token_id``: decoding is the task's.

    The quirk fixed: a list-form ``extra_special_tokens`` in ``tokenizer_config.json`` (written by
    TRL and transformers 5) breaks loading with transformers 4 and vLLM, which expect a mapping.
    The copy drops it and merges its tokens into ``additional_special_tokens``, which every version
    loads. The submitted folder is never modified.

    Args:
        model_dir: The submitted model directory.
        dest: The grader's private copy; created if missing, files in it are overwritten.

    Returns:
        ``dest``.

    Raises:
        ValueError: ``dest`` is ``model_dir`` or inside it.
        SubmissionRejected: 422 if ``tokenizer_config.json`` is not a JSON object.
    """
    root = model_dir.resolve()
    if dest.resolve().is_relative_to(root):
        raise ValueError(f"dest {dest} must be outside the submitted folder {model_dir}")
    dest.mkdir(parents=True, exist_ok=True)

    sizes = check_sizes(root)  # again: the folder may have changed since it was submitted
    for entry in sorted(root.iterdir()):
        source = entry.resolve()
        if not source.is_relative_to(root) or not source.is_file():
            continue
        copy_at_most(source, dest / entry.name, sizes.get(entry.name, 0))

    _keep_only_eos(dest / GENERATION_CONFIG)
    tokenizer_config = dest / "tokenizer_config.json"
    if tokenizer_config.is_file():
        data = load_json_object(tokenizer_config, "tokenizer_config.json")
        if _merge_list_extra_special_tokens(data):
            tokenizer_config.write_text(
                json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
            )
    return dest


def _keep_only_eos(path: Path) -> None:
    """Rewrites the copy's ``generation_config.json`` to its ``eos_token_id`` alone (or ``{}``).

    Decoding is the task's (:mod:`autorl.engine.decoding`): no engine may see the submission's
    beams, sampling, penalties or lengths, and none reads a file of unbounded size.
    """
    if not path.is_file():
        return
    eos = generation_config_eos(path.parent)
    path.write_text(json.dumps({"eos_token_id": eos} if eos else {}) + "\n", encoding="utf-8")


def _merge_list_extra_special_tokens(data: dict[str, Any]) -> bool:
    """Moves a list-form ``extra_special_tokens`` into ``additional_special_tokens``.

    Args:
        data: A parsed ``tokenizer_config.json``, changed in place.

    Returns:
        True if ``data`` was changed.
    """
    extra = data.get("extra_special_tokens")
    if not isinstance(extra, list):
        return False
    del data["extra_special_tokens"]
    additional = data.get("additional_special_tokens")
    merged: list[Any] = list(additional) if isinstance(additional, list) else []
    seen = {_token_content(t) for t in merged}
    for token in extra:
        if _token_content(token) not in seen:
            merged.append(token)
            seen.add(_token_content(token))
    if merged:
        data["additional_special_tokens"] = merged
    return True


def _token_content(token: Any) -> str:
    """Returns the text of a special token saved as a string or as a serialised AddedToken."""
    if isinstance(token, dict):
        return str(token.get("content", ""))
    return str(token)


def _full_model_weights(root: Path) -> list[Path]:
    """Finds the weight files of a full (non-adapter) model, the way vLLM picks them.

    A sharded index wins over loose files; safetensors win over ``.bin``. Adapter weights are
    never counted as full-model weights.

    Returns:
        The weight files, sorted; empty if there are none.

    Raises:
        SubmissionRejected: 422 if an index is malformed or names shards that are missing.
    """
    for index_name, pattern in ((SAFE_INDEX, "*.safetensors"), (BIN_INDEX, "pytorch_model*.bin")):
        index = present_file(root, index_name)
        if index is not None:
            return _shards_from_index(root, index, index_name)
        loose = sorted(
            path
            for path in root.glob(pattern)
            if path.name not in ADAPTER_WEIGHTS and present_file(root, path.name) is not None
        )
        if loose:
            return loose
    return []


def _shards_from_index(root: Path, index: Path, index_name: str) -> list[Path]:
    """Returns the shard files a sharded-checkpoint index points to, all of which must exist.

    Raises:
        SubmissionRejected: 422 if the index has no usable ``weight_map`` or a shard is missing.
    """
    weight_map = load_json_object(index, index_name).get("weight_map")
    if (
        not isinstance(weight_map, dict)
        or not weight_map
        or not all(isinstance(v, str) for v in weight_map.values())
    ):
        raise SubmissionRejected(
            422,
            f'{index_name} has no valid "weight_map" (tensor name -> shard file): {SAVE_HINT} '
            "into an empty folder",
        )
    shard_names = sorted(set(weight_map.values()))
    missing: list[str] = []
    shards: list[Path] = []
    for shard_name in shard_names:
        if Path(shard_name).name != shard_name:
            raise SubmissionRejected(
                422,
                f"{index_name} names shard {shard_name!r}, which is not a file in the model "
                f"folder: {SAVE_HINT} into an empty folder",
            )
        shard = present_file(root, shard_name)
        if shard is None:
            missing.append(shard_name)
        else:
            shards.append(shard)
    if missing:
        shown = ", ".join(missing[:5]) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        )
        raise SubmissionRejected(
            422,
            f"weight shards listed in {index_name} are missing: {shown}: copy every shard, or "
            f"{SAVE_HINT} into an empty folder",
        )
    return shards


def _check_tokenizer(root: Path) -> None:
    """Checks that a tokenizer can be found in the folder.

    Raises:
        SubmissionRejected: 422 naming the missing tokenizer files or the unreadable one.
    """
    hint = "save it with tokenizer.save_pretrained(path) into the same folder as the model"
    tokenizer_config = present_file(root, "tokenizer_config.json")
    if tokenizer_config is not None:
        name = "tokenizer_config.json"
        refuse_remote_code(load_json_object(tokenizer_config, name), name)
    tokenizer_json = present_file(root, "tokenizer.json")
    if tokenizer_json is not None:
        load_json_object(tokenizer_json, "tokenizer.json")
        return
    if tokenizer_config is None:
        raise SubmissionRejected(
            422,
            "tokenizer files missing: neither tokenizer.json nor tokenizer_config.json is in the "
            f"model folder: {hint}",
        )
    if not any(present_file(root, name) is not None for name in VOCAB_FILES):
        raise SubmissionRejected(
            422,
            "tokenizer files missing: tokenizer_config.json is there but no vocabulary file "
            f"(tokenizer.json, {', '.join(VOCAB_FILES)}): {hint}",
        )
