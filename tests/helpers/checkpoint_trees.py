"""Trees a cell's checkpoints are taken of, and the checks the checkpoint tests share
(tests/unit/test_checkpoint.py, tests/unit/test_checkpoint_restore.py)."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autorl.cell_schema import CheckpointConfig
from autorl.seal.cgroups import cgroup_support
from autorl.workspace.checkpoint import CheckpointStore, restore_snapshot

SECRET = b"PRIVATE-SPLIT-7f3a9c answer=42"
SUPPORT = cgroup_support()
real_freezer = pytest.mark.skipif(
    SUPPORT.version is None or "freezer" not in SUPPORT.controllers,
    reason=f"needs root and a cgroup freezer (v1 freezer or v2 cgroup.freeze): "
    f"{SUPPORT.problems(('freezer',))}",
)


def config(**caps: int) -> CheckpointConfig:
    """``cell.checkpoint`` with caps no test tree reaches, but ``caps``."""
    values: dict[str, Any] = {
        "enabled": True,
        "every_s": 600.0,
        "max_bytes": 1 << 40,
        "max_files": 100_000,
        "max_file_bytes": 1 << 40,
    }
    return CheckpointConfig(**(values | caps))


def cell(tmp_path: Path) -> dict[str, Path]:
    """A small workspace and HOME: code, a model folder, a session file."""
    roots = {name: tmp_path / "cell" / name for name in ("code", "output", "home")}
    for path in roots.values():
        path.mkdir(parents=True)
    (roots["code"] / "train.py").write_text("print('train')\n")
    (roots["code"] / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(roots["code"] / "run.sh", 0o755)
    (roots["code"] / "pkg").mkdir()
    (roots["code"] / "pkg" / "__init__.py").write_text("")
    (roots["code"] / "latest").symlink_to("pkg/__init__.py")
    (roots["output"] / "v1").mkdir()
    (roots["output"] / "v1" / "model.safetensors").write_bytes(os.urandom(1 << 20))
    (roots["output"] / "v1" / "config.json").write_text('{"a": 1}')
    (roots["home"] / ".claude" / "projects").mkdir(parents=True)
    (roots["home"] / ".claude" / "projects" / "session.jsonl").write_text('{"turn": 1}\n')
    return roots


def tree(roots: dict[str, Path]) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under ``roots``: kind, permission bits, content (a link: its target)."""
    found: dict[str, tuple[str, int, bytes]] = {}
    for name, root in roots.items():
        for folder, dirs, files in os.walk(root):
            for entry in dirs + files:
                path = Path(folder) / entry
                rel = f"{name}/{path.relative_to(root)}"
                info = path.lstat()
                if stat.S_ISLNK(info.st_mode):
                    found[rel] = ("link", 0, os.fsencode(os.readlink(path)))
                elif stat.S_ISDIR(info.st_mode):
                    found[rel] = ("dir", stat.S_IMODE(info.st_mode), b"")
                else:
                    found[rel] = ("file", stat.S_IMODE(info.st_mode), path.read_bytes())
    return found


def stored(store_root: Path) -> bytes:
    """Everything the store holds (blobs and manifests), for grepping."""
    return b"".join(p.read_bytes() for p in sorted(store_root.rglob("*")) if p.is_file())


def restored(tmp_path: Path, store: CheckpointStore, names: Any, **kw: Any) -> dict[str, Path]:
    """Restore the latest checkpoint into ``tmp_path/restored/<name>`` for each of ``names``."""
    dest = {name: tmp_path / "restored" / name for name in names}
    (tmp_path / "restored").mkdir(exist_ok=True)
    restore_snapshot(store, dest, **kw)
    return dest


def in_thread(function: Callable[[], Any], timeout_s: float = 10) -> Any:
    """Run ``function`` with a time limit: a copier that blocked on a FIFO fails the test."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(function()), daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), f"blocked for over {timeout_s} s"
    assert result, "raised (see the thread's traceback above)"
    return result[0]


def new_store(tmp_path: Path) -> CheckpointStore:
    """An empty store in ``tmp_path/store``."""
    (tmp_path / "store").mkdir()
    return CheckpointStore(tmp_path / "store")
