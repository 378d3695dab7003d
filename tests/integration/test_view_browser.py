"""The live viewer in headless Chromium: a cell page follows the store without a reload.

The test writes the sweep's store itself (the record store's API, as the Recorder writes it) while
a real uvicorn serves the viewer and Chromium shows the page; the page must show a new submission
and the cell's new status within seconds, with one navigation and no script error, render an
agent's markup as text, and link to a revision's diff. Screenshots go to the test's tmp_path.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from autorl.view.pages import cell_href
from tests.helpers.chromium import CHROMIUM, chromium_page
from tests.helpers.view_server import (
    HOSTILE,
    cell,
    new_sweep,
    revision,
    serve,
    submission,
    write_log,
)

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
