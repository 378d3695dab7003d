"""A cell's driver budgets: each call reserves its worst case before it is forwarded.

Checking the totals before a call and adding its usage after it lets any number of concurrent
calls through on the last bit of budget. So a call first reserves what it may cost at most (its
estimated input plus its largest possible output), atomically with the check against the budget,
and the reservation is settled to the call's actual usage when it ends. A call whose reservation
does not fit what is left (used + reserved by calls in flight) is refused.

The input estimate is the forwarded body's size in bytes / 4 (about four bytes of JSON per token):
cheap, independent of the model's tokenizer, and above the real count for text, since the JSON
structure around the text counts too. The largest output is the request's own maximum times its
number of choices, or ``driver.budget.default_max_output_tokens`` when it names none.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autorl.gateway.settings import DriverSettings

BYTES_PER_TOKEN = 4


def estimate_tokens(size: int) -> int:
    """Tokens of ``size`` bytes of request or response text, at least 1.

    >>> estimate_tokens(0), estimate_tokens(4), estimate_tokens(5)
    (1, 1, 2)
    """
    return max(1, -(-size // BYTES_PER_TOKEN))


def _positive(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def max_output_tokens(protocol: str, body: Mapping[str, Any], default: int) -> int:
    """The most output tokens a (filtered) request of ``protocol`` may produce, over all choices.

    >>> max_output_tokens("chat", {"max_tokens": 100, "n": 3}, 32_000)
    300
    >>> max_output_tokens("gemini", {"generationConfig": {"candidateCount": 2}}, 1_000)
    2000
    >>> max_output_tokens("messages", {}, 1_000)
    1000
    """
    choices: Any = None
    if protocol == "chat":
        caps = [_positive(body.get(k)) for k in ("max_tokens", "max_completion_tokens")]
        cap = max((c for c in caps if c is not None), default=None)
        choices = body.get("n")
    elif protocol == "responses":
        cap = _positive(body.get("max_output_tokens"))
    elif protocol == "messages":
        cap = _positive(body.get("max_tokens"))
    else:
        config = body.get("generationConfig")
        config = config if isinstance(config, Mapping) else {}
        cap = _positive(config.get("maxOutputTokens"))
        choices = config.get("candidateCount")
    return (cap or default) * (_positive(choices) or 1)


@dataclass(frozen=True)
class Reservation:
    """What one call holds of the budget while it runs.

    Attributes:
        tokens_in: Estimated input tokens (also what an unfinished call is charged as input).
        tokens_out: The most output tokens it may produce.
        cost_usd: The cost of both at the driver's price (0.0 when the price is unknown).
    """

    tokens_in: int
    tokens_out: int
    cost_usd: float

    @property
    def tokens(self) -> int:
        """Input and output tokens together."""
        return self.tokens_in + self.tokens_out


class Ledger:
    """The cell's spend so far and the reservations of calls in flight, under one lock.

    Args:
        settings: The driver (budgets and price).
    """

    def __init__(self, settings: DriverSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._totals: dict[str, Any] = {
            "calls": 0,
            "tokens_in": 0,
            "tokens_out": 0,
            "cost_usd": 0.0,
        }
        self._reserved_tokens = 0
        self._reserved_cost = 0.0

    def totals(self) -> dict[str, Any]:
        """Calls, tokens in/out and cost settled so far (cost 0.0 when the price is unknown)."""
        with self._lock:
            return dict(self._totals)

    def reserved(self) -> tuple[int, float]:
        """Tokens and cost held by calls in flight."""
        with self._lock:
            return self._reserved_tokens, self._reserved_cost

    def reservation(self, tokens_in: int, tokens_out: int) -> Reservation:
        """The reservation of a call with these estimated input and largest output tokens."""
        return Reservation(tokens_in, tokens_out, self.settings.cost(tokens_in, tokens_out) or 0.0)

    def reserve(self, reservation: Reservation) -> str | None:
        """Hold ``reservation`` if it fits in both budgets; otherwise why the call is refused."""
        s = self.settings
        r = reservation
        with self._lock:
            used = self._totals["tokens_in"] + self._totals["tokens_out"]
            held = self._reserved_tokens
            if s.max_tokens is not None and used + held + r.tokens > s.max_tokens:
                return (
                    f"driver token budget: this call may use up to {r.tokens} tokens "
                    f"({r.tokens_in} input, estimated, + {r.tokens_out} output at most); "
                    f"{used} are used and {held} held by calls in flight of "
                    f"driver.budget.max_tokens={s.max_tokens} for this cell: ask for fewer "
                    "output tokens (max_tokens), or no further driver calls fit"
                )
            spent, held_cost = float(self._totals["cost_usd"]), self._reserved_cost
            if s.max_cost_usd is not None and spent + held_cost + r.cost_usd > s.max_cost_usd:
                return (
                    f"driver cost budget: this call may cost up to ${r.cost_usd:.4f}; "
                    f"${spent:.4f} is spent and ${held_cost:.4f} held by calls in flight of "
                    f"driver.budget.max_cost_usd={s.max_cost_usd} for this cell: ask for fewer "
                    "output tokens (max_tokens), or no further driver calls fit"
                )
            self._reserved_tokens += r.tokens
            self._reserved_cost += r.cost_usd
            return None

    def release(self, reservation: Reservation) -> None:
        """Give back ``reservation`` of a call that counts nothing (it reached no provider)."""
        with self._lock:
            self._reserved_tokens -= reservation.tokens
            self._reserved_cost -= reservation.cost_usd

    def settle(
        self, reservation: Reservation | None, tokens_in: int, tokens_out: int, cost_usd: float
    ) -> None:
        """Release ``reservation`` (None: the call held none) and count one call's actual spend."""
        with self._lock:
            if reservation is not None:
                self._reserved_tokens -= reservation.tokens
                self._reserved_cost -= reservation.cost_usd
            self._totals["calls"] += 1
            self._totals["tokens_in"] += tokens_in
            self._totals["tokens_out"] += tokens_out
            self._totals["cost_usd"] += cost_usd
