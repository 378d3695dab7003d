"""The live viewer in headless Chromium: a cell page follows the store without a reload.

The first two tests write the sweep's store themselves (the record store's API, as the Recorder
writes it) while a real uvicorn serves the viewer and Chromium shows the page; the page must show
a new submission and the cell's new status within seconds, with one navigation and no script
error, render an agent's markup as text, and link to a revision's diff. The last one watches a
real sweep: a scripted cell's first submission and a real CLI's tool calls (through the replay
server) appear on their pages while the cells run. Screenshots go to the test's tmp_path.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from autorl.view.pages import cell_href
from tests.helpers.chromium import CHROMIUM, Page, chromium_page
from tests.helpers.cli_agent_cell import require_cli
from tests.helpers.procs import stop_processes_mentioning
from tests.helpers.replay_llm_server import ReplayLLM, ReplayServer
from tests.helpers.view_server import (
    HOSTILE,
    cell,
    new_sweep,
    revision,
    serve,
    submission,
    write_log,
)
from tests.integration.conftest import query, sweep_env

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's /usr/bin/chromium"),
]


def test_cell_page_updates_live_and_links_to_a_revision_diff(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    store = new_sweep(sweep_dir)
    store.add_code_revision(revision("gsm8k-a", "r1", "+print('hello')\n+# " + HOSTILE))
    write_log(sweep_dir, "gsm8k-a", "agent started\n" + HOSTILE + "\n")

    async def drive(url: str) -> None:
        async with chromium_page() as page:
            await page.navigate(url + cell_href("gsm8k-a"))
            await page.wait_for("document.getElementById('live-state').textContent !== "
                                "'connecting'", 10)  # fmt: skip
            assert await page.evaluate("document.querySelector('#cell-status').dataset.status") == (
                "running"
            )
            # Agent markup is text in the DOM: no element was made of it.
            assert await page.evaluate("document.querySelectorAll('#live img').length") == 0
            assert HOSTILE in await page.evaluate("document.getElementById('log').textContent")
            await page.evaluate("window.__marker = 'same document'")
            await page.screenshot(tmp_path / "running.png")

            store.upsert_submission(submission("gsm8k-a", 1, 0.625, flags="first_one"))
            store.set_cell_status("gsm8k-a", "completed", best_score=0.625)
            await page.wait_for(
                "document.querySelector('#cell-status').dataset.status === 'completed' && "
                "document.getElementById('submissions').textContent.includes('first_one')",
                5,
            )
            # Updated in place: the same document (no reload, one navigation).
            assert await page.evaluate("window.__marker") == "same document"
            assert await page.evaluate("window.__loadCount") == 1
            assert page.navigations == 1
            assert await page.evaluate("window.__updates") >= 1
            await page.screenshot(tmp_path / "completed.png")

            link = await page.evaluate("document.querySelector('#revisions a').href")
            assert link.endswith("/cell/gsm8k-a/revision/1")
            await page.evaluate("document.querySelector('#revisions a').click()")
            await page.wait_for("location.pathname.endsWith('/revision/1') && "
                                "document.getElementById('diff') !== null", 10)  # fmt: skip
            diff = await page.evaluate("document.getElementById('diff').textContent")
            assert "print('hello')" in diff and HOSTILE in diff
            assert await page.evaluate("document.querySelectorAll('img').length") == 0
            await page.screenshot(tmp_path / "revision.png")
            assert not page.errors, page.errors

    try:
        with serve(sweep_dir) as url:
            asyncio.run(drive(url))
    finally:
        store.close()
    for name in ("running.png", "completed.png", "revision.png"):
        assert (tmp_path / name).stat().st_size > 1000


def test_sweep_page_follows_cell_states_and_links_each_cell(tmp_path: Path) -> None:
    store = new_sweep(tmp_path)
    store.upsert_cell(cell("evil-cell", task="gsm8k", model=HOSTILE, error=HOSTILE))

    async def drive(url: str) -> None:
        async with chromium_page() as page:
            await page.navigate(url + "/")
            running = "document.getElementById('running').textContent"
            assert (await page.evaluate(running)).split() == ["gsm8k-a"]
            await page.evaluate("window.__marker = 'same document'")
            store.set_cell_status("he-a", "running")
            await page.wait_for(f"{running}.includes('he-a')", 5)
            assert await page.evaluate("window.__marker") == "same document"
            assert page.navigations == 1
            assert await page.evaluate("document.querySelectorAll('img, #live script').length") == 0
            await page.screenshot(tmp_path / "sweep.png")
            await page.evaluate("[...document.querySelectorAll('a')]"
                                ".find(a => a.textContent === 'evil-cell').click()")  # fmt: skip
            await page.wait_for("location.pathname === '/cell/evil-cell'", 10)
            status = await page.evaluate("document.getElementById('cell-status').textContent")
            assert HOSTILE in status
            assert not page.errors, page.errors

    try:
        with serve(tmp_path) as url:
            asyncio.run(drive(url))
    finally:
        store.close()
    assert (tmp_path / "sweep.png").stat().st_size > 1000


# The scripted agent with the integration tests' short training, as an option of a plugin folder:
# a sweep's overrides apply to every agent of it, and the CLI's config has no training settings.
FAST_SCRIPTED = """\
defaults:
  - scripted
  - _self_

name: scripted-fast
description: "the scripted agent with the integration tests' short training"
in_grid: false
sft:
  max_steps: 60
  per_device_train_batch_size: 16
grpo:
  max_steps: 4
"""
STEP_ONE, STEP_TWO = "echo live-step-one", "echo live-step-two"


class GatedReplay(ReplayLLM):
    """The replay model, holding its second tool call until the test releases it: the CLI's next
    step comes while its page is open."""

    def __init__(self) -> None:
        super().__init__([STEP_ONE, STEP_TWO], "Both steps ran.")
        self.release = threading.Event()

    def decide(self, protocol: str, body: dict[str, Any]) -> tuple[str, Any]:
        kind, value = super().decide(protocol, body)
        if kind == "tool" and "live-step-two" in json.dumps(value):
            self.release.wait(120)  # held on the replay server's own loop: only this cell waits
        return kind, value


def _cells(db: Path) -> dict[str, tuple[str, str]]:
    """``agent -> (cell id, status)`` of the sweep's store (empty until the sweep wrote it)."""
    try:
        rows = query(db, "SELECT agent, cell_id, status FROM cells")
    except sqlite3.Error:
        return {}
    return {str(agent): (str(cell_id), str(status)) for agent, cell_id, status in rows}


async def _until(what: str, check: Any, proc: subprocess.Popen[str], timeout: float) -> Any:
    """Poll ``check()`` until it is truthy; fail when the sweep exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert proc.poll() is None, f"the sweep ended (exit {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        await asyncio.sleep(0.2)
    return value


async def _rows(page: Page, table: str) -> int:
    return int(await page.evaluate(f"document.querySelectorAll('#{table} tbody tr').length"))


def test_a_running_sweep_shows_each_cells_steps_and_first_submission_live(
    tmp_path: Path, cache_dir: Path
) -> None:
    require_cli("codex")
    plugin = tmp_path / "plugin"
    (plugin / "conf" / "agent").mkdir(parents=True)
    (plugin / "conf" / "agent" / "scripted-fast.yaml").write_text(FAST_SCRIPTED)
    replay = GatedReplay()
    server = ReplayServer(replay).start()
    ray_tmp = Path(tempfile.mkdtemp(prefix="ar-", dir="/tmp"))
    out_dir = tmp_path / "out"
    command = [
        sys.executable, "-m", "autorl.sweep", f"plugins=[{plugin}]", "agent=scripted-fast,codex",
        "driver=local", f"driver.base_url={server.base_url}", "driver.api_key_env=AUTORL_TEST_KEY",
        "driver.price_per_mtok={input: 1.0, output: 4.0}", "task.build.fixture.train_size=200",
        "task.build.fixture.eval_size=40", "budget.seconds=400", f"out_dir={out_dir}",
        "progress=false", "cluster.include_dashboard=false", "cluster.num_cpus=3",
        "cell.checkpoint.every_s=3",
        f"cluster.temp_dir={ray_tmp}",
    ]  # fmt: skip
    env = sweep_env(cache_dir) | {"AUTORL_TEST_KEY": "sk-autorl-test-driver-key"}
    log = (tmp_path / "sweep.log").open("w")
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    seen: dict[str, float] = {}

    async def drive(url: str, db: Path) -> None:
        async with chromium_page(timeout=120) as page:
            # The scripted cell, opened while it runs and before it submits.
            scripted = _cells(db)["scripted-fast"][0]
            await page.navigate(url + cell_href(scripted))
            await page.wait_for("document.getElementById('live-state').textContent !== "
                                "'connecting'", 10)  # fmt: skip
            assert await _rows(page, "submissions") == 0, "it submitted before its page opened"
            await page.evaluate("window.__marker = 'same document'")
            await page.wait_for("document.querySelectorAll('#submissions tbody tr').length > 0",
                                300)  # fmt: skip
            seen["submission"] = time.time()
            await page.wait_for("!document.getElementById('resources').textContent"
                                ".includes('no resource samples')", 15)  # fmt: skip
            await page.screenshot(tmp_path / "scripted.png")
            assert await page.evaluate("window.__marker") == "same document"

            # The CLI cell: its first step is in the store, its second held by the replay model.
            codex = _cells(db)["codex"][0]
            first_step = "SELECT COUNT(*) FROM trace_events WHERE cell_id = ? AND text LIKE ?"
            await _until("the CLI's first step in the store",
                         lambda: query(db, first_step, codex, "%live-step-one%")[0][0], proc,
                         300)  # fmt: skip
            await page.navigate(url + cell_href(codex))
            steps = "document.getElementById('steps').textContent"
            assert "live-step-one" in await page.evaluate(steps)
            assert "live-step-two" not in await page.evaluate(steps)
            navigations = page.navigations
            await page.evaluate("window.__marker = 'same document'")
            replay.release.set()
            await page.wait_for(f"{steps}.includes('live-step-two')", 30)
            await page.wait_for("document.querySelector('#cell-status').dataset.status === "
                                "'completed'", 180)  # fmt: skip
            await page.screenshot(tmp_path / "codex.png")
            assert await page.evaluate("window.__marker") == "same document"
            assert page.navigations == navigations and not page.errors, page.errors

    async def watch() -> Path:
        """Wait for the sweep's store and its scripted cell to run, then watch both cells."""

        def stored() -> Path | None:
            return next(out_dir.glob("*/records.sqlite"), None) if out_dir.is_dir() else None

        db = await _until("a record store", stored, proc, 300)
        await _until("the scripted cell running",
                     lambda: _cells(db).get("scripted-fast", ("", ""))[1] == "running", proc,
                     300)  # fmt: skip
        with serve(db.parent) as url:
            await drive(url, db)
        return db

    try:
        db = asyncio.run(watch())
        assert proc.wait(timeout=600) == 0, (tmp_path / "sweep.log").read_text()[-3000:]
    finally:
        replay.release.set()
        if proc.poll() is None:
            proc.kill()
        stop_processes_mentioning(str(ray_tmp))
        server.stop()
        log.close()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    # The page showed the first submission within seconds of the Recorder storing it.
    ((submitted_at,),) = query(db, "SELECT MIN(submitted_at) FROM submissions WHERE cell_id LIKE "
                               "'%scripted-fast%'")  # fmt: skip
    assert 0 <= seen["submission"] - float(submitted_at) < 5, (seen, submitted_at)
    assert {status for _, status in _cells(db).values()} == {"completed"}
    # The scripted cell was checkpointed while it ran: frozen for its listing, its model stored.
    ((taken, frozen, most_bytes, errors),) = query(
        db, "SELECT COUNT(*), MIN(frozen), MAX(bytes_total), COUNT(error) FROM checkpoints "
        "WHERE cell_id LIKE '%scripted-fast%'")  # fmt: skip
    assert taken >= 2 and frozen == 1 and most_bytes > 2**20 and errors == 0
    for name in ("scripted.png", "codex.png"):
        assert (tmp_path / name).stat().st_size > 1000
