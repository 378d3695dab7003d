"""The gateway's budgets against a hostile agent, over real HTTP (docs/threat-model.md).

Calls race for the last of a token or cost budget, name no maximum, or close their stream before
the provider's usage arrives; a body too large is refused while it arrives. The upstream is a
stand-in that holds its answers open (``gate``) so that calls are truly in flight together.
"""

from __future__ import annotations

import select
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from autorl.gateway.app import Gateway
from autorl.records.types import DriverCall
from autorl.schema import PricePerMtok
from tests.helpers.gateway_cell import (
    TOKEN,
    Gate,
    settings_at,
)
from tests.helpers.replay_llm_server import ReplayServer


def _concurrent(gateway: Gateway, gate: Gate, body: dict[str, Any], count: int = 8) -> list[int]:
    """Send ``count`` calls at once; open the gate once the refused ones are answered."""

    def post(_: int) -> int:
        return httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {TOKEN}"},
            timeout=30,
        ).status_code

    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(post, i) for i in range(count)]
        deadline = time.monotonic() + 10
        while (
            sum(f.done() for f in futures) + len(gate.listener.hits) < count
            and time.monotonic() < deadline
        ):
            time.sleep(0.02)
        gate.open()
        return sorted(f.result() for f in futures)


SMALL = {"max_tokens": 1000, "messages": [{"role": "user", "content": "hi"}]}


def test_concurrent_calls_cannot_overrun_the_token_budget(gate: Gate, gateways: Any) -> None:
    # Each call reserves ~23 input tokens (bytes / 4) + 1000 output: four fit in 5000, five do not.
    gateway, calls = gateways(settings_at(f"{gate.listener.url}/v1", budget__max_tokens=5000))
    statuses = _concurrent(gateway, gate, SMALL)
    assert statuses == [200] * 4 + [429] * 4 and len(gate.listener.hits) == 4
    assert all(
        "driver.budget.max_tokens=5000" in (c.error or "") for c in calls if c.status_code == 429
    )
    assert gateway.totals()["tokens_in"] == 40 and gateway.ledger.reserved() == (0, 0.0)


def test_concurrent_calls_cannot_overrun_the_cost_budget(gate: Gate, gateways: Any) -> None:
    # At $1/$2 per Mtok one call may cost up to ~$0.00202: four fit in $0.0085, five do not.
    settings = settings_at(
        f"{gate.listener.url}/v1",
        price_per_mtok=PricePerMtok(input=1.0, output=2.0),
        budget__max_cost_usd=0.0085,
    )
    gateway, calls = gateways(settings)
    statuses = _concurrent(gateway, gate, SMALL)
    assert statuses == [200] * 4 + [429] * 4 and len(gate.listener.hits) == 4
    assert all(
        "driver.budget.max_cost_usd=0.0085" in (c.error or "")
        for c in calls
        if c.status_code == 429
    )
    assert gateway.totals()["cost_usd"] == pytest.approx(4 * 30 / 1e6)


def test_a_call_without_a_maximum_reserves_the_drivers_default(gate: Gate, gateways: Any) -> None:
    settings = settings_at(
        f"{gate.listener.url}/v1", budget__max_tokens=5000, budget__default_max_output_tokens=2000
    )
    gateway, _ = gateways(settings)
    body = {"messages": [{"role": "user", "content": "hi"}]}
    assert _concurrent(gateway, gate, body, count=4) == [200, 200, 429, 429]


def _read_first_chunk_and_close(url: str, body: dict[str, Any], headers: dict[str, str]) -> str:
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", url, json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        for chunk in response.iter_text():
            if "Hello" in chunk or "text_delta" in chunk or "output_text.delta" in chunk:
                return chunk
    raise AssertionError("no content chunk")


def _wait_for(calls: list[DriverCall], count: int) -> None:
    deadline = time.monotonic() + 10
    while len(calls) < count and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.mark.parametrize("route", ["chat", "messages"])
def test_a_stream_closed_early_is_charged(route: str, gate: Gate, gateways: Any) -> None:
    """Native chat and Messages translated through LiteLLM: closed after the first content, the
    call is charged its input estimate and the relayed output, and marked estimated."""
    gate.usage_tokens = 200_000  # what the provider would have reported at the end
    gateway, calls = gateways(
        settings_at(f"{gate.listener.url}/v1", protocols={"chat": f"{gate.listener.url}/v1"})
    )
    body = {
        "model": "m",
        "stream": True,
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi " * 200}],
    }
    suffix = "/v1/chat/completions" if route == "chat" else "/v1/messages"
    for _ in range(3):
        _read_first_chunk_and_close(f"{gateway.url}{suffix}", body, {"x-api-key": TOKEN})
    _wait_for(calls, 3)
    assert len(calls) == 3
    for call in calls:
        assert (
            call.tokens_in is not None and call.tokens_in >= 150
        )  # the ~600-byte prompt's estimate
        assert call.tokens_out is not None and call.tokens_out >= 1
        assert "stream closed by the client before usage; tokens estimated" in (call.error or "")
        assert call.translated == int(route == "messages")
    totals = gateway.totals()
    assert (
        totals["tokens_in"] == sum(c.tokens_in or 0 for c in calls) > 0
        and gateway.ledger.reserved()[0] == 0
    )


def test_a_huge_body_is_refused_while_it_arrives(replay: ReplayServer, gateways: Any) -> None:
    gateway, calls = gateways(settings_at(replay.base_url), max_body_bytes=1 << 20)
    port = int(gateway.url.rsplit(":", 1)[1])
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\n"
        "content-type: application/json\r\n"
    )

    # A declared length over the limit: refused before a byte of the body is sent.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"{head}content-length: {64 << 20}\r\n\r\n".encode())
        assert sock.recv(200).startswith(b"HTTP/1.1 413")

    # Chunked, no length: refused once the limit is passed, long before the 64 MiB are sent.
    sent, answer = 0, b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"{head}transfer-encoding: chunked\r\n\r\n".encode())
        piece = b"x" * (64 << 10)
        pending = b""
        deadline = time.monotonic() + 20
        while not answer and time.monotonic() < deadline:
            readable, writable, _ = select.select([sock], [sock] if sent < 64 << 20 else [], [], 1)
            if readable:
                answer = sock.recv(200)
                break
            if writable:
                pending = pending or b"%x\r\n%s\r\n" % (len(piece), piece)
                try:
                    done = sock.send(pending)
                except OSError:  # the gateway closed the connection: its answer is waiting
                    answer = sock.recv(200)
                    break
                pending, sent = pending[done:], sent + done
    assert answer.startswith(b"HTTP/1.1 413") and sent < 16 << 20, (answer[:40], sent)
    assert calls == []
