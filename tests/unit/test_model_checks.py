"""Submission checks (the grading API's input rules) on a tiny real model built offline."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autorl.grading.model_checks import (
    CorruptWeightsError,
    ModelFiles,
    SubmissionRejected,
    check_loadable_model,
    normalize_tokenizer_config,
    resolve_submission_path,
    weights_hash,
)

EXTRA_TOKENS = ["<a>", "<b>"]
WORDS = [
    "[UNK]",
    "[PAD]",
    "</s>",
    *EXTRA_TOKENS,
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "dog",
    "ran",
]


def _tiny_model():  # -> Qwen3ForCausalLM; typed loosely so collection does not import transformers
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
    )
    return Qwen3ForCausalLM(config)


def _tiny_tokenizer():  # -> PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        eos_token="</s>",
        extra_special_tokens=EXTRA_TOKENS,
    )


@pytest.fixture(scope="session")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One model saved several ways: plain, again, sharded, as .bin, with one weight changed."""
    import torch

    root = tmp_path_factory.mktemp("models")
    model, tokenizer = _tiny_model(), _tiny_tokenizer()
    dirs = {name: root / name for name in ("plain", "again", "sharded", "bin", "changed")}
    model.save_pretrained(dirs["plain"])
    model.save_pretrained(dirs["again"])
    model.save_pretrained(dirs["sharded"], max_shard_size="4KB")
    dirs["bin"].mkdir()
    shutil.copy(dirs["plain"] / "config.json", dirs["bin"])
    torch.save(model.state_dict(), dirs["bin"] / "pytorch_model.bin")
    with torch.no_grad():
        model.model.norm.weight[0] += 1.0
    model.save_pretrained(dirs["changed"])
    for path in dirs.values():
        tokenizer.save_pretrained(path)
    return dirs


@pytest.fixture()
def workspace(tmp_path: Path, saved: dict[str, Path]) -> Path:
    """A workspace with the base model under models/ and a submission at output/v1."""
    ws = tmp_path / "ws"
    shutil.copytree(saved["plain"], ws / "models" / "base")
    shutil.copytree(saved["plain"], ws / "output" / "v1")
    return ws


def _model_copy(tmp_path: Path, source: Path, name: str = "m") -> Path:
    dest = tmp_path / name
    shutil.copytree(source, dest)
    return dest


def _rejected(excinfo: pytest.ExceptionInfo[SubmissionRejected], status: int, *needles: str) -> str:
    err = excinfo.value
    assert err.status_code == status
    assert str(err) == err.message
    for needle in needles:
        assert needle in err.message, err.message
    return err.message


# --- resolve_submission_path -----------------------------------------------------------------


def test_relative_and_absolute_paths_inside_output_resolve(workspace: Path) -> None:
    v1 = (workspace / "output" / "v1").resolve()
    assert resolve_submission_path(workspace, "output/v1") == v1
    assert resolve_submission_path(workspace, "output/v1/") == v1
    assert resolve_submission_path(workspace, "./output/x/../v1") == v1
    assert resolve_submission_path(workspace, str(workspace / "output" / "v1")) == v1
    assert resolve_submission_path(workspace, "output") == (workspace / "output").resolve()


def test_symlink_that_stays_inside_output_is_followed(workspace: Path) -> None:
    (workspace / "output" / "latest").symlink_to(workspace / "output" / "v1")
    assert (
        resolve_submission_path(workspace, "output/latest") == (workspace / "output/v1").resolve()
    )


def test_traversal_out_of_output_is_400(workspace: Path) -> None:
    with pytest.raises(SubmissionRejected) as excinfo:
        resolve_submission_path(workspace, "output/../models/base")
    _rejected(excinfo, 400, "'output/../models/base'", "outside output/", "output/v1")


@pytest.mark.parametrize("where", ["workspace_models", "etc", "elsewhere"])
def test_absolute_path_elsewhere_is_400(workspace: Path, tmp_path: Path, where: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = {
        "workspace_models": str(workspace / "models" / "base"),
        "etc": "/etc",
        "elsewhere": str(elsewhere),
    }[where]
    with pytest.raises(SubmissionRejected) as excinfo:
        resolve_submission_path(workspace, path)
    _rejected(excinfo, 400, "outside output/", "save the model under output/")


def test_nul_byte_is_400(workspace: Path) -> None:
    with pytest.raises(SubmissionRejected) as excinfo:
        resolve_submission_path(workspace, "output/v1\0")
    _rejected(excinfo, 400, "NUL byte", "output/v1")


def test_symlink_escape_to_base_model_is_400(workspace: Path) -> None:
    (workspace / "output" / "v2").symlink_to(workspace / "models" / "base")
    with pytest.raises(SubmissionRejected) as excinfo:
        resolve_submission_path(workspace, "output/v2")
    _rejected(excinfo, 400, "symlink", "outside output/", "copy the model files")


def test_symlink_escape_through_parent_directory_is_400(workspace: Path) -> None:
    (workspace / "output" / "models").symlink_to(workspace / "models")
    with pytest.raises(SubmissionRejected) as excinfo:
        resolve_submission_path(workspace, "output/models/base")
    _rejected(excinfo, 400, "symlink")


def test_symlink_loop_is_400(workspace: Path) -> None:
    (workspace / "output" / "loop").symlink_to(workspace / "output" / "loop")
    with pytest.raises(SubmissionRejected) as excinfo:
        resolve_submission_path(workspace, "output/loop")
    assert excinfo.value.status_code == 400


def test_missing_directory_is_400(workspace: Path) -> None:
    with pytest.raises(SubmissionRejected) as excinfo:
        resolve_submission_path(workspace, "output/v9")
    _rejected(excinfo, 400, "'output/v9'", "does not exist", "save_pretrained")


def test_file_instead_of_directory_is_400(workspace: Path) -> None:
    with pytest.raises(SubmissionRejected) as excinfo:
        resolve_submission_path(workspace, "output/v1/config.json")
    _rejected(excinfo, 400, "is a file, not a directory", "output/v1")


@pytest.mark.parametrize("value", [None, 3, 1.5, True, ["output/v1"], {"path": "output/v1"}])
def test_non_string_is_400(workspace: Path, value: object) -> None:
    with pytest.raises(SubmissionRejected) as excinfo:
        resolve_submission_path(workspace, value)
    _rejected(excinfo, 400, "must be a string", type(value).__name__, "output/v1")


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_is_400(workspace: Path, value: str) -> None:
    with pytest.raises(SubmissionRejected) as excinfo:
        resolve_submission_path(workspace, value)
    _rejected(excinfo, 400, "empty", "output/v1")


# --- check_loadable_model --------------------------------------------------------------------


def test_full_model_is_loadable(saved: dict[str, Path]) -> None:
    files = check_loadable_model(saved["plain"])
    assert files == ModelFiles(
        weight_files=(saved["plain"] / "model.safetensors",), is_adapter=False
    )


def test_sharded_model_lists_every_shard(saved: dict[str, Path]) -> None:
    files = check_loadable_model(saved["sharded"])
    index = json.loads((saved["sharded"] / "model.safetensors.index.json").read_text())
    assert len(files.weight_files) > 1
    assert {p.name for p in files.weight_files} == set(index["weight_map"].values())
    assert not files.is_adapter


def test_bin_model_is_loadable(saved: dict[str, Path]) -> None:
    files = check_loadable_model(saved["bin"])
    assert [p.name for p in files.weight_files] == ["pytorch_model.bin"]


def test_missing_config_is_422(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _model_copy(tmp_path, saved["plain"])
    (model / "config.json").unlink()
    with pytest.raises(SubmissionRejected) as excinfo:
        check_loadable_model(model)
    _rejected(excinfo, 422, "config.json missing", "save_pretrained")


def test_invalid_config_json_is_422(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _model_copy(tmp_path, saved["plain"])
    (model / "config.json").write_text("{not json")
    with pytest.raises(SubmissionRejected) as excinfo:
        check_loadable_model(model)
    _rejected(excinfo, 422, "config.json is not valid JSON")


def test_missing_weights_is_422(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _model_copy(tmp_path, saved["plain"])
    (model / "model.safetensors").unlink()
    with pytest.raises(SubmissionRejected) as excinfo:
        check_loadable_model(model)
    _rejected(excinfo, 422, "weights missing", "*.safetensors", "save_pretrained")


def test_missing_shard_is_422_and_named(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _model_copy(tmp_path, saved["sharded"])
    shard = sorted(model.glob("model-*.safetensors"))[1]
    shard.unlink()
    with pytest.raises(SubmissionRejected) as excinfo:
        check_loadable_model(model)
    _rejected(excinfo, 422, shard.name, "missing", "model.safetensors.index.json")


def test_index_without_weight_map_is_422(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _model_copy(tmp_path, saved["sharded"])
    (model / "model.safetensors.index.json").write_text('{"metadata": {}}')
    with pytest.raises(SubmissionRejected) as excinfo:
        check_loadable_model(model)
    _rejected(excinfo, 422, "weight_map")


def test_missing_tokenizer_is_422(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _model_copy(tmp_path, saved["plain"])
    (model / "tokenizer.json").unlink()
    (model / "tokenizer_config.json").unlink()
    with pytest.raises(SubmissionRejected) as excinfo:
        check_loadable_model(model)
    _rejected(excinfo, 422, "tokenizer files missing", "tokenizer.save_pretrained(path)")


def test_tokenizer_config_without_vocabulary_is_422(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _model_copy(tmp_path, saved["plain"])
    (model / "tokenizer.json").unlink()
    with pytest.raises(SubmissionRejected) as excinfo:
        check_loadable_model(model)
    _rejected(
        excinfo, 422, "tokenizer files missing", "vocabulary file", "tokenizer.save_pretrained"
    )


def test_tokenizer_config_with_vocabulary_files_is_enough(
    tmp_path: Path, saved: dict[str, Path]
) -> None:
    model = _model_copy(tmp_path, saved["plain"])
    (model / "tokenizer.json").unlink()
    (model / "vocab.json").write_text("{}")
    (model / "merges.txt").write_text("")
    assert not check_loadable_model(model).is_adapter


def test_invalid_tokenizer_config_is_422(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _model_copy(tmp_path, saved["plain"])
    (model / "tokenizer_config.json").write_text("[1, 2")
    with pytest.raises(SubmissionRejected) as excinfo:
        check_loadable_model(model)
    _rejected(excinfo, 422, "tokenizer_config.json is not valid JSON")


def test_weight_symlink_outside_model_folder_is_400(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _model_copy(tmp_path, saved["plain"])
    (model / "model.safetensors").unlink()
    (model / "model.safetensors").symlink_to(saved["plain"] / "model.safetensors")
    with pytest.raises(SubmissionRejected) as excinfo:
        check_loadable_model(model)
    _rejected(excinfo, 400, "model.safetensors", "symlink", "copy the file")


@pytest.fixture(scope="session")
def adapter_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA adapter saved by peft, with the tokenizer, and no config.json."""
    from peft import LoraConfig, get_peft_model

    path = tmp_path_factory.mktemp("adapter")
    peft_model = get_peft_model(_tiny_model(), LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    peft_model.save_pretrained(path)
    _tiny_tokenizer().save_pretrained(path)
    return path


def test_adapter_dir_is_accepted(adapter_dir: Path) -> None:
    assert not (adapter_dir / "config.json").exists()
    files = check_loadable_model(adapter_dir)
    assert files.is_adapter
    assert [p.name for p in files.weight_files] == ["adapter_model.safetensors"]
    assert len(weights_hash(files)) == 64


def test_adapter_dir_without_adapter_weights_is_422(tmp_path: Path, adapter_dir: Path) -> None:
    model = _model_copy(tmp_path, adapter_dir)
    (model / "adapter_model.safetensors").unlink()
    with pytest.raises(SubmissionRejected) as excinfo:
        check_loadable_model(model)
    _rejected(excinfo, 422, "adapter weights missing", "adapter_model.safetensors")


def test_adapter_dir_without_tokenizer_is_422(tmp_path: Path, adapter_dir: Path) -> None:
    model = _model_copy(tmp_path, adapter_dir)
    (model / "tokenizer.json").unlink()
    (model / "tokenizer_config.json").unlink()
    with pytest.raises(SubmissionRejected) as excinfo:
        check_loadable_model(model)
    _rejected(excinfo, 422, "tokenizer files missing")


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"peft_type": "IA3"}, "peft_type 'IA3'"),
        ({"use_dora": True}, "use_dora=True"),
        ({"layer_replication": [[0, 1], [0, 1]]}, "layer_replication"),
        ({"lora_bias": True}, "lora_bias=True"),
    ],
)
def test_adapter_the_grader_cannot_merge_faithfully_is_422(
    tmp_path: Path, adapter_dir: Path, fields: dict[str, object], needle: str
) -> None:
    model = _model_copy(tmp_path, adapter_dir)
    config = json.loads((model / "adapter_config.json").read_text())
    (model / "adapter_config.json").write_text(json.dumps({**config, **fields}))
    with pytest.raises(SubmissionRejected) as excinfo:
        check_loadable_model(model)
    _rejected(excinfo, 422, needle, "merge_and_unload")


def test_adapter_naming_another_base_is_accepted(tmp_path: Path, adapter_dir: Path) -> None:
    model = _model_copy(tmp_path, adapter_dir)
    config = json.loads((model / "adapter_config.json").read_text())
    (model / "adapter_config.json").write_text(
        json.dumps({**config, "base_model_name_or_path": "/elsewhere"})
    )
    assert check_loadable_model(
        model
    ).is_adapter  # the grader ignores the name (tests/unit/test_identity.py)


def test_full_model_and_adapter_in_one_folder_is_422(
    tmp_path: Path, saved: dict[str, Path], adapter_dir: Path
) -> None:
    # transformers would apply the adapter on top of the full model: the scored weights would not be
    # the hashed ones.
    model = _model_copy(tmp_path, saved["plain"])
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copy(adapter_dir / name, model / name)
    with pytest.raises(SubmissionRejected) as excinfo:
        check_loadable_model(model)
    _rejected(excinfo, 422, "both a full model", "adapter_config.json", "empty folder")


# --- weights_hash ----------------------------------------------------------------------------


def _hash(path: Path) -> str:
    return weights_hash(check_loadable_model(path))


def test_hash_is_stable_across_saves_sharding_and_format(saved: dict[str, Path]) -> None:
    plain = _hash(saved["plain"])
    assert len(plain) == 64
    assert _hash(saved["again"]) == plain
    assert _hash(saved["sharded"]) == plain
    assert _hash(saved["bin"]) == plain


def test_hash_ignores_file_names_and_header_metadata(
    tmp_path: Path, saved: dict[str, Path]
) -> None:
    from safetensors.torch import load_file, save_file

    model = _model_copy(tmp_path, saved["plain"])
    tensors = load_file(model / "model.safetensors")
    (model / "model.safetensors").unlink()
    save_file(tensors, model / "weights.safetensors", metadata={"format": "pt", "note": "other"})
    assert _hash(model) == _hash(saved["plain"])


def test_hash_changes_when_one_weight_changes(saved: dict[str, Path]) -> None:
    assert _hash(saved["changed"]) != _hash(saved["plain"])


def test_truncated_safetensors_is_corrupt(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _model_copy(tmp_path, saved["plain"])
    weights = model / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    files = check_loadable_model(model)  # weights are not read here
    with pytest.raises(CorruptWeightsError, match="model.safetensors") as excinfo:
        weights_hash(files)
    assert "cannot be read" in str(excinfo.value)


def test_garbage_safetensors_header_is_corrupt(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _model_copy(tmp_path, saved["plain"])
    (model / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header!!}")
    with pytest.raises(CorruptWeightsError, match="model.safetensors"):
        _hash(model)


def test_corrupt_bin_is_corrupt(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _model_copy(tmp_path, saved["bin"])
    (model / "pytorch_model.bin").write_bytes(b"this is not a torch file")
    with pytest.raises(CorruptWeightsError, match="pytorch_model.bin"):
        _hash(model)


def test_tensor_in_two_files_is_corrupt(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _model_copy(tmp_path, saved["plain"])
    shutil.copy(model / "model.safetensors", model / "model-copy.safetensors")
    with pytest.raises(CorruptWeightsError, match="stored in both"):
        _hash(model)


# --- normalize_tokenizer_config --------------------------------------------------------------


def test_list_extra_special_tokens_is_normalised_in_the_copy(
    tmp_path: Path, saved: dict[str, Path]
) -> None:
    from transformers import AutoTokenizer

    submitted = _model_copy(tmp_path, saved["plain"], "submitted")
    original_config = (submitted / "tokenizer_config.json").read_bytes()
    assert json.loads(original_config)["extra_special_tokens"] == EXTRA_TOKENS  # the quirk

    dest = normalize_tokenizer_config(submitted, tmp_path / "private" / "copy")

    assert dest == tmp_path / "private" / "copy"
    assert (submitted / "tokenizer_config.json").read_bytes() == original_config
    assert sorted(p.name for p in dest.iterdir()) == sorted(p.name for p in submitted.iterdir())
    fixed = json.loads((dest / "tokenizer_config.json").read_text())
    assert "extra_special_tokens" not in fixed
    assert fixed["additional_special_tokens"] == EXTRA_TOKENS
    assert (dest / "model.safetensors").read_bytes() == (
        submitted / "model.safetensors"
    ).read_bytes()

    original = AutoTokenizer.from_pretrained(submitted)
    copy = AutoTokenizer.from_pretrained(dest)
    text = "the <a> cat <b> sat"
    assert copy(text)["input_ids"] == original(text)["input_ids"]
    assert copy.convert_tokens_to_ids(EXTRA_TOKENS) == [WORDS.index(t) for t in EXTRA_TOKENS]
    assert _hash(dest) == _hash(submitted)


def test_merge_keeps_existing_additional_tokens_without_duplicates(
    tmp_path: Path, saved: dict[str, Path]
) -> None:
    submitted = _model_copy(tmp_path, saved["plain"], "submitted")
    config_path = submitted / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["additional_special_tokens"] = [{"content": "<b>", "special": True}, "</s>"]
    config_path.write_text(json.dumps(config))

    dest = normalize_tokenizer_config(submitted, tmp_path / "copy")

    fixed = json.loads((dest / "tokenizer_config.json").read_text())
    assert fixed["additional_special_tokens"] == [
        {"content": "<b>", "special": True},
        "</s>",
        "<a>",
    ]
    assert "extra_special_tokens" not in fixed


def test_dict_extra_special_tokens_is_left_alone(tmp_path: Path, saved: dict[str, Path]) -> None:
    submitted = _model_copy(tmp_path, saved["plain"], "submitted")
    config_path = submitted / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["extra_special_tokens"] = {"image_token": "<a>"}
    config_path.write_text(json.dumps(config))

    dest = normalize_tokenizer_config(submitted, tmp_path / "copy")

    assert (dest / "tokenizer_config.json").read_bytes() == config_path.read_bytes()


def test_copy_follows_inside_symlinks_and_skips_escapes_and_subfolders(
    tmp_path: Path, saved: dict[str, Path]
) -> None:
    submitted = _model_copy(tmp_path, saved["plain"], "submitted")
    secret = tmp_path / "secret.txt"
    secret.write_text("private eval answers")
    (submitted / "leak.txt").symlink_to(secret)
    (submitted / "config-link.json").symlink_to(submitted / "config.json")
    (submitted / "checkpoint-10").mkdir()
    (submitted / "checkpoint-10" / "optimizer.pt").write_bytes(b"x" * 100)

    dest = normalize_tokenizer_config(submitted, tmp_path / "copy")

    assert not (dest / "leak.txt").exists()
    assert not (dest / "checkpoint-10").exists()
    link_copy = dest / "config-link.json"
    assert link_copy.is_file() and not link_copy.is_symlink()
    assert link_copy.read_bytes() == (submitted / "config.json").read_bytes()
    assert (submitted / "leak.txt").is_symlink()  # the submitted folder is untouched


def test_dest_inside_submitted_folder_is_refused(tmp_path: Path, saved: dict[str, Path]) -> None:
    submitted = _model_copy(tmp_path, saved["plain"], "submitted")
    with pytest.raises(ValueError, match="outside the submitted folder"):
        normalize_tokenizer_config(submitted, submitted / "copy")
    assert not (submitted / "copy").exists()


# --- module hygiene --------------------------------------------------------------------------


def test_import_is_cheap() -> None:
    code = (
        "import sys, autorl.grading.model_checks, autorl.grading.identity, autorl.grading.lora, "
        "autorl.grading.service\n"
        "heavy = [m for m in ('torch', 'transformers', 'safetensors', 'ray') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


def test_a_huge_sparse_json_file_is_refused_without_being_read(tmp_path: Path) -> None:
    """An agent-written sparse config.json of many GB must not be read into the grader's memory."""
    from autorl.grading.submission_files import MAX_JSON_BYTES, load_json_object

    huge = tmp_path / "config.json"
    with huge.open("wb") as handle:
        handle.truncate(MAX_JSON_BYTES + 1)  # sparse: no disk used
    with pytest.raises(SubmissionRejected, match="over the 256 MiB") as caught:
        load_json_object(huge, "config.json")
    assert caught.value.status_code == 422
