"""The proxy's live dashboard: ``GET /mmtok/`` is a page that polls ``GET /mmtok/api/summary`` every few seconds and
shows today's spend (UTC) against each budget, by model, key and tag; mmtok's predictions against the bills; what
``--shrink`` saved; the last refusals and errors.

The summary is read from the ledger every proxy on it shares (the same rows ``mmtok ledger`` reads, the same budget
counters the reservations use), so every instance shows the same numbers. It is computed at most every
:data:`SUMMARY_TTL_S` seconds per process, on a worker thread. Money is given as exact decimal strings.

The page is three package files (:data:`FILES`), served with a Content-Security-Policy that lets it load nothing
but themselves and the summary: no CDN, no web fonts, it works offline. It shows key fingerprints and tags, never a
key or a body; anyone who can reach the proxy's port can read it (the proxy listens on loopback unless told).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Sequence
from decimal import Decimal
from importlib import resources
from typing import Any

from mmtok.budgets.ledger import Record
from mmtok.budgets.ledger.report import groups
from mmtok.budgets.proxy.limits import BudgetRules

SUMMARY_TTL_S = 1.0
TOP_ROWS = 20  # rows per table (most spent first)
TOP_TAGS = 8  # tag names shown (most used first)
RECENT = 15  # refusals and errors listed
MESSAGE_CHARS = 300
FILES = {  # URL name -> (package file, content type)
    "dashboard.html": ("dashboard.html", "text/html; charset=utf-8"),
    "dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
}
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def static_file(name: str) -> tuple[bytes, str] | None:
    """A dashboard file's bytes and content type (None for a name that is not one of :data:`FILES`)."""
    if name not in FILES:
        return None
    filename, content_type = FILES[name]
    return (resources.files("mmtok.budgets.proxy.static") / filename).read_bytes(), content_type


def _money(value: Decimal) -> str:
    return str(value.normalize()) if value else "0"


def totals(records: Sequence[Record]) -> dict[str, Any]:
    """Calls by how they ended, spend, and predicted against billed cost and input tokens."""
    sent = [r for r in records if r.outcome != "refused"]
    compared = [r for r in sent if r.billed_cost is not None and r.predicted_cost is not None]
    tokens = [r for r in sent if r.billed_input is not None and r.predicted_input is not None]
    return {
        "calls": len(records),
        "ok": sum(r.outcome == "ok" for r in records),
        "refused": sum(r.outcome == "refused" for r in records),
        "errors": sum(r.outcome not in ("ok", "refused") for r in records),
        "spend": _money(sum((r.spend for r in records), Decimal(0))),
        "billed": _money(sum((r.billed_cost or Decimal(0) for r in records), Decimal(0))),
        "predicted": _money(sum((r.predicted_cost or Decimal(0) for r in sent), Decimal(0))),
        "compared_calls": len(compared),
        "compared_predicted": _money(sum((r.predicted_cost for r in compared), Decimal(0))),
        "compared_billed": _money(sum((r.billed_cost for r in compared), Decimal(0))),
        "token_calls": len(tokens),
        "predicted_input": sum(r.predicted_input for r in tokens),
        "billed_input": sum(r.billed_input for r in tokens),
        "shrunk": sum(r.shrink is not None for r in records),
        "saved": _money(sum((r.saved_cost or Decimal(0) for r in records), Decimal(0))),
    }


def accuracy_by_model(records: Sequence[Record]) -> list[dict[str, Any]]:
    """Per model: predicted and billed input tokens and cost, over the calls that have both."""
    table: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.outcome == "refused" or r.billed_input is None or r.predicted_input is None:
            continue
        model = r.model or "?"
        empty = {"model": model, "calls": 0, "predicted_input": 0, "billed_input": 0, "predicted": Decimal(0)}
        row = table.setdefault(model, empty | {"billed": Decimal(0)})
        row["calls"] += 1
        row["predicted_input"] += r.predicted_input
        row["billed_input"] += r.billed_input
        row["predicted"] += r.predicted_cost or 0
        row["billed"] += r.billed_cost or 0
    ordered = sorted(table.values(), key=lambda row: (-row["billed"], row["model"]))[:TOP_ROWS]
    return [{k: _money(v) if isinstance(v, Decimal) else v for k, v in row.items()} for row in ordered]


def budget_scopes(rules: BudgetRules, records: Sequence[Record]) -> list[tuple[str, Decimal]]:
    """Each scope with a budget that today's calls touched (and ``all``, touched or not), with its limit."""
    scopes: dict[str, Decimal] = {}
    if rules.all is not None:
        scopes["all"] = rules.all
    for record in records:
        for scope, limit in rules.limits(record).items():
            scopes.setdefault(scope, limit)
    return list(scopes.items())


def budgets(ledger: Any, rules: BudgetRules, records: Sequence[Record], day: str) -> list[dict[str, Any]]:
    """Spend today (the ledger's budget counters) and what calls in flight hold, against each budget."""
    rows = []
    for scope, limit in budget_scopes(rules, records):
        spent = ledger.spend_on(day, scope)
        held = ledger.held_on(day, scope) if hasattr(ledger, "held_on") else Decimal(0)
        rows.append({"scope": scope, "limit": _money(limit), "spent": _money(spent), "held": _money(held)})
    rows.sort(key=lambda row: (row["scope"] != "all", -Decimal(row["spent"]) / Decimal(row["limit"]), row["scope"]))
    return rows[:TOP_ROWS]


def recent_problems(records: Sequence[Record]) -> list[dict[str, Any]]:
    """The last refusals and errors, newest first."""
    problems = [r for r in records if r.outcome != "ok"][-RECENT:]
    return [
        {
            "time": r.time,
            "provider": r.provider,
            "model": r.model,
            "outcome": r.outcome,
            "status": r.status,
            "message": r.message[:MESSAGE_CHARS],
        }
        for r in reversed(problems)
    ]


def tag_names(records: Sequence[Record]) -> list[str]:
    counts: dict[str, int] = {}
    for record in records:
        for name in record.tags:
            counts[name] = counts.get(name, 0) + 1
    return sorted(counts, key=lambda name: (-counts[name], name))[:TOP_TAGS]


def summary(ledger: Any, rules: BudgetRules, day: str | None = None) -> dict[str, Any]:
    """Everything the dashboard shows, for ``day`` (UTC; today by default), read from ``ledger``."""
    day = day or dt.datetime.now(dt.UTC).date().isoformat()
    records = [r for r in ledger.records(since=day) if r.day == day]
    skipped = len(getattr(ledger, "skipped", ()) or ())
    return {
        "day": day,
        "generated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "ledger": getattr(ledger, "where", ""),
        "skipped_rows": skipped,
        "totals": totals(records),
        "budgets": budgets(ledger, rules, records, day),
        "by_model": groups(records, "model")[:TOP_ROWS],
        "by_key": groups(records, "key")[:TOP_ROWS],
        "by_tag": {name: groups(records, f"tag:{name}")[:TOP_ROWS] for name in tag_names(records)},
        "accuracy": accuracy_by_model(records),
        "recent": recent_problems(records),
    }


class Dashboard:
    """The summary of one process, recomputed at most every :data:`SUMMARY_TTL_S` seconds on a worker thread."""

    def __init__(self, ledger: Any, rules: BudgetRules) -> None:
        self.ledger = ledger
        self.rules = rules
        self._cached: tuple[float, dict[str, Any]] | None = None
        self._lock = asyncio.Lock()

    async def summary(self) -> dict[str, Any]:
        async with self._lock:
            if self._cached is None or time.monotonic() - self._cached[0] > SUMMARY_TTL_S:
                found = await asyncio.to_thread(summary, self.ledger, self.rules)
                self._cached = (time.monotonic(), found)
            return self._cached[1]
