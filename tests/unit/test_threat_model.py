"""docs/threat-model.md stays complete: every channel it can enumerate has a row, every row a test.

The channels are listed from the code, not from the document: the gateway's and the grading API's
routes from their FastAPI apps, and the files of a submission from an ``strace`` of the grader
checking and scoring one (a full model and a LoRA adapter), which also shows the files that
transformers, PEFT and safetensors only probe for (an agent could supply those as well).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

from autorl.config import compose
from autorl.gateway.app import Gateway
from autorl.gateway.settings import DriverSettings
from autorl.grading.api import create_app

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "threat-model.md"
# A row: | `channel id` | reads / runs | may flow back | tests |
_ROW = re.compile(r"^\| `(?P<channel>[^`]+)` \|.*\| (?P<tests>[^|]+) \|\s*$")
_TEST_REF = re.compile(r"`(?P<path>tests/[\w/]+\.py)::(?P<name>\w+)(?:\[[^\]]*\])?`")
# System calls that open or probe a path (strace's %file class, less those that only walk folders).
_PATH_CALL = re.compile(
    r'^\d+\s+(?:\w*open\w*|\w*stat\w*|access|faccessat2?|readlink\w*)\("?(?:AT_FDCWD, )?"'
    r'(?P<path>[^"]+)"'
)


def rows() -> dict[str, list[tuple[str, str]]]:
    """Channel id → the tests its row names (``path``, ``function``)."""
    found: dict[str, list[tuple[str, str]]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if match:
            tests = _TEST_REF.finditer(match["tests"])
            found[match["channel"]] = [(m["path"], m["name"]) for m in tests]
    return found


def _without_row(kind: str, routes: set[str]) -> list[str]:
    table = rows()
    return sorted(route for route in routes if f"{kind} {route}" not in table)


def test_every_row_names_a_test_that_exists() -> None:
    table = rows()
    assert len(table) >= 40, f"docs/threat-model.md has {len(table)} rows: is its table intact?"
    missing: list[str] = []
    for channel, tests in table.items():
        if not tests:
            missing.append(f"{channel}: no test named (`tests/...py::test_name`)")
        for path, name in tests:
            file = ROOT / path
            text = file.read_text() if file.is_file() else ""
            defined = re.search(rf"^(async )?def {name}\(", text, re.M)
            if not defined:
                missing.append(f"{channel}: {path}::{name} does not exist")
    assert not missing, "docs/threat-model.md names missing tests:\n" + "\n".join(missing)


def _routes(app: Any) -> set[str]:
    return {
        f"{method} {route.path}"
        for route in app.routes
        if hasattr(route, "methods")
        for method in route.methods
        if method != "HEAD"
    }


def test_every_gateway_route_has_a_row(tmp_path: Path) -> None:
    driver = compose(["driver=local", "driver.base_url=http://127.0.0.1:9"]).driver
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(tmp_path / "gateway.sock"))
    try:
        gateway = Gateway(
            DriverSettings.from_config(driver),
            token="t",
            api_key=None,
            cell_id="c",
            sink=lambda call: None,
            sock=sock,
        )
        routes = _routes(gateway.app)
    finally:
        sock.close()
    assert {"POST /v1/chat/completions", "POST /v1/messages"} <= routes
    assert not _without_row("gateway", routes), _without_row("gateway", routes)


def test_every_grading_api_route_has_a_row() -> None:
    # Listing routes builds the app only; no handler runs, so no service or run_meta is needed.
    app = create_app(
        cast(Any, None),
        cast(Any, None),
        token="t",
        task_id="gsm8k",
        max_body_bytes=1,
        submit_timeout_s=lambda: 1.0,
    )
    routes = _routes(app)
    assert {"POST /submit", "POST /env/step"} <= routes
    assert not _without_row("grading", routes), _without_row("grading", routes)


def test_every_viewer_route_has_a_row(tmp_path: Path) -> None:
    # The live viewer (autorl/view) is read by a person, but serves what agents wrote.
    from autorl.records.store import RecordStore
    from autorl.view.app import create_app

    RecordStore(tmp_path / "records.sqlite").close()
    app = create_app(tmp_path)
    app.state.store.close()
    routes = _routes(app)
    assert {"GET /", "GET /cell/{cell_id}", "GET /cell/{cell_id}/events"} <= routes
    assert not _without_row("viewer", routes), _without_row("viewer", routes)


def _inside(path: str, folders: list[Path]) -> str | None:
    """``path`` relative to the submission folder it is in (under one of ``folders``), or None."""
    for folder in folders:
        try:
            parts = Path(path).relative_to(folder).parts
        except ValueError:
            continue
        return "/".join(parts[1:]) or None  # parts[0] names the submission (or its copy)
    return None


def test_every_file_the_grader_opens_in_a_submission_has_a_row(
    tmp_path: Path, cache_dir: Path
) -> None:
    trace = tmp_path / "strace.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    script = [sys.executable, str(ROOT / "tests/helpers/grade_under_trace.py")]
    where = [str(tmp_path / "cell"), str(cache_dir)]
    saved = subprocess.run(
        [*script, "prepare", *where], capture_output=True, text=True, timeout=600, env=env
    )
    assert saved.returncode == 0, saved.stderr[-3000:]
    strace = ["strace", "-f", "-qq", "-e", "trace=%file", "-o", str(trace)]
    result = subprocess.run(
        [*strace, *script, "grade", *where],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    folders = [Path(p) for p in json.loads(result.stdout.strip().splitlines()[-1])["traced"]]
    seen = set()
    for line in trace.read_text(errors="replace").splitlines():
        match = _PATH_CALL.match(line)
        if match and (name := _inside(match["path"], folders)) is not None:
            seen.add(name)
    assert {"config.json", "adapter_config.json"} <= seen, f"the trace saw little: {sorted(seen)}"
    patterns = [channel.removeprefix("file ") for channel in rows() if channel.startswith("file ")]
    uncovered = sorted(name for name in seen if not any(fnmatch.fnmatch(name, p) for p in patterns))
    assert not uncovered, f"files the grader opens or probes without a row: {uncovered}"
