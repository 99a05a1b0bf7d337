"""``mmtok proxy``: a thin command over :mod:`mmtok.budgets.proxy` (the ledger it writes is read by
``mmtok ledger`` and ``mmtok calibrate``: :mod:`mmtok.cli.ledger`, :mod:`mmtok.cli.calibrate`)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import typer

from mmtok.cli.common import say

DEFAULT_LEDGER = "mmtok-ledger.sqlite"


def _usd(value: str | None, option: str) -> Decimal | None:
    if value is None:
        return None
    try:
        amount = Decimal(value.strip().lstrip("$"))
    except InvalidOperation:
        raise typer.BadParameter(f"expected an amount in USD such as 0.05, got {value!r}", param_hint=option) from None
    if not amount.is_finite() or amount <= 0:
        raise typer.BadParameter(f"must be a positive amount in USD, got {value!r}", param_hint=option)
    return amount


PORT = typer.Option(8787, "--port", min=0, max=65535, help="Port to listen on (0: any free port).")
HOST = typer.Option("127.0.0.1", "--host", help="Address to listen on (loopback unless you say otherwise).")
LEDGER = typer.Option(DEFAULT_LEDGER, "--ledger", help="SQLite file, or a SQLAlchemy URL (mmtok[sql]).")
OPENAI_UPSTREAM = typer.Option("https://api.openai.com/v1", "--openai-upstream", help="OpenAI base URL.")
ANTHROPIC_UPSTREAM = typer.Option("https://api.anthropic.com", "--anthropic-upstream", help="Anthropic base URL.")
GEMINI_UPSTREAM = typer.Option(
    "https://generativelanguage.googleapis.com", "--gemini-upstream", help="Gemini API base URL."
)
SHRINK = typer.Option(False, "--shrink", help="Replace media by their cheapest renditions that keep the bars.")
KEEP = typer.Option(
    [], "--keep", help="A quality bar for --shrink, as mmtok shrink takes it (e.g. ssim>=0.95; repeatable)."
)
MAX_COST = typer.Option(None, "--max-cost", help="Refuse a request predicted above this (USD).")
BUDGET = typer.Option(
    None, "--budget-usd-per-day", help="Refuse requests once the UTC day's spend would pass this (USD)."
)
BUDGET_PER_KEY = typer.Option(
    None, "--budget-usd-per-day-per-key", help="Each API key's own daily budget (USD, UTC days; keys by fingerprint)."
)
BUDGETS = typer.Option(
    [],
    "--budget",
    help="A daily budget SCOPE=USD: tag:team=search=5 (calls tagged team=search), tag:team=1 (each team), key=2, "
    "all=50 (repeatable).",
)
RESERVATION_TTL = typer.Option(
    60.0, "--reservation-ttl", min=1, max=86399, help="Seconds the budget holds of a proxy that stopped outlive it."
)
ALLOW_UNPRICED = typer.Option(
    False, "--allow-unpriced", help="Send requests that cannot be priced in full even with a limit set."
)
PRICES = typer.Option([], "--prices", help="Your own price sheet, e.g. a calibration sheet.")
STORE_BODIES = typer.Option(False, "--store-bodies", help="Keep request bodies in the ledger.")
SYNC_LEDGER = typer.Option(
    False, "--sync-ledger", help="Answer each call only once its record is committed (a commit more per call)."
)
OFFLINE = typer.Option(False, "--offline", help="Never read image URLs in bodies to price them.")
ALLOW_PRIVATE = typer.Option(
    False, "--allow-private", help="Let URLs in bodies that point at private addresses be read to price them."
)
MAX_BODY_MB = typer.Option(64.0, "--max-body-mb", min=0.001, help="Refuse larger request bodies (413).")
UPSTREAM_TIMEOUT = typer.Option(600.0, "--upstream-timeout", min=0.01, help="Seconds between reads.")
DRAIN = typer.Option(30.0, "--drain", min=0, help="On SIGTERM, seconds calls in flight may finish in.")
WORKERS = typer.Option(1, "--workers", min=1, max=64, help="Processes serving the port (one per core).")
READ_TIMEOUT = typer.Option(
    15.0, "--read-timeout", min=0.01, help="Seconds a client may take to send its headers, or pause in its body."
)
MAX_CONNECTIONS = typer.Option(
    4096, "--max-connections", min=1, help="Client connections open at once per worker; more are answered 503."
)


def proxy(
    port: int = PORT,
    host: str = HOST,
    ledger: str = LEDGER,
    openai_upstream: str = OPENAI_UPSTREAM,
    anthropic_upstream: str = ANTHROPIC_UPSTREAM,
    gemini_upstream: str = GEMINI_UPSTREAM,
    shrink: bool = SHRINK,
    keep: list[str] = KEEP,
    max_cost: str | None = MAX_COST,
    budget_usd_per_day: str | None = BUDGET,
    budget_usd_per_day_per_key: str | None = BUDGET_PER_KEY,
    budget: list[str] = BUDGETS,
    reservation_ttl: float = RESERVATION_TTL,
    allow_unpriced: bool = ALLOW_UNPRICED,
    prices: list[Path] = PRICES,
    store_bodies: bool = STORE_BODIES,
    sync_ledger: bool = SYNC_LEDGER,
    offline: bool = OFFLINE,
    allow_private: bool = ALLOW_PRIVATE,
    max_body_mb: float = MAX_BODY_MB,
    upstream_timeout: float = UPSTREAM_TIMEOUT,
    drain: float = DRAIN,
    workers: int = WORKERS,
    read_timeout: float = READ_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
) -> None:
    """Serve a local proxy in front of the OpenAI, Anthropic and Gemini APIs: point an SDK's base URL at it
    (http://HOST:PORT/v1, .../anthropic, .../gemini). Each call is priced before it is sent, refused over a limit
    (in the provider's own error shape), passed through untouched (streams chunk by chunk, your key included, never
    stored) and recorded in the ledger with what the provider billed."""
    from mmtok.budgets.ledger import open_ledger
    from mmtok.budgets.proxy import ProxyConfig, serve

    _check_bars(keep)
    _check_budgets(budget)
    _check_sheets(prices)
    config = ProxyConfig(
        ledger=ledger,
        upstreams=_upstreams(openai_upstream, anthropic_upstream, gemini_upstream),
        max_cost=_usd(max_cost, "--max-cost"),
        budget_usd_per_day=_usd(budget_usd_per_day, "--budget-usd-per-day"),
        budget_usd_per_day_per_key=_usd(budget_usd_per_day_per_key, "--budget-usd-per-day-per-key"),
        budgets=tuple(budget),
        reservation_ttl_s=reservation_ttl,
        allow_unpriced=allow_unpriced,
        shrink=shrink,
        keep=tuple(keep),
        prices=tuple(prices),
        max_body_bytes=int(max_body_mb * 2**20),
        store_bodies=store_bodies,
        sync_ledger=sync_ledger,
        read_urls=not offline,
        allow_private=allow_private,
        upstream_timeout_s=upstream_timeout,
        read_timeout_s=read_timeout,
        max_connections=max_connections,
    )
    opened = open_ledger(ledger)  # a bad ledger is one line here, before anything listens
    serve(config, opened, host=host, port=port, drain_s=drain, on_ready=_announce(opened.where), workers=workers)


def _upstreams(openai: str, anthropic: str, gemini: str) -> dict[str, str]:
    upstreams = {"openai": openai, "anthropic": anthropic, "gemini": gemini}
    for provider, url in upstreams.items():
        if not url.lower().startswith(("http://", "https://")):
            raise typer.BadParameter(f"expected an http(s) base URL, got {url!r}", param_hint=f"--{provider}-upstream")
    return upstreams


def _announce(where: str) -> Any:
    """What the proxy says once it listens: its URL, the ledger, and each SDK's base URL."""

    def ready(url: str) -> None:
        say(f"mmtok proxy listening on {url}; ledger {where}")
        say(f"  OpenAI:    base_url={url}/v1")
        say(f"  Anthropic: base_url={url}/anthropic")
        say(f"  Gemini:    http_options={{'base_url': '{url}/gemini'}}")

    return ready


def _check_sheets(prices: list[Path]) -> None:
    """Read the price sheets now: a bad one is one line before the proxy listens, not an unpriced call later."""
    from mmtok.budgets.pricing.sheets import families, sheets

    paths = tuple(prices)
    sheets(paths)
    families(paths)


def _check_budgets(budgets: list[str]) -> None:
    from mmtok.budgets.proxy.limits import budget_rules
    from mmtok.errors import MmtokError

    try:
        budget_rules(None, None, tuple(budgets))
    except MmtokError as e:
        raise typer.BadParameter(str(e), param_hint="--budget") from None


def _check_bars(keep: list[str]) -> None:
    from mmtok.budgets.shrink import make_bars
    from mmtok.errors import MmtokError

    try:
        make_bars(keep)
    except MmtokError as e:
        raise typer.BadParameter(str(e), param_hint="--keep") from None
