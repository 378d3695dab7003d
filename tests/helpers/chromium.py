"""Headless Debian Chromium driven through its DevTools protocol: the report's and the viewer's
browser tests.

A session is many turns (load, change the store, read again, follow a link, take a screenshot):
Chromium with ``--remote-debugging-port=0``, its port read from ``DevToolsActivePort``, and the
page's websocket spoken with aiohttp.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
]


class Page:
    """One page target: calls, the page's errors and its navigations so far."""

    def __init__(self, ws: Any, timeout: float) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._loaded = asyncio.Event()
        self.timeout = timeout
        self.errors: list[str] = []
        self.navigations = 0  # main-frame navigations: a reload counts one more

    async def read(self) -> None:
        """Dispatch the websocket's messages (replies and the events followed)."""
        async for message in self._ws:
            data = json.loads(message.data)
            if data.get("id") in self._pending:
                self._pending.pop(data["id"]).set_result(data)
            method, params = data.get("method"), data.get("params", {})
            if method == "Page.loadEventFired":
                self._loaded.set()
            elif method == "Page.frameNavigated" and not params["frame"].get("parentId"):
                self.navigations += 1
            elif method == "Runtime.exceptionThrown":
                self.errors.append(f"exception: {json.dumps(params['exceptionDetails'])[:400]}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                self.errors.append(f"console: {json.dumps(params.get('args'))[:400]}")
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                self.errors.append(f"log: {params['entry'].get('text', '')[:400]}")

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command's result."""
        call_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        await self._ws.send_str(json.dumps({"id": call_id, "method": method, "params": params}))
        reply = await asyncio.wait_for(future, self.timeout)
        assert "error" not in reply, f"{method}: {reply['error']}"
        return reply["result"]  # type: ignore[no-any-return]

    async def navigate(self, url: str) -> None:
        """Open ``url`` and wait for its load event."""
        self._loaded.clear()
        await self.call("Page.navigate", url=url)
        await asyncio.wait_for(self._loaded.wait(), self.timeout)

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        reply = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return reply["result"].get("value")

    async def wait_for(self, expression: str, timeout: float) -> Any:
        """Poll ``expression`` until it is truthy (its value), or fail after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            assert time.monotonic() < deadline, f"never true: {expression}"
            await asyncio.sleep(0.1)

    async def screenshot(self, path: Path) -> Path:
        """Save a PNG of the viewport at ``path``."""
        data = (await self.call("Page.captureScreenshot", format="png"))["data"]
        path.write_bytes(base64.b64decode(data))
        return path


@asynccontextmanager
async def chromium_page(timeout: float = 60) -> AsyncIterator[Page]:
    """A fresh headless Chromium (own profile) and its first page, Page/Runtime/Log enabled."""
    import aiohttp

    assert CHROMIUM.exists(), "Debian's chromium is needed: make test installs it"
    profile = Path(tempfile.mkdtemp(prefix="ar-chromium-"))
    browser = subprocess.Popen(
        [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        port_file = profile / "DevToolsActivePort"  # Chromium writes its chosen port here
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            assert browser.poll() is None, "chromium exited"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port"
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        listing = urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read()
        target = next(t for t in json.loads(listing) if t["type"] == "page")
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws,
        ):
            page = Page(ws, timeout)
            reader = asyncio.create_task(page.read())
            for domain in ("Page", "Runtime", "Log"):
                await page.call(f"{domain}.enable")
            try:
                yield page
            finally:
                reader.cancel()
    finally:
        browser.terminate()
        try:
            browser.wait(15)
        except subprocess.TimeoutExpired:
            browser.kill()
            browser.wait()
        shutil.rmtree(profile, ignore_errors=True)
