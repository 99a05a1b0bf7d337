"""What the proxy refuses before a request is sent: one over ``--max-cost``, or one that would take the day's spend
over ``--budget-usd-per-day``.

A request is judged by its prediction, output budget included (an upper bound where the body sets one). The daily
budget counts what the ledger holds for the UTC day (billed cost where the response reported usage, the prediction
otherwise), plus what calls in flight have reserved: two concurrent requests cannot both slip under the limit. The
ledger is read again every few seconds, so proxies sharing one ledger see each other's spend.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from mmtok.budgets.ledger import Ledger

REFRESH_S = 5.0  # how old the day's spend read from the ledger may be


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str
    code: str  # x-mmtok-error and the OpenAI error code
    retry: bool = False  # whether the SDK may retry it


def usd(amount: Decimal) -> str:
    return f"${amount:,.6f}".rstrip("0").rstrip(".") if amount < 1 else f"${amount:,.2f}"


def cost_refusal(cost: Decimal | None, complete: bool, problem: str, max_cost: Decimal | None) -> Refusal | None:
    """A request over ``max_cost``, or one whose cost cannot be known while a limit needs it."""
    if max_cost is None:
        return None
    if cost is None or not complete:
        why = problem or "its cost cannot be predicted"
        return Refusal(
            400, f"{why}; --max-cost {usd(max_cost)} cannot be checked (--allow-unpriced sends it)", "unpriced"
        )
    if cost > max_cost:
        return Refusal(
            400, f"predicted cost {usd(cost)} is over --max-cost {usd(max_cost)} (output budget included)", "max_cost"
        )
    return None


class DailyBudget:
    """Spend of the current UTC day against ``limit``, with reservations for calls in flight."""

    def __init__(self, limit: Decimal, ledger: Ledger, unwritten: Callable[[str], Decimal]) -> None:
        self.limit = limit
        self.ledger = ledger
        self.unwritten = unwritten  # the spend of a day's calls whose records are not yet in the ledger
        self.day = ""
        self.spent = Decimal(0)
        self.reserved = Decimal(0)
        self._read_at = -float("inf")
        self._lock = asyncio.Lock()

    async def _refresh(self) -> None:
        today = dt.datetime.now(dt.UTC).date().isoformat()
        if today == self.day and time.monotonic() - self._read_at < REFRESH_S:
            return
        async with self._lock:
            if today == self.day and time.monotonic() - self._read_at < REFRESH_S:
                return
            written = await asyncio.to_thread(self.ledger.spend_on, today)
            self.spent = written + self.unwritten(today)
            self.day, self._read_at = today, time.monotonic()

    async def reserve(self, cost: Decimal) -> Refusal | None:
        """Hold ``cost`` for a call about to be sent, or refuse it."""
        await self._refresh()
        if self.spent + self.reserved + cost > self.limit:
            held = f" (+{usd(self.reserved)} held by calls in flight)" if self.reserved else ""
            return Refusal(
                429,
                f"the daily budget {usd(self.limit)} would be exceeded: {usd(self.spent)} spent today (UTC){held}, "
                f"this request is predicted at {usd(cost)}",
                "daily_budget",
            )
        self.reserved += cost
        return None

    def settle(self, reserved: Decimal, spent: Decimal, day: str) -> None:
        """A call that reserved ``reserved`` has ended having cost ``spent`` (its record handed to the writer)."""
        self.reserved = max(Decimal(0), self.reserved - reserved)
        if day == self.day:
            self.spent += spent
