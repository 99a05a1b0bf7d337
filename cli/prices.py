"""``mmtok prices``: where prices come from, how old they are, and how to take in newer ones (offline)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import typer

from mmtok.cli.common import console, flushes_json_lines, print_error, print_json_line
from mmtok.errors import PriceError

prices_app = typer.Typer(
    help="Price data: status (which snapshot, how old), update (take in newer data), sheets, LiteLLM import.",
    no_args_is_help=True,
)


@prices_app.command("status")
@flushes_json_lines
def prices_status(json_out: bool = typer.Option(False, "--json", help="One JSON object.")) -> None:
    """Which price data and model catalog are in use, and how old they are."""
    from mmtok.budgets.status import price_status

    try:
        status = price_status()
    except PriceError as e:
        print_error(e)
        raise typer.Exit(1) from None
    if json_out:
        print_json_line(status)
        return
    from rich.table import Table

    table = Table(show_edge=False, header_style="bold", show_header=True)
    for col in ("source", "what", "version / file", "dated", "age (days)"):
        table.add_column(col, overflow="fold")
    for part in status["parts"]:
        table.add_row(part["source"], part["what"], part["version"], part["dated"] or "", str(part["age_days"] or ""))
    console().print(table)
    for note in status["notes"]:
        console().print(f"[dim]{note}[/]")


@prices_app.command("update")
def prices_update(
    source: Path | None = typer.Option(
        None, "--from", help="A genai-prices data.json or a LiteLLM model_prices_and_context_window.json."
    ),
    litellm_version: str = typer.Option("", help="With a LiteLLM map: the litellm version it came from."),
    reset: bool = typer.Option(False, "--reset", help="Forget taken-in data: use the installed packages' data."),
) -> None:
    """Take in newer price data or a newer model catalog, offline: from a file you downloaded, or from a newer
    installed genai-prices (`pip install -U genai-prices`, then run this). Nothing is downloaded."""
    from mmtok.budgets.status import reset_taken_in, take_in

    try:
        if reset:
            for line in reset_taken_in():
                console().print(line)
            return
        for line in take_in(source, litellm_version):
            console().print(line)
    except PriceError as e:
        print_error(e)
        raise typer.Exit(1) from None


@prices_app.command("list")
def prices_list(prices: list[Path] = typer.Option([], "--prices", help="Your own price sheet (TOML).")) -> None:
    """Price sheets in use (self-hosted models and yours): provider, models, dates and sources."""
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
    console().print("[dim]provider models are priced from genai-prices: see `mmtok prices status`[/]")


@prices_app.command("import-litellm")
def prices_import_litellm(
    file: Path = typer.Argument(..., help="LiteLLM's model_prices_and_context_window.json."),
    out: Path = typer.Option(..., "--out", "-o", help="Sheet to write (TOML)."),
    provider: str = typer.Option("litellm", help="Provider name recorded in the sheet."),
    model: list[str] = typer.Option([], "--model", "-m", help="Only models matching this pattern (repeatable)."),
    as_of: str | None = typer.Option(None, help="Date the prices were read (default: today)."),
    source: str | None = typer.Option(None, help="Where the file came from (default: LiteLLM's repository)."),
) -> None:
    """Convert LiteLLM's price map into an mmtok price sheet (a second source, or rates to edit and calibrate)."""
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
