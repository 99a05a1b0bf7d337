"""How a proxy runs: where calls go, where they are recorded, what it refuses, what it shrinks."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mmtok.budgets.proxy.limits import BudgetRules, budget_rules
from mmtok.budgets.proxy.providers import DEFAULT_UPSTREAMS
from mmtok.errors import ConfigError

DEFAULT_MAX_BODY_BYTES = 64 * 2**20  # above every provider's own request limit (Anthropic 32 MB, Gemini 20 MB inline)


@dataclass(frozen=True)
class ProxyConfig:
    ledger: str  # an SQLite file, or a SQLAlchemy URL
    upstreams: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_UPSTREAMS))  # provider -> base URL
    max_cost: Decimal | None = None  # USD per request (the prediction, output budget included)
    budget_usd_per_day: Decimal | None = None  # USD per UTC day, across the ledger's calls
    budget_usd_per_day_per_key: Decimal | None = None  # USD per UTC day for each key (by its fingerprint)
    budgets: tuple[str, ...] = ()  # more daily budgets, SCOPE=USD: tag:team=search=5, tag:team=1, key=2, all=50
    reservation_ttl_s: float = 60.0  # how long the holds of a proxy that stopped outlive it
    allow_unpriced: bool = False  # forward a request that cannot be priced in full though a limit is set
    shrink: bool = False  # shrink media in flight (mmtok.budgets.shrink), to the bars in ``keep``
    keep: tuple[str, ...] = ()  # quality bars, as ``mmtok shrink --keep``
    prices: tuple[Path, ...] = ()  # price sheets (a calibration sheet among them)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    sync_ledger: bool = False  # answer a call only once its record is committed (a commit's time more per call)
    store_bodies: bool = False  # keep request bodies in the ledger (off: geometry and hashes only)
    read_urls: bool = True  # measure images behind http(s) URLs in bodies (by bounded Range reads) to price them
    allow_private: bool = False  # let URLs in bodies that point at private addresses be read to be priced
    connect_timeout_s: float = 10.0
    upstream_timeout_s: float = 600.0  # between two reads from the upstream (a long generation streams)
    read_timeout_s: float = 15.0  # for a client to send its headers, and its longest pause while sending a body
    max_connections: int = 4096  # client connections open at once, per process (more are answered 503)

    def __post_init__(self) -> None:
        for provider, url in self.upstreams.items():
            if provider not in DEFAULT_UPSTREAMS:
                raise ConfigError(f"unknown provider {provider!r}; known: {', '.join(DEFAULT_UPSTREAMS)}")
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
                raise ConfigError(f"--{provider}-upstream {url!r}: expected an http(s) base URL with no query")
        for name in ("max_cost", "budget_usd_per_day", "budget_usd_per_day_per_key"):
            value = getattr(self, name)
            if value is not None and (not value.is_finite() or value <= 0):
                raise ConfigError(f"--{name.replace('_', '-')} must be a positive amount in USD, got {value}")
        self.budget_rules()  # a bad --budget is one line before the proxy listens
        if not 0 < self.reservation_ttl_s < 86400:
            raise ConfigError(f"--reservation-ttl must be between 0 and 86400 seconds, got {self.reservation_ttl_s}")
        if self.max_body_bytes <= 0:
            raise ConfigError(f"the body cap must be positive, got {self.max_body_bytes}")
        if self.read_timeout_s <= 0 or self.max_connections < 1:
            raise ConfigError("the read timeout and the connection cap must be positive")

    def budget_rules(self) -> BudgetRules:
        """The daily budgets in force (global, per key, per tag)."""
        return budget_rules(self.budget_usd_per_day, self.budget_usd_per_day_per_key, self.budgets)

    def upstream(self, provider: str) -> str:
        return self.upstreams.get(provider, DEFAULT_UPSTREAMS[provider]).rstrip("/")

    def describe(self) -> dict[str, Any]:
        """The settings for people (no secrets: a ledger URL's password is hidden)."""
        return {
            "ledger": _hide_password(self.ledger),
            "upstreams": {p: self.upstream(p) for p in DEFAULT_UPSTREAMS},
            "max_cost": None if self.max_cost is None else str(self.max_cost),
            "budgets_usd_per_day": self.budget_rules().describe(),
            "shrink": self.shrink,
            "keep": list(self.keep),
            "store_bodies": self.store_bodies,
        }


def _hide_password(target: str) -> str:
    if "://" not in target:
        return os.fspath(target)
    parts = urlsplit(target)
    if parts.password is None:
        return target
    return target.replace(f":{parts.password}@", ":***@", 1)
