"""``mmtok ledger``: a thin command over :mod:`mmtok.budgets.ledger` and its report
(:mod:`mmtok.budgets.proxy.report`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from mmtok.cli.common import Column, one_output_format, print_note, print_table, say


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
    book = open_for_reading(path)
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


def open_for_reading(path: str) -> Any:
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
