"""``mmtok prices``: where prices come from, how old they are, and how to take in newer ones (offline)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from mmtok.cli.common import (
    Column,
    console,
    csv_writer,
    flushes_json_lines,
    one_output_format,
    print_error,
    print_json_line,
    print_table,
    say,
)
from mmtok.errors import PriceError


@contextmanager
def _exits_on_price_error(code: int, writing: Path | None = None) -> Iterator[None]:
    """A price error ends the command with its one line on stderr and exit ``code``; so does (exit 1) an OS error
    while ``writing`` that file."""
    try:
        yield
    except PriceError as e:
        print_error(e)
        raise typer.Exit(code) from None
    except OSError as e:
        if writing is None:
            raise
        print_error(f"{writing}: cannot write: {e.strerror or e}")
        raise typer.Exit(1) from None


prices_app = typer.Typer(
    help="Price data: status (which snapshot, how old), update (take in newer data), sheets, LiteLLM import.",
    no_args_is_help=True,
)


@prices_app.command("status")
@flushes_json_lines
def prices_status(json_out: bool = typer.Option(False, "--json", help="One JSON object.")) -> None:
    """Which price data and model catalog are in use, and how old they are."""
    from mmtok.budgets.pricing.status import price_status

    with _exits_on_price_error(1):
        status = price_status()
    if json_out:
        print_json_line(status)
        return
    columns = (
        Column("source"),
        Column("what", fold=True, min_width=14, priority=1),
        Column("version / file", fold=True, min_width=16),
        Column("dated", priority=3),
        Column("age\ndays", numeric=True, priority=2),
    )
    rows = [
        [p["source"], p["what"], p["version"], p["dated"] or "", "" if p["age_days"] is None else str(p["age_days"])]
        for p in status["parts"]
    ]
    print_table(columns, rows)
    for note in status["notes"]:
        console().print(f"[dim]{note}[/]")


@prices_app.command("update")
@flushes_json_lines
def prices_update(
    source: Path | None = typer.Option(
        None, "--from", help="A genai-prices data.json or a LiteLLM model_prices_and_context_window.json."
    ),
    litellm_version: str = typer.Option("", help="With a LiteLLM map: the litellm version it came from."),
    reset: bool = typer.Option(False, "--reset", help="Forget taken-in data: use the installed packages' data."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object: what was done, line by line."),
) -> None:
    """Take in newer price data or a newer model catalog, offline: from a file you downloaded, or from a newer
    installed genai-prices (`pip install -U genai-prices`, then run this). Nothing is downloaded."""
    from mmtok.budgets.pricing.status import reset_taken_in, take_in

    if reset and source is not None:
        raise typer.BadParameter("--reset forgets taken-in data; it takes no --from file", param_hint="--reset")
    with _exits_on_price_error(1):
        lines = reset_taken_in() if reset else take_in(source, litellm_version)
    if json_out:
        print_json_line({"action": "reset" if reset else "take-in", "source": source, "messages": lines})
        return
    for line in lines:
        say(line)


LIST_CSV_FIELDS = ("model", "provider", "as_of", "source", "provider_page", "sheet", "shipped", "notes")


@prices_app.command("list")
@flushes_json_lines
def prices_list(
    prices: list[Path] = typer.Option([], "--prices", help="Your own price sheet (TOML)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per model."),
    csv_out: bool = typer.Option(False, "--csv", help="CSV on stdout, one row per model."),
) -> None:
    """Models priced by price sheets (self-hosted models and yours): provider, date and the source of each price.
    Provider models are priced from genai-prices instead (see `mmtok prices status`)."""
    from mmtok.budgets.pricing.sheets import model_rows, shipped_sheets

    one_output_format(json_out, csv_out)
    with _exits_on_price_error(2):
        rows = model_rows(tuple(prices))
    shipped = {p.resolve() for p in shipped_sheets()}
    records = [
        {
            "model": row.name,
            "provider": row.provider,
            "as_of": row.as_of.isoformat(),
            "source": row.source,
            "provider_page": row.provider_page or None,
            "sheet": str(row.sheet),
            "shipped": row.sheet.resolve() in shipped,
            "notes": row.notes or None,
            "rates": {key: str(value) for key, value in row.rates.items()},
        }
        for row in rows.values()
    ]
    if json_out:
        for record in records:
            print_json_line(record)
        return
    if csv_out:
        writer = csv_writer(LIST_CSV_FIELDS)
        for record in records:
            writer.writerow(record)
        return
    from rich.markup import escape

    columns = (
        Column("model", fold=True, min_width=14),
        Column("provider", priority=2),
        Column("as of", priority=3),
        Column("sheet", fold=True, min_width=12, priority=1),
        Column("source", fold=True, min_width=24),
    )
    cells = [
        [r["model"], r["provider"], r["as_of"], Path(r["sheet"]).name if r["shipped"] else r["sheet"], r["source"]]
        for r in records
    ]
    print_table(columns, [[escape(c) for c in row] for row in cells])
    console().print("[dim]provider models are priced from genai-prices: see `mmtok prices status`[/]")


@prices_app.command("import-litellm")
@flushes_json_lines
def prices_import_litellm(
    file: Path = typer.Argument(..., help="LiteLLM's model_prices_and_context_window.json."),
    out: Path = typer.Option(..., "--out", "-o", help="Sheet to write (TOML)."),
    provider: str = typer.Option("litellm", help="Provider name recorded in the sheet."),
    model: list[str] = typer.Option([], "--model", "-m", help="Only models matching this pattern (repeatable)."),
    as_of: str | None = typer.Option(None, help="Date the prices were read (default: today)."),
    source: str | None = typer.Option(None, help="Where the file came from (default: LiteLLM's repository)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object: the sheet written and its model count."),
) -> None:
    """Convert LiteLLM's price map into an mmtok price sheet (a second source, or rates to edit and calibrate)."""
    from mmtok.budgets.pricing.litellm import import_litellm
    from mmtok.cli.common import check_out_file

    try:
        date = dt.date.fromisoformat(as_of) if as_of else None
    except ValueError:
        raise typer.BadParameter(f"must be a date like 2026-07-24, got {as_of!r}", param_hint="--as-of") from None
    check_out_file(out)
    with _exits_on_price_error(1, writing=out):
        count = import_litellm(file, out, provider=provider, patterns=model or None, source=source, as_of=date)
    if json_out:
        print_json_line({"sheet": str(out), "models": count})
        return
    say(f"wrote {count} models to {out}")
