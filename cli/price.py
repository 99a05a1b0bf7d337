"""``mmtok price``, ``mmtok models`` and ``mmtok prices``: token counts and costs per input, model and modality."""

from __future__ import annotations

import csv
import datetime as dt
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mmtok.cli.common import console, flushes_json_lines, fmt_num, print_error, print_json_line, progress
from mmtok.errors import MmtokError, PriceError

if TYPE_CHECKING:
    from mmtok.budgets.pricing import Quote

MODALITY_COLUMNS = ("text", "image", "audio", "video")
CSV_FIELDS = [
    "item",
    "model",
    *[f"{m}_tokens" for m in MODALITY_COLUMNS],
    "input_tokens",
    "output_tokens",
    "input_cost",
    "output_cost",
    "total_cost",
    "currency",
    "exact",
    "working",
    "source",
    "as_of",
]


@flushes_json_lines
def price(
    paths: list[Path] = typer.Argument(None, help="Files or folders (walked recursively)."),
    model: list[str] = typer.Option(["gpt-4o"], "--model", "-m", help="Model to price on (repeatable)."),
    text: str | None = typer.Option(None, "--text", help="Price this text (in addition to any paths)."),
    detail: str | None = typer.Option(None, help="OpenAI: low|high|auto; Gemini 3: low|medium|high|ultra_high."),
    output_tokens: int = typer.Option(0, "--output-tokens", min=0, help="Also price this many output tokens."),
    prices: list[Path] = typer.Option([], "--prices", help="Extra price sheet (TOML); its rows override."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per input and model on stdout."),
    csv_out: bool = typer.Option(False, "--csv", help="CSV on stdout."),
) -> None:
    """What each input costs on each model: tokens per modality, cost, the formula applied and the price sheet."""
    from mmtok.budgets.pricing import model_spec, price_many

    if json_out and csv_out:
        raise typer.BadParameter("choose one of --json and --csv")
    if not paths and text is None:
        raise typer.BadParameter("give files or folders to price, or --text")
    try:
        for name in model:
            model_spec(name, prices)
    except PriceError as e:
        print_error(e)
        raise typer.Exit(2) from None

    def batches() -> Iterator[tuple[str, list[Quote | MmtokError]]]:
        if text is not None:
            yield "<text>", [_quote_text(text, name, detail, output_tokens, prices) for name in model]
        if paths:
            yield from progress(
                price_many(paths, model, detail=detail, output_tokens=output_tokens, prices=prices),
                "pricing",
                total=None,
            )

    writer = csv.DictWriter(sys.stdout, CSV_FIELDS) if csv_out else None
    if writer:
        writer.writeheader()
    table_quotes: list[Quote] = []
    failures = 0
    for item, results in batches():
        if len(results) != len(model):  # the file itself could not be read: one line, not one per model
            failures += 1
            print_error(results[0])
            if json_out:
                print_json_line({"item": item, "error": str(results[0])})
            continue
        for name, result in zip(model, results, strict=True):
            if isinstance(result, MmtokError):
                failures += 1
                print_error(f"{item}: {name}: {result}")
                if json_out:
                    print_json_line({"item": item, "model": name, "error": str(result)})
            elif json_out:
                print_json_line(result.to_dict())
            elif writer:
                writer.writerow(_csv_row(result))
            else:
                table_quotes.append(result)
    if not json_out and not writer:
        _print_table(table_quotes, model)
    if failures:
        raise typer.Exit(1)


def _quote_text(
    text: str, model: str, detail: str | None, output_tokens: int, prices: list[Path]
) -> Quote | MmtokError:
    from mmtok.budgets.pricing import price as price_one

    try:
        return price_one(text=text, model=model, detail=detail, output_tokens=output_tokens, prices=prices)
    except MmtokError as e:
        return e


def _csv_row(quote: Quote) -> dict[str, object]:
    return {
        "item": quote.item,
        "model": quote.model,
        **{f"{m}_tokens": quote.tokens(m) for m in MODALITY_COLUMNS},
        "input_tokens": quote.input_tokens,
        "output_tokens": quote.output_tokens,
        "input_cost": quote.input_cost,
        "output_cost": quote.output_cost,
        "total_cost": quote.total_cost,
        "currency": quote.currency,
        "exact": quote.exact,
        "working": " | ".join(ln.working for ln in quote.lines),
        "source": quote.source,
        "as_of": quote.as_of.isoformat(),
    }


def _money(value: Decimal) -> str:
    return f"{value:.6f}" if value < 1 else f"{value:,.4f}"


def _print_table(quotes: list[Quote], models: list[str]) -> None:
    from rich.table import Table

    table = Table(show_edge=False, header_style="bold")
    table.add_column("input", overflow="fold")
    table.add_column("model", no_wrap=True)
    for m in MODALITY_COLUMNS:
        table.add_column(f"{m} tok", justify="right")
    table.add_column("cost USD", justify="right")
    table.add_column("working", overflow="fold")
    totals: dict[str, dict[str, Decimal | int]] = {}
    for q in quotes:
        cells = [fmt_num(q.tokens(m)) if q.tokens(m) else "" for m in MODALITY_COLUMNS]
        cost = _money(q.total_cost) + ("" if q.exact else " ~")
        table.add_row(_short(q.item), q.model, *cells, cost, "; ".join(ln.working for ln in q.lines))
        total = totals.setdefault(q.model, {"cost": Decimal(0), **{m: 0 for m in MODALITY_COLUMNS}})
        total["cost"] += q.total_cost
        for m in MODALITY_COLUMNS:
            total[m] += q.tokens(m)
    if len(quotes) > 1:
        table.add_section()
        for name in models:
            if name in totals:
                t = totals[name]
                cells = [fmt_num(t[m]) if t[m] else "" for m in MODALITY_COLUMNS]
                table.add_row("[bold]total[/]", name, *cells, _money(t["cost"]), "")
    console().print(table)
    seen: dict[str, Quote] = {}
    for q in quotes:
        seen.setdefault(q.model, q)
    for name, q in seen.items():
        console().print(f"[dim]{name}: {q.family} rules; prices from {q.source}, as of {q.as_of}[/]")
    if any(not q.exact for q in quotes):
        console().print("[dim]~ a token rule is a documented estimate (see the working)[/]")


def _short(item: str) -> str:
    try:
        return str(Path(item).resolve().relative_to(Path.cwd()))
    except ValueError:
        return item


@flushes_json_lines
def models(
    prices: list[Path] = typer.Option([], "--prices", help="Extra price sheet (TOML)."),
    provider: str | None = typer.Option(None, help="Only this provider."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Known models: their token rules per modality, rates, and price-sheet dates."""
    from mmtok.budgets.pricing import list_models

    try:
        specs = [s for s in list_models(prices) if provider is None or s.row.provider == provider]
    except PriceError as e:
        print_error(e)
        raise typer.Exit(2) from None
    rows = []
    for s in specs:
        rules = {m: _rule(s.formulas[m]) for m in ("image", "audio", "video") if m in s.formulas}
        rows.append(
            {
                "model": s.name,
                "provider": s.row.provider,
                "family": s.family.name if s.family else "",
                "text": s.text_rule,
                **rules,
                "rates": {k: str(v) for k, v in s.row.rates.items()},
                "source": s.row.source,
                "as_of": s.row.as_of.isoformat(),
                "sheet": str(s.row.sheet),
            }
        )
    if json_out:
        for r in rows:
            print_json_line(r)
        return
    from rich.table import Table

    table = Table(show_edge=False, header_style="bold")
    for col in ("model", "provider", "text", "image", "audio", "video", "in $/1M", "out $/1M", "as of"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            r["model"],
            r["provider"],
            r["text"],
            *[r.get(m, "-").split("(")[0] for m in ("image", "audio", "video")],
            r["rates"].get("input_per_mtok", ""),
            r["rates"].get("output_per_mtok", ""),
            r["as_of"],
        )
    console().print(table)


def _rule(params: dict) -> str:
    extra = ", ".join(f"{k}={v}" for k, v in params.items() if k != "formula")
    return f"{params['formula']}({extra})" if extra else params["formula"]


prices_app = typer.Typer(help="Price sheets: list them, import LiteLLM's price map.", no_args_is_help=True)


@prices_app.command("list")
def prices_list(prices: list[Path] = typer.Option([], "--prices", help="Extra price sheet (TOML).")) -> None:
    """Price sheets in use: provider, models, dates and sources."""
    from rich.table import Table

    from mmtok.budgets.sheets import model_rows

    try:
        rows = model_rows(tuple(prices))
    except PriceError as e:
        print_error(e)
        raise typer.Exit(2) from None
    sheets: dict[Path, list] = {}
    for row in rows.values():
        sheets.setdefault(row.sheet, []).append(row)
    table = Table(show_edge=False, header_style="bold")
    for col in ("sheet", "provider", "models", "as of", "source"):
        table.add_column(col, overflow="fold")
    for sheet, entries in sheets.items():
        dates = sorted({r.as_of for r in entries})
        table.add_row(
            str(sheet.name),
            entries[0].provider,
            str(len(entries)),
            dates[0].isoformat() if len(dates) == 1 else f"{dates[0]} .. {dates[-1]}",
            "; ".join(sorted({r.source for r in entries})),
        )
    console().print(table)


@prices_app.command("import-litellm")
def prices_import_litellm(
    file: Path = typer.Argument(..., help="LiteLLM's model_prices_and_context_window.json."),
    out: Path = typer.Option(..., "--out", "-o", help="Sheet to write (TOML)."),
    provider: str = typer.Option("litellm", help="Provider name recorded in the sheet."),
    model: list[str] = typer.Option([], "--model", "-m", help="Only models matching this pattern (repeatable)."),
    as_of: str | None = typer.Option(None, help="Date the prices were read (default: today)."),
    source: str | None = typer.Option(None, help="Where the file came from (default: LiteLLM's repository)."),
) -> None:
    """Convert LiteLLM's price map into an mmtok price sheet, to refresh prices yourself."""
    from mmtok.budgets.litellm import import_litellm

    try:
        date = dt.date.fromisoformat(as_of) if as_of else None
    except ValueError:
        raise typer.BadParameter(f"--as-of must be a date like 2026-07-24, got {as_of!r}") from None
    try:
        count = import_litellm(file, out, provider=provider, patterns=model or None, source=source, as_of=date)
    except PriceError as e:
        print_error(e)
        raise typer.Exit(1) from None
    console().print(f"wrote {count} models to {out}")
