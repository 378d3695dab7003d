"""Submissions that travel between nodes (autorl/grading/transfer.py), without Ray.

The remote side is :class:`FolderSource`: it runs the very functions the pinned Ray tasks run
(``read_manifest``, ``read_chunk``) on a folder of this machine, and can corrupt or slow down what
it sends. The two-node test with real Ray is tests/integration/test_remote_grading.py.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autorl.grading import transfer
from autorl.grading.transfer import (
    DigestCache,
    Manifest,
    ModelFetcher,
    ModelPublisher,
    ModelRef,
    TransferError,
    manifest_of,
    read_chunk,
    read_manifest,
    verify,
)

CHUNK = 1000


class FolderSource:
    """A ChunkSource over this machine's files: what a node's pinned read tasks return."""

    def __init__(self, corrupt_first: int = 0, delay_s: float = 0.0) -> None:
        self.corrupt_left = corrupt_first  # this many downloads get one flipped byte
        self.delay_s = delay_s
        self.chunk_calls = 0
        self.sizes: list[int] = []

    def manifest(self, ref: ModelRef) -> Manifest:
        return read_manifest(ref.path)

    def chunks(self, ref: ModelRef, requests: list[tuple[str, int, int]]) -> Iterator[bytes]:
        corrupt = self.corrupt_left > 0
        self.corrupt_left -= 1
        for name, offset, size in requests:
            time.sleep(self.delay_s)
            self.chunk_calls += 1
            data = read_chunk(str(Path(ref.path) / name), offset, size)
            self.sizes.append(len(data))
            if corrupt and offset == 0 and data:
                data, corrupt = bytes([data[0] ^ 0xFF]) + data[1:], False
            yield data


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 1000 bytes, so that the few-KB fixture models travel in several."""
    monkeypatch.setattr(transfer, "CHUNK_BYTES", CHUNK)


def make_model(folder: Path, seed: int = 0) -> Path:
    """A model-shaped folder: weights over several chunks, a config, an empty file, a sub-folder
    that stays."""
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(bytes((i * 7 + seed) % 251 for i in range(5500)))
    (folder / "config.json").write_text('{"hidden_size": 8}')
    (folder / "added_tokens.json").write_bytes(b"")
    (folder / "checkpoint-1").mkdir()
    (folder / "checkpoint-1" / "optimizer.pt").write_bytes(b"x" * 100)
    return folder


def fetcher(tmp_path: Path, source: FolderSource) -> ModelFetcher:
    return ModelFetcher(DigestCache(tmp_path / "grader-cache"), "grader-node", source)


def same_files(a: Path, b: Path) -> bool:
    return manifest_of(a) == manifest_of(b)


def test_manifest_names_the_top_level_content(tmp_path: Path) -> None:
    model = make_model(tmp_path / "a")
    manifest = manifest_of(model)
    assert [f.name for f in manifest.files] == [
        "added_tokens.json",
        "config.json",
        "model.safetensors",
    ]
    assert manifest.size == 5500 + 18
    assert manifest_of(make_model(tmp_path / "b")).digest == manifest.digest  # same bytes elsewhere
    assert manifest_of(make_model(tmp_path / "c", seed=1)).digest != manifest.digest
    verify(model, manifest)
    (model / "config.json").write_text('{"hidden_size": 9}')
    with pytest.raises(TransferError, match="config.json"):
        verify(model, manifest)


def test_a_submission_on_another_node_arrives_chunked_verified_and_is_deleted_after_use(
    tmp_path: Path,
) -> None:
    model = make_model(tmp_path / "cell" / "grader_copies" / "1")
    source = FolderSource()
    models = fetcher(tmp_path, source)
    ref = ModelRef(str(model), "cell-node", "weights-1")
    with models.local(ref) as local:
        assert (
            local is not None and local != model and local.is_relative_to(tmp_path / "grader-cache")
        )
        assert same_files(local, model)
        assert not (local / "checkpoint-1").exists()
    assert (
        source.chunk_calls == 6 + 1 and max(source.sizes) == CHUNK
    )  # 5500 bytes in 1000-byte chunks, + config
    assert not local.exists() and models.cache.keys() == []
    assert models.stats.downloads == 1 and models.stats.bytes_downloaded == 5518


def test_same_node_refs_and_plain_paths_are_used_in_place(tmp_path: Path) -> None:
    model = make_model(tmp_path / "model")
    source = FolderSource()
    models = fetcher(tmp_path, source)
    with (
        models.local(ModelRef(str(model), "grader-node", "w")) as local,
        models.local(str(model)) as plain,
    ):
        assert local == model and plain == model
    with models.local(None) as nothing:
        assert nothing is None
    assert source.chunk_calls == 0 and not (tmp_path / "grader-cache").exists()


def test_concurrent_requests_for_one_digest_share_one_download(tmp_path: Path) -> None:
    model = make_model(tmp_path / "model")
    source = FolderSource(delay_s=0.05)
    seen: list[Path] = []
    inside = threading.Barrier(2, timeout=30)

    def score(models: ModelFetcher) -> None:
        with models.local(ModelRef(str(model), "cell-node", "w")) as local:
            assert local is not None and same_files(local, model)
            seen.append(local)
            # both hold the folder at once: neither release deletes it under the other
            inside.wait()

    # Two graders on one node: separate fetchers (as separate processes would be), one cache folder.
    threads = [threading.Thread(target=score, args=(fetcher(tmp_path, source),)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(seen) == 2 and seen[0] == seen[1]
    assert source.chunk_calls == 7  # one download
    assert DigestCache(tmp_path / "grader-cache").keys() == []


def test_base_models_stay_cached_by_digest(tmp_path: Path) -> None:
    base = make_model(tmp_path / "base")
    source = FolderSource()
    models = fetcher(tmp_path, source)
    ref = ModelRef(str(base), "cell-node", "base-w", keep=True)
    for _ in range(2):
        with models.local(ref) as local:
            assert local is not None and same_files(local, base)
    assert models.cache.keys() == [manifest_of(base).digest]
    assert source.chunk_calls == 7 and models.stats.downloads == 1 and models.stats.reused == 1


def test_a_corrupted_transfer_is_retried_once_then_fails_leaving_nothing(tmp_path: Path) -> None:
    model = make_model(tmp_path / "model")
    ref = ModelRef(str(model), "cell-node", "w")
    models = fetcher(tmp_path, FolderSource(corrupt_first=1))
    with models.local(ref) as local:
        assert local is not None and same_files(local, model)
    broken = fetcher(tmp_path, FolderSource(corrupt_first=2))
    with (
        pytest.raises(TransferError, match="config.json' has 18 bytes, sha256 .* corrupted"),
        broken.local(ref),
    ):
        pytest.fail("a corrupted model must not be scored")
    cache = tmp_path / "grader-cache"
    assert DigestCache(cache).keys() == [] and list((cache / ".partial").iterdir()) == []


def test_a_missing_source_folder_is_a_transfer_error(tmp_path: Path) -> None:
    models = fetcher(tmp_path, FolderSource())
    with (
        pytest.raises(TransferError, match="cannot list"),
        models.local(ModelRef(str(tmp_path / "gone"), "cell-node", "w")),
    ):
        pass


def test_a_dead_graders_lease_does_not_keep_a_submission(tmp_path: Path) -> None:
    model = make_model(tmp_path / "model")
    models = fetcher(tmp_path, FolderSource())
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    digest = manifest_of(model).digest
    with models.local(ModelRef(str(model), "cell-node", "w")) as local:
        assert local is not None
        (
            tmp_path
            / "grader-cache"
            / ".meta"
            / f"{digest}.leases"
            / f"{socket.gethostname()}-{dead}-0000"
        ).touch()
    assert models.cache.keys() == []


def test_storage_root_copies_under_submissions_and_graders_read_in_place(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    cell = ModelPublisher("cell-node", str(root))
    base = cell.base(make_model(tmp_path / "base", seed=3), "base-w")
    submission = make_model(tmp_path / "cell" / "grader_copies" / "1")
    source = FolderSource()
    models = fetcher(tmp_path, source)
    with cell.submission(submission, "w") as ref:
        assert (
            ref.node_id is None
            and Path(ref.path) == root / "submissions" / manifest_of(submission).digest
        )
        with models.local(ref) as local, models.local(base) as local_base:
            assert local == Path(ref.path) and local_base == Path(base.path)
            assert same_files(local, submission)
    assert (
        DigestCache(root / "submissions").keys() == []
    )  # the submission's copy went with its scoring
    assert DigestCache(root / "models").keys() == [
        manifest_of(tmp_path / "base").digest
    ]  # the base stays
    assert source.chunk_calls == 0 and models.stats.direct == 2

    with cell.submission(submission, "w") as ref:
        (Path(ref.path) / "config.json").write_text("{}")  # a half-synced or altered shared copy
        with pytest.raises(TransferError, match="config.json"), models.local(ref):
            pass
    hidden = ModelRef(str(tmp_path / "not-mounted"), None, "w", manifest=manifest_of(submission))
    with pytest.raises(TransferError, match="storage.root"), models.local(hidden):
        pass


def test_without_storage_root_refs_name_the_cells_node_and_folder(tmp_path: Path) -> None:
    model = make_model(tmp_path / "model")
    cell = ModelPublisher("cell-node", None)
    assert cell.base(model, "b") == ModelRef(str(model), "cell-node", "b", keep=True)
    with cell.submission(model, "s") as ref:
        assert ref == ModelRef(str(model), "cell-node", "s")
