"""``mmtok proxy``, ``mmtok ledger`` and ``mmtok calibrate``: thin commands over :mod:`mmtok.budgets.proxy`,
:mod:`mmtok.budgets.ledger` and :mod:`mmtok.budgets.calibrate`."""

from __future__ import annotations

import json
import sys
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import typer

from mmtok.cli.common import Column, console, one_output_format, print_error, print_note, print_table, say

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
ANTHROPIC_UPSTREAM = typer.Option("https://api.anthropic.com", "--anthropic-upstream")
GEMINI_UPSTREAM = typer.Option("https://generativelanguage.googleapis.com", "--gemini-upstream")
SHRINK = typer.Option(False, "--shrink", help="Replace media by their cheapest renditions that keep the bars.")
KEEP = typer.Option(
    [], "--keep", help="A quality bar for --shrink, as mmtok shrink takes it (e.g. ssim>=0.95; repeatable)."
)
MAX_COST = typer.Option(None, "--max-cost", help="Refuse a request predicted above this (USD).")
BUDGET = typer.Option(
    None, "--budget-usd-per-day", help="Refuse requests once the UTC day's spend would pass this (USD)."
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
) -> None:
    """Serve a local proxy in front of the OpenAI, Anthropic and Gemini APIs: point an SDK's base URL at it
    (http://HOST:PORT/v1, .../anthropic, .../gemini). Each call is priced before it is sent, refused over a limit
    (in the provider's own error shape), passed through untouched (streams chunk by chunk, your key included, never
    stored) and recorded in the ledger with what the provider billed."""
    from mmtok.budgets.ledger import open_ledger
    from mmtok.budgets.proxy import ProxyConfig, serve

    _check_bars(keep)
    _check_sheets(prices)
    config = ProxyConfig(
        ledger=ledger,
        upstreams=_upstreams(openai_upstream, anthropic_upstream, gemini_upstream),
        max_cost=_usd(max_cost, "--max-cost"),
        budget_usd_per_day=_usd(budget_usd_per_day, "--budget-usd-per-day"),
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
    from mmtok.budgets.sheets import families, sheets

    paths = tuple(prices)
    sheets(paths)
    families(paths)


def _check_bars(keep: list[str]) -> None:
    from mmtok.budgets.shrink import make_bars
    from mmtok.errors import MmtokError

    try:
        make_bars(keep)
    except MmtokError as e:
        raise typer.BadParameter(str(e), param_hint="--keep") from None


def _checked_since(since: str | None) -> str | None:
    """--since as the ledger compares it (an ISO date or time); anything else is a usage error, not an empty report."""
    if since is None:
        return None
    import datetime as dt

    try:
        parsed = dt.datetime.fromisoformat(since) if "T" in since else dt.date.fromisoformat(since)
    except ValueError:
        raise typer.BadParameter(f"must be a date like 2026-12-01 or a time like 2026-12-01T09:30, got {since!r}",
                                 param_hint="--since") from None  # fmt: skip
    return parsed.isoformat()


def ledger(
    path: str = typer.Argument(..., help="The proxy's ledger: an SQLite file or a SQLAlchemy URL."),
    json_out: bool = typer.Option(False, "--json", help="The report as one JSON object."),
    csv_out: bool = typer.Option(False, "--csv", help="One CSV row per call."),
    html: Path | None = typer.Option(None, "--html", help="Write an HTML report with figures to this folder."),
    since: str | None = typer.Option(None, "--since", help="Only calls from this time on (2026-12-01, ISO)."),
) -> None:
    """Report a proxy's ledger: spend per day and model, savings from shrink, and predicted against billed tokens
    per model and modality (errors and worst cases)."""
    from mmtok.budgets.proxy import report

    one_output_format(json_out, csv_out)
    since = _checked_since(since)
    book = _open(path)
    records = book.records(since)
    if csv_out:
        report.write_csv(records, sys.stdout)
        return
    rows = list(records)
    if html is not None:
        page = report.write_html(rows, html, book.where)
        if not json_out:
            print_note(f"wrote {page}")
    summary = report.summarise(rows, book.where)
    if json_out:
        say(json.dumps(summary, default=str))
        return
    _print_summary(summary)


def _open(path: str) -> Any:
    """The ledger at ``path``, for reading."""
    from mmtok.budgets.ledger import open_ledger

    if "://" not in path and not Path(path).expanduser().is_file():
        raise typer.BadParameter(f"{path}: no such ledger file", param_hint="PATH")
    return open_ledger(path, read_only=True)


def _print_summary(summary: dict[str, Any]) -> None:
    outcomes = ", ".join(f"{n} {k}" for k, n in sorted(summary["outcomes"].items()))
    say(
        f"{summary['ledger']}: {summary['calls']} calls ({outcomes or 'none'}); spend ${summary['spend_usd']}, "
        f"saved by shrink ${summary['saved_usd']}"
    )
    if summary["spend"]:
        columns = [
            Column("day"),
            Column("model"),
            Column("calls", True),
            Column("refused", True, priority=1),
            Column("spend $", True),
            Column("saved $", True, priority=2),
        ]
        rows = [
            [s["day"], s["model"], str(s["calls"]), str(s["refused"]), s["spend"], s["saved"]] for s in summary["spend"]
        ]
        print_table(columns, rows)
    if summary["accuracy"]:
        columns = [
            Column("model"),
            Column("tokens"),
            Column("calls", True),
            Column("exact", True),
            Column("predicted", True),
            Column("billed", True),
            Column("mean error", True),
            Column("median rel.", True, priority=1),
            Column("worst rel.", True, priority=2),
        ]
        rows = [
            [
                a["model"],
                a["modality"],
                str(a["calls"]),
                str(a["exact"]),
                f"{a['predicted']:,}",
                f"{a['billed']:,}",
                f"{a['mean_error']:+,.1f}",
                _percent(a["median_relative_error"]),
                _percent(a["max_abs_relative_error"]),
            ]
            for a in summary["accuracy"]
        ]
        print_table(columns, rows)


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value:+.1%}"


def rule_text(params: dict[str, Any] | None) -> str:
    """A rule in a few words: its formula and parameters."""
    if not params:
        return ""
    formula = params["formula"]
    if formula == "openai-tile":
        return f"tiles {params['base_tokens']} + {params['tile_tokens']}/512px"
    if formula == "openai-patch":
        budgets = ", ".join(f"{k} {v.get('patch_budget', '-')}" for k, v in params["levels"].items())
        return f"patches x{params['multiplier']} (budget {budgets})"
    if formula == "anthropic-patches":
        return f"28px patches ({params['max_edge']} px, {params['max_tokens']} tokens)"
    if formula == "fixed":
        return f"flat {params['tokens']}"
    if formula == "gemini-tiles":
        return f"{params['tokens_per_tile']}/768px tile"
    if formula == "tiles":
        return f"{params['base_tokens']} + {params['tile_tokens']}/{params['tile_px']}px (fit {params['fit_px']})"
    if "levels" in params:
        return f"{formula} " + ", ".join(f"{k} {v}" for k, v in params["levels"].items())
    return formula


def _sizes(text: str | None) -> tuple[tuple[int, int], ...] | None:
    if text is None:
        return None
    found = []
    for item in text.split(","):
        width, _, height = item.strip().lower().partition("x")
        if not (width.isdigit() and height.isdigit() and 0 < int(width) <= 8192 and 0 < int(height) <= 8192):
            raise typer.BadParameter(f"expected sizes like 512x512,1920x1080, got {item!r}", param_hint="--sizes")
        found.append((int(width), int(height)))
    return tuple(found)


def _measure(path: str, models: list[str], sizes: Any, upstreams: dict[str, str | None], prices: list[Path]) -> None:
    from mmtok.budgets.ledger import open_ledger
    from mmtok.budgets.proxy.measure import DEFAULT_SIZES, measure, provider_for

    book = open_ledger(path)
    try:
        for model in models:
            base = upstreams[provider_for(model, prices)]
            rows = measure(model, book, sizes or DEFAULT_SIZES, base_url=base, prices=tuple(prices))
            failed = [r for r in rows if r.outcome != "ok"]
            print_note(f"{model}: {len(rows) - len(failed)} of {len(rows)} counts recorded in {book.where}")
            for row in failed[:3]:
                print_error(f"{model}: {row.message}")
    finally:
        book.close()


MEASURE = typer.Option(
    [], "--measure", help="First count photos on this model's free token-counting endpoint (needs its key)."
)
SIZES = typer.Option(None, "--sizes", help="Photo sizes to measure, e.g. 512x512,1920x1080.")
SHEET_OUT = typer.Option(..., "--out", "-o", help="The calibration sheet to write (TOML; --prices takes it).")
MEASURE_OPENAI = typer.Option(None, "--openai-upstream", help="OpenAI base URL for --measure.")
MEASURE_ANTHROPIC = typer.Option(None, "--anthropic-upstream")
MEASURE_GEMINI = typer.Option(None, "--gemini-upstream")


def calibrate(
    path: str = typer.Argument(..., help="The proxy's ledger: an SQLite file or a SQLAlchemy URL."),
    out: Path = SHEET_OUT,
    prices: list[Path] = typer.Option([], "--prices", help="Price sheets the calls were priced with."),
    json_out: bool = typer.Option(False, "--json", help="The fits as one JSON object."),
    measure: list[str] = MEASURE,
    sizes: str | None = SIZES,
    openai_upstream: str | None = MEASURE_OPENAI,
    anthropic_upstream: str | None = MEASURE_ANTHROPIC,
    gemini_upstream: str | None = MEASURE_GEMINI,
) -> None:
    """Fit each model's media rule to what its calls were billed (the rule's own parameters, or a new rule family
    where none fits), say where the bills disagree with the documented rule and by how much, and write the fitted
    rules as a dated price sheet for --prices. With --measure, photos of chosen sizes are first counted on the
    provider's free counting endpoint (key from OPENAI_API_KEY, ANTHROPIC_API_KEY or GEMINI_API_KEY) and recorded
    in the ledger."""
    from mmtok.budgets.calibrate import calibrate as fit
    from mmtok.budgets.calibrate import write_sheet
    from mmtok.cli.common import check_out_file

    check_out_file(out, (".toml",))
    chosen = _sizes(sizes)
    if measure:
        upstreams = {"openai": openai_upstream, "anthropic": anthropic_upstream, "gemini": gemini_upstream}
        _measure(path, measure, chosen, upstreams, prices)
    book = _open(path)
    calibration = fit(book.records(), prices=tuple(prices), source=book.where)
    if not calibration.models:
        print_error(f"{book.where}: no billed calls with images to calibrate from")
        raise typer.Exit(1)
    write_sheet(calibration, out)
    if json_out:
        models = [m.to_dict() for m in calibration.models]
        say(json.dumps({"sheet": str(out), "models": models, "skipped": dict(calibration.skipped)}, default=str))
        return
    _print_fits(calibration)
    console().print(f"wrote {out} (use it with --prices)", markup=False, highlight=False)


def _print_fits(calibration: Any) -> None:
    """A row per model (documented rule, how it met the bills, the fitted rule), then a line each in words."""
    from mmtok.budgets.calibrate import describe_fit

    columns = [Column("model"), Column("calls", True), Column("documented rule", fold=True), Column("exact", True),
               Column("mean error", True), Column("fitted rule", fold=True), Column("fitted exact", True),
               Column("overhead", priority=1)]  # fmt: skip
    rows = []
    for m in calibration.models:
        doc, fitted = m.documented, m.fitted
        overhead = "" if m.overhead is None else f"+{m.overhead.per_request}/req +{m.overhead.per_message}/msg"
        new = " (new rule)" if m.new_family else ""
        rows.append([m.model, str(m.calls), rule_text(doc.params if doc else None),
                     f"{doc.exact}/{doc.total}" if doc else "", f"{doc.mean_abs_error:.1f}" if doc else "",
                     rule_text(fitted.params if fitted else None) + new,
                     f"{fitted.exact}/{fitted.total}" if fitted else "", overhead])  # fmt: skip
    print_table(columns, rows)
    for m in calibration.models:
        say(f"{m.model}: {describe_fit(m)}")
    for reason, count in sorted(calibration.skipped.items()):
        print_note(f"{count} call(s) left out: {reason}")
