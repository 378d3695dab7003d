"""The grader-side contamination check: calibrated on every task's fixture split, and hostile
workspaces."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from autorl.integrity import contamination as C
from autorl.integrity import eval_index as E
from autorl.schema import ContaminationConfig
from autorl.tasks import TaskData, TaskSpec, build_task_data, discover_tasks

TASKS = discover_tasks()
ROOT = Path(__file__).resolve().parents[2]
# The calibrated values (conf/config.yaml integrity.contamination): every task's clean workspace has
# 0 items hit at any n from 5 to 13, so the flag rests on what real (hub) splits need: 13 words (the
# GPT-3 decontamination length) keeps chance matches of common phrases out, and 3 items at 1 % flag
# a handful of copied items on a 200-item split (1,319-item hub GSM8K: 14 items).
CALIBRATED = {"ngram": 13, "threshold": 0.01, "min_items": 3}
PLANTED = 3


def _cfg(**changes: Any) -> ContaminationConfig:
    base = ContaminationConfig(
        enabled=True,
        ngram=13,
        threshold=0.01,
        min_items=3,
        max_file_bytes=8 << 20,
        max_total_bytes=256 << 20,
        max_files=20000,
    )
    assert {key: getattr(base, key) for key in CALIBRATED} == CALIBRATED
    return replace(base, **changes)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TaskData]:
    """Every task's fixture data with the options a sweep uses (tasks/<id>/options.py)."""
    cache = tmp_path_factory.mktemp("cache")
    return {
        tid: build_task_data(spec, "fixture", cache / "tasks", seed=0)
        for tid, spec in TASKS.items()
    }


def _given(spec: TaskSpec) -> list[Path]:
    """What the benchmark hands every agent besides the public split."""
    return [spec.folder / "description.md", spec.agent_dir]


def _check(
    roots: list[Path], tid: str, data: TaskData, cfg: ContaminationConfig | None = None
) -> C.ContaminationReport:
    return C.check_cell(
        roots, data.private_dir, data.public_dir, cfg or _cfg(), also_public=_given(TASKS[tid])
    )


def _jsonl_rows(folder: Path) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for path in sorted(folder.rglob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def clean_workspace(tid: str, data: TaskData, dest: Path) -> Path:
    """What an honest agent leaves: the public split, the task's description and agent code,
    training logs of the public items, model outputs on training questions, a model folder, a link
    to the
    base."""
    spec = TASKS[tid]
    shutil.copytree(data.public_dir, dest / "data")
    shutil.copyfile(spec.folder / "description.md", dest / "description.md")
    shutil.copytree(
        spec.agent_dir, dest / "code" / "task_agent", ignore=shutil.ignore_patterns("__pycache__")
    )
    rows = _jsonl_rows(data.public_dir)
    texts = [list(E.json_strings(row)) for row in rows]
    with (
        (dest / "code" / "train.log").open("w") as log,
        (dest / "code" / "samples.jsonl").open("w") as samples,
    ):
        for step, (row, text) in enumerate(zip(rows, texts, strict=True)):
            other = texts[
                (step * 7 + 3) % len(texts)
            ]  # a model answering with another training item's text
            log.write(
                f"[scripted] step {step} prompt={text[0] if text else ''!r} "
                f"completion={' '.join(other)!r}\n"
            )
            samples.write(json.dumps({"prompt": row, "completion": other}) + "\n")
    (dest / "output" / "v1").mkdir(parents=True)
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    (dest / "output" / "v1" / "model.safetensors").write_bytes(
        len(header).to_bytes(8, "little") + header + bytes(16)
    )
    (dest / "models").mkdir()
    (dest / "models" / "base").symlink_to(data.public_dir, target_is_directory=True)
    return dest


def _planted(tid: str, data: TaskData, k: int = PLANTED) -> list[str]:
    """``k`` raw eval JSONL lines whose items the index counts (each has a distinctive n-gram)."""
    index = E.eval_index(
        data.private_dir.resolve(),
        (data.public_dir.resolve(), *(p.resolve() for p in _given(TASKS[tid]))),
        CALIBRATED["ngram"],
    )
    lines = []
    for label in index.labels:
        name, _, number = label.rpartition(":")
        if name.endswith(".jsonl"):
            lines.append(
                (data.private_dir / name).read_text(encoding="utf-8").splitlines()[int(number) - 1]
            )
        if len(lines) == k:
            return lines
    raise AssertionError(f"{tid}: fewer than {k} counted JSONL items")


@pytest.mark.parametrize("tid", sorted(TASKS))
def test_clean_workspace_is_not_flagged(
    tid: str, built: dict[str, TaskData], tmp_path: Path
) -> None:
    report = _check([clean_workspace(tid, built[tid], tmp_path / "ws")], tid, built[tid])
    assert report.items_total > 0
    assert (report.items_hit, report.flagged) == (0, False), report.evidence
    assert report.skipped.get("symlink") == 1  # models/base
    assert report.skipped.get("tensor_data") == 1
    assert not report.truncated


@pytest.mark.parametrize("tid", sorted(TASKS))
@pytest.mark.parametrize("form", ["raw_jsonl", "plain_text", "json_string"])
def test_planted_eval_items_are_flagged(
    tid: str, form: str, built: dict[str, TaskData], tmp_path: Path
) -> None:
    data = built[tid]
    ws = clean_workspace(tid, data, tmp_path / "ws")
    lines = _planted(tid, data)
    texts = ["\n".join(E.json_strings(json.loads(line))) for line in lines]
    if form == "raw_jsonl":  # the split's lines copied verbatim (JSON escapes in them)
        (ws / "code" / "extra.jsonl").write_text("\n".join(lines) + "\n")
    elif form == "plain_text":
        (ws / "notes.txt").write_text("\n\n".join(texts))
    else:
        # inside a JSON string: newlines and quotes escaped, non-ASCII as \uXXXX, then escaped again
        inner = json.dumps(
            {"messages": [{"role": "user", "content": t + " \u00e9"} for t in texts]}
        )
        (ws / "code" / "runs" / "trace.json").parent.mkdir(parents=True)
        (ws / "code" / "runs" / "trace.json").write_text(
            json.dumps({"log": inner}, ensure_ascii=True)
        )
    report = _check([ws], tid, data)
    assert report.items_hit == PLANTED, report.evidence
    assert report.flagged
    assert report.overlap == pytest.approx(PLANTED / report.items_total)
    assert len(report.evidence) == PLANTED
    assert all(e["root"] == str(ws) and not e["file"].startswith("/") for e in report.evidence)


def test_conf_holds_the_calibrated_values() -> None:
    conf = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())["integrity"]["contamination"]
    assert {key: conf[key] for key in CALIBRATED} == CALIBRATED
    assert ContaminationConfig(**conf).enabled


def test_search_corpus_is_no_eval_item(built: dict[str, TaskData], tmp_path: Path) -> None:
    """deepsearchqa's training searches return documents of the shared corpus, eval towns'
    included."""
    data = built["deepsearchqa"]
    ws = clean_workspace("deepsearchqa", data, tmp_path / "ws")
    shutil.copyfile(data.private_dir / "corpus.jsonl", ws / "code" / "search_results.jsonl")
    report = _check([ws], "deepsearchqa", data)
    assert (report.items_hit, report.flagged) == (0, False)


# --- hostile workspaces -------------------------------------------------------------------------


@pytest.fixture
def gsm8k(built: dict[str, TaskData]) -> TaskData:
    return built["gsm8k"]


def _stolen(data: TaskData, k: int = PLANTED) -> str:
    return "\n".join(_planted("gsm8k", data, k))


def _in_thread(fn: object, timeout: float = 30.0) -> C.ContaminationReport:
    """Run a scan in a thread: a scan that blocks (on a FIFO) fails the test instead of hanging
    it."""
    out: list[C.ContaminationReport] = []
    worker = threading.Thread(target=lambda: out.append(fn()), daemon=True)  # type: ignore[operator]
    worker.start()
    worker.join(timeout)
    assert not worker.is_alive(), "the scan blocked"
    return out[0]


def test_symlinks_are_never_followed(gsm8k: TaskData, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "private").symlink_to(gsm8k.private_dir, target_is_directory=True)
    (ws / "eval.jsonl").symlink_to(gsm8k.private_dir / "eval.jsonl")
    (ws / "shadow").symlink_to("/etc/shadow")
    (tmp_path / "root-link").symlink_to(gsm8k.private_dir, target_is_directory=True)
    report = _check([ws, tmp_path / "root-link", tmp_path / "ws" / "eval.jsonl"], "gsm8k", gsm8k)
    assert (report.items_hit, report.flagged, report.files_scanned) == (0, False, 0)
    assert report.skipped == {"symlink": 5}


def test_fifo_socket_and_fifo_root_do_not_block(gsm8k: TaskData, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    os.mkfifo(ws / "a-fifo")
    os.mkfifo(tmp_path / "root-fifo")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(ws / "b-socket"))
    (ws / "z-stolen.jsonl").write_text(_stolen(gsm8k))
    try:
        report = _in_thread(lambda: _check([tmp_path / "root-fifo", ws], "gsm8k", gsm8k))
    finally:
        listener.close()
    assert report.skipped.get("special") == 3
    assert report.items_hit == PLANTED  # the regular file after them was still read


def test_huge_file_is_read_up_to_the_cap(gsm8k: TaskData, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with (ws / "huge.txt").open("wb") as huge:
        huge.write(_stolen(gsm8k, 3).encode() + b"\n")
        huge.truncate(8 << 30)  # 8 GiB, sparse: NUL bytes after the text
        huge.seek((8 << 30) - 4096)
        huge.write(_stolen(gsm8k, 6).encode())  # past the cap: never read
    report = _check([ws], "gsm8k", gsm8k, _cfg(max_file_bytes=1 << 20))
    assert report.bytes_scanned == 1 << 20
    assert report.skipped == {"over_cap": 1}
    assert (report.items_hit, report.binary_files) == (
        3,
        1,
    )  # NUL bytes do not hide the text before them


def test_total_bytes_cap_truncates(gsm8k: TaskData, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(5):
        (ws / f"f{i}.txt").write_bytes(b"x " * 50_000)
    report = _check([ws], "gsm8k", gsm8k, _cfg(max_total_bytes=250_000))
    assert report.bytes_scanned <= 250_000
    assert report.truncated


def test_wide_directory_stops_at_max_files(gsm8k: TaskData, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(150):
        (ws / f"f{i:03}.txt").write_text(f"file {i}")
    report = _check([ws], "gsm8k", gsm8k, _cfg(max_files=100))
    assert report.files_scanned <= 100
    assert report.truncated


def test_deep_tree_is_cut_without_recursion_error(gsm8k: TaskData, tmp_path: Path) -> None:
    folder = ws = tmp_path / "ws"
    for _ in range(C.MAX_DEPTH + 20):
        folder = folder / "d"
    folder.mkdir(parents=True)
    (folder / "stolen.jsonl").write_text(_stolen(gsm8k))
    (ws / "shallow.jsonl").write_text(_stolen(gsm8k, 1))
    report = _check([ws], "gsm8k", gsm8k)
    assert report.skipped == {"too_deep": 1}
    assert report.items_hit == 1


def test_file_growing_while_read_is_bounded(
    gsm8k: TaskData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    target = ws / "grows.txt"
    target.write_text(_stolen(gsm8k) + "\n" + "word " * 100_000)
    real_read = C._Scanner._read

    def read_and_grow(self: C._Scanner, fd: int, limit: int) -> bytes:
        with target.open("ab") as grow:  # another process appending while the scanner reads
            grow.write(b"more " * 100_000)
        return real_read(self, fd, limit)

    monkeypatch.setattr(C._Scanner, "_read", read_and_grow)
    report = _check([ws], "gsm8k", gsm8k, _cfg(max_file_bytes=1 << 20))
    assert report.bytes_scanned <= 1 << 20
    assert report.skipped.get("changed") == 1
    assert report.items_hit == PLANTED


def test_duplicates_are_read_once(gsm8k: TaskData, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.jsonl").write_text(_stolen(gsm8k))
    os.link(ws / "a.jsonl", ws / "b.jsonl")
    shutil.copyfile(ws / "a.jsonl", ws / "c.jsonl")
    report = _check([ws], "gsm8k", gsm8k)
    assert report.skipped == {"duplicate": 2}
    assert report.items_hit == PLANTED


def test_safetensors_header_is_read_and_tensor_data_is_not(gsm8k: TaskData, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    header = json.dumps({"__metadata__": {"notes": _stolen(gsm8k, 1)}}).encode()
    tail = (" " * 10_000 + _stolen(gsm8k, 3)).encode()  # tensor bytes: past the first block
    (ws / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + tail)
    report = _check([ws], "gsm8k", gsm8k)
    assert report.items_hit == 1
    assert report.bytes_scanned <= E.SNIFF_BYTES
    assert report.skipped == {"tensor_data": 1}


def test_evidence_names_eval_ngrams_only(gsm8k: TaskData, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "sub" / "s.txt").write_text("SECRET-TOKEN-1234 " + _stolen(gsm8k))
    report = _check([ws], "gsm8k", gsm8k)
    assert {e["file"] for e in report.evidence} == {"sub/s.txt"}
    assert "secret" not in json.dumps(report.as_dict()).lower()
    assert json.loads(json.dumps(report.as_dict()))["items_hit"] == PLANTED


def test_hostile_file_names_are_made_printable(gsm8k: TaskData, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ("d" * 200)).mkdir(parents=True)
    name = b"a\nb\xff" + b"x" * 200  # a newline and a byte that is no UTF-8
    with open(os.path.join(os.fsencode(ws / ("d" * 200)), name), "wb") as stolen:
        stolen.write(_stolen(gsm8k).encode())
    report = _check([ws], "gsm8k", gsm8k)
    assert report.items_hit == PLANTED
    file = report.evidence[0]["file"]
    assert file.startswith("d" * 200 + "/a?b\ufffdxx") and len(file) == 300
    json.dumps(report.as_dict(), ensure_ascii=False).encode("utf-8")  # no lone surrogates


def test_backslash_runs_take_linear_time() -> None:
    started = time.monotonic()
    assert E.tokens(E.normalize("\\" * (1 << 20) + "nfrom x")) == ["from", "x"]
    assert time.monotonic() - started < 5  # the quadratic regex took ~15 minutes for this


def test_index_is_built_once_per_process(gsm8k: TaskData, tmp_path: Path) -> None:
    _check([tmp_path], "gsm8k", gsm8k)
    before = E.eval_index.cache_info()
    _check([tmp_path], "gsm8k", gsm8k)
    after = E.eval_index.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)


@pytest.mark.parametrize(("field", "value"), [("ngram", 0), ("threshold", 1.5), ("max_files", 0)])
def test_bad_config_is_refused(field: str, value: object, gsm8k: TaskData, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"{field} must be"):
        _check([tmp_path], "gsm8k", gsm8k, _cfg(**{field: value}))


def test_missing_private_split_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="build the task data first"):
        C.check_cell([tmp_path], tmp_path / "nope", tmp_path, _cfg())


def _words(n: int) -> Iterator[str]:
    yield from (f"w{i}" for i in range(n))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('"a\\nfrom b"', ["a", "from", "b"]),  # a JSON newline escape does not glue words
        ('"caf\\u00e9 \\\\n x"', ["café", "x"]),  # \uXXXX decoded; doubly escaped newline
        ("it&#39;s &quot;ok&quot; 100%25%41", ["it", "s", "ok", "100", "a"]),
        ("snake_case-Words", ["snake", "case", "words"]),
    ],
)
def test_normalisation(raw: str, expected: list[str]) -> None:
    assert E.tokens(E.normalize(raw)) == expected


def test_slices_keep_ngrams_across_their_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(E, "_CHUNK_CHARS", 64)
    text = " ".join(_words(200))
    windows = list(E.token_windows(text, 12))
    grams = {g for toks in windows for g in E.ngrams(toks, 13)}
    assert len(grams) == 200 - 12
