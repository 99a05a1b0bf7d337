"""What the proxy refuses before a request is sent: one over ``--max-cost``, or one that would take a day's budget
over its limit (global, per key, per tag).

A request is judged by its prediction, an upper bound (output at the body's limit or the model's maximum, times
``n``). Before a call is sent, that bound is reserved in the ledger, in the same transaction that checks what the
day has spent and what calls in flight hold in each budget the call counts in (:meth:`Store.reserve`
in :mod:`mmtok.budgets.ledger.sql`); the record written when the call ends replaces the hold by the bill, in one
transaction. So with 200 calls at once, across any number of proxies on one ledger, a day's spend passes a budget
by at most what bills exceed their bounds, and with honest bounds not at all. A call whose bill never comes (a
stream cut short) keeps its reservation as its spend; the holds of a proxy that stopped (SIGKILL) expire after
``reservation_ttl_s`` and count at their bound.

Budgets (UTC days; :class:`BudgetRules`): ``all`` (``--budget-usd-per-day``), each key (``--budget-usd-per-day-per-
key``: each key fingerprint its own day), and tags (``--budget tag:team=search=5``: calls tagged team=search;
``--budget tag:team=1``: each team its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from mmtok.budgets.ledger import Record
from mmtok.errors import ConfigError

log = logging.getLogger("mmtok.proxy")
TAG_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


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


@dataclass(frozen=True)
class BudgetRules:
    """The daily budgets in force, in USD: ``all`` calls, each key, a tag's value, each value of a tag."""

    all: Decimal | None = None
    per_key: Decimal | None = None
    tags: dict[str, Decimal] = field(default_factory=dict)  # "team=search" (that value) or "team" (each value)

    def __bool__(self) -> bool:
        return self.all is not None or self.per_key is not None or bool(self.tags)

    def limits(self, record: Record) -> dict[str, Decimal]:
        """The limit of each scope ``record`` counts in that has one (a tag's own value before its each-value
        rule)."""
        found: dict[str, Decimal] = {}
        for scope in record.scopes:
            if scope == "all" and self.all is not None:
                found[scope] = self.all
            elif scope.startswith("key:") and self.per_key is not None:
                found[scope] = self.per_key
            elif scope.startswith("tag:"):
                pair = scope[4:]
                limit = self.tags.get(pair, self.tags.get(pair.split("=", 1)[0]))
                if limit is not None:
                    found[scope] = limit
        return found

    def describe(self) -> dict[str, str]:
        out = {"all": self.all, "per key": self.per_key} | {f"tag:{k}": v for k, v in self.tags.items()}
        return {k: str(v) for k, v in out.items() if v is not None}


def parse_budget(text: str) -> tuple[str, Decimal]:
    """``--budget SCOPE=USD``: ``all=50``, ``key=5`` (each key), ``tag:team=2`` (each team),
    ``tag:team=search=5`` (the search team); the amount is after the last ``=``."""
    scope, sep, amount_text = text.strip().rpartition("=")
    try:
        amount = Decimal(amount_text.strip().lstrip("$"))
    except InvalidOperation:
        amount = Decimal("NaN")
    if not sep or not amount.is_finite() or amount <= 0:
        raise ConfigError(f"--budget {text!r}: expected SCOPE=USD, e.g. tag:team=search=5.00 or key=2")
    if scope in ("all", "key"):
        return scope, amount
    name, equals, value = scope.removeprefix("tag:").partition("=")
    if not scope.startswith("tag:") or not TAG_NAME.match(name) or (equals and not value):
        raise ConfigError(f"--budget {text!r}: the scope is all, key, tag:NAME or tag:NAME=VALUE")
    return f"tag:{name}={value}" if value else f"tag:{name}", amount


def budget_rules(all_usd: Decimal | None, per_key_usd: Decimal | None, budgets: tuple[str, ...]) -> BudgetRules:
    """The rules the proxy's flags give; a scope named twice is a usage error."""
    found: dict[str, Decimal] = {}
    for text in budgets:
        scope, amount = parse_budget(text)
        if scope in found or (scope == "all" and all_usd) or (scope == "key" and per_key_usd):
            raise ConfigError(f"--budget {text!r}: a budget for {scope} is already set")
        found[scope] = amount
    tags = {k[4:]: v for k, v in found.items() if k.startswith("tag:")}
    return BudgetRules(all_usd or found.get("all"), per_key_usd or found.get("key"), tags)


class Budgets:
    """The daily budgets of one proxy instance over its ledger: reservations before calls, a heartbeat that keeps
    this instance's holds alive and expires those of instances that stopped."""

    def __init__(self, rules: BudgetRules, ledger: object, instance: str, ttl_s: float) -> None:
        self.rules = rules
        self.ledger = ledger
        self.instance = instance
        self.ttl_s = ttl_s
        # One thread of its own for the ledger's budget calls: they run one at a time anyway (the ledger's lock), and
        # the default pool's threads, woken for each call, fought over the interpreter lock (~0.7 ms CPU a call).
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mmtok-budgets")

    async def _in_thread(self, call: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, call, *args)

    async def reserve(self, record: Record, cost: Decimal) -> Refusal | None:
        """Hold ``cost`` for ``record``'s call in every budget it counts in, or the refusal of the first it would
        pass."""
        from mmtok.budgets.ledger.sql import Refused

        limits = self.rules.limits(record)
        if not limits:
            return None
        try:
            await self._in_thread(self.ledger.reserve, record, cost, limits, self.ttl_s)  # type: ignore[attr-defined]
        except Refused as r:
            return Refusal(
                429,
                f"the daily budget {usd(r.limit)} of {_scope_words(r.scope)} would be exceeded: {usd(r.counted)} "
                f"spent or held by calls in flight today (UTC), this request is bounded at {usd(cost)}",
                "daily_budget",
            )
        except Exception as e:  # the ledger cannot be reached: a budget that cannot be checked refuses
            log.error("budget reservation failed: %s", e)
            return Refusal(503, f"the budget cannot be checked: the ledger failed ({type(e).__name__})", "ledger")
        return None

    @contextlib.asynccontextmanager
    async def heartbeat(self) -> AsyncIterator[None]:
        """While the proxy serves: refresh this instance's holds every quarter of their lifetime."""
        task = asyncio.create_task(self._beat())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self._thread.shutdown(wait=True)

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_s / 4)
            try:
                await self._in_thread(self.ledger.refresh, self.instance, self.ttl_s)  # type: ignore[attr-defined]
            except Exception as e:  # the next beat tries again; holds last ttl_s
                log.error("refreshing the budget holds failed: %s", e)


def _scope_words(scope: str) -> str:
    if scope == "all":
        return "all calls"
    if scope.startswith("key:"):
        return f"key {scope[4:]}"
    return f"tag {scope[4:]}"
