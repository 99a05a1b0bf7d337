"""``mmtok ledger``: a thin command over :mod:`mmtok.budgets.ledger` and its report
(:mod:`mmtok.budgets.ledger.report`).

A malformed row is skipped and named (its id and column) on stderr, the rest reported, and the command ends with
exit code 1; ``--csv`` piped into a reader that leaves early (``| head -1``) ends quietly."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from mmtok.cli.common import Column, one_output_format, print_error, print_note, print_table, say


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
    path: str = typer.Argument(..., help="The proxy's ledger: an SQLite file or a SQLAlchemy URL; or import."),
    output: str | None = typer.Argument(None, metavar="[OUTPUT]", help="import: a batch's output file."),
    batch_input: Path | None = typer.Option(None, "--batch-input", help="import: the batch input OUTPUT answers."),
    into: str | None = typer.Option(None, "--ledger", help="import: the ledger to store the batch's rows in."),
    prices: list[Path] = typer.Option([], "--prices", help="import: price sheets to price the rows with."),
    json_out: bool = typer.Option(False, "--json", help="The report as one JSON object."),
    csv_out: bool = typer.Option(False, "--csv", help="One CSV row per call."),
    html: Path | None = typer.Option(None, "--html", help="Write an HTML report with figures to this folder."),
    since: str | None = typer.Option(None, "--since", help="Only calls from this time on (2026-12-01, ISO)."),
    by: str | None = typer.Option(None, "--by", help="Spend per key, model, day or tag:NAME (e.g. tag:team)."),
) -> None:
    """Report a proxy's ledger: spend per day and model, savings from shrink, and predicted against billed tokens
    per model and modality (errors and worst cases); with --by, spend per key, model, day or tag. `mmtok ledger
    import OUTPUT --batch-input INPUT --ledger L` stores a batch's results as rows (cli/ledger_import.py)."""
    from mmtok.budgets.ledger import report
    from mmtok.cli.ledger_import import check_import_args, import_batch

    if check_import_args(path, output, batch_input, into):
        import_batch(output or "", batch_input or Path(), into or "", tuple(prices), json_out)
        return

    one_output_format(json_out, csv_out)
    since = _checked_since(since)
    by = _checked_by(by)
    book = open_for_reading(path)
    records = book.records(since)
    with _quiet_when_the_reader_leaves():
        if csv_out and by is None:
            report.write_csv(records, sys.stdout)
        else:
            _report(book, list(records), json_out, csv_out, html, by)
    report_skipped(book)


def _report(book: Any, rows: list[Any], json_out: bool, csv_out: bool, html: Path | None, by: str | None) -> None:
    from mmtok.budgets.ledger import report

    if html is not None:
        page = report.write_html(rows, html, book.where, book.skipped)
        if not json_out and not csv_out:
            print_note(f"wrote {page}")
    summary = report.summarise(rows, book.where, book.skipped, by=(by,) if by else ())
    if csv_out:
        report.write_rows_csv(summary["by"][by], GROUP_FIELDS, sys.stdout)
    elif json_out:
        say(json.dumps(summary, default=str))
    elif by is not None:
        _print_groups(summary, by)
    else:
        _print_summary(summary)


GROUP_FIELDS = ("group", "calls", "refused", "spend", "billed", "predicted", "saved")


def _checked_by(by: str | None) -> str | None:
    from mmtok.budgets.ledger.report import check_grouping

    if by is None:
        return None
    try:
        return check_grouping(by)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--by") from None


def report_skipped(book: Any) -> None:
    """Each malformed row the last reading passed over, one line each on stderr; exit 1 where there were any."""
    for bad in book.skipped:
        print_error(f"{book.where}: {bad}")
    if book.skipped:
        raise typer.Exit(1)


@contextlib.contextmanager
def _quiet_when_the_reader_leaves() -> Iterator[None]:
    """A reader that closes the pipe early (``| head -1``) ends the output, quietly: what was left unsaid goes to
    /dev/null (Python's own advice for SIGPIPE) and the command ends as it would have."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def open_for_reading(path: str) -> Any:
    """The ledger at ``path``, for reading."""
    from mmtok.budgets.ledger import open_ledger

    if "://" not in path and not Path(path).expanduser().is_file():
        raise typer.BadParameter(f"{path}: no such ledger file", param_hint="PATH")
    return open_ledger(path, read_only=True)


def cell(text: str) -> str:
    """Text from the ledger as a table cell: its control characters escaped and no markup read in it (a model or
    tag is what a client sent)."""
    from rich.markup import escape

    from mmtok.cli.common import printable

    return escape(printable(str(text)))


def _print_groups(summary: dict[str, Any], by: str) -> None:
    """Spend per group, at any width (a key's fingerprint and a tag's value are never cut)."""
    found = summary["by"][by]
    head = f"{summary['ledger']}: {summary['calls']} calls in {len(found)} group(s) by {by}"
    say(f"{head}; spend ${summary['spend_usd']}")
    columns = [
        Column(by.removeprefix("tag:"), fold=True),
        Column("calls", True),
        Column("refused", True, priority=1),
        Column("spend $", True),
        Column("predicted $", True, priority=2),
        Column("saved $", True, priority=3),
    ]
    rows = [
        [cell(g["group"]), str(g["calls"]), str(g["refused"]), g["spend"], g["predicted"], g["saved"]] for g in found
    ]
    print_table(columns, rows)


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
            [cell(s["day"]), cell(s["model"]), str(s["calls"]), str(s["refused"]), s["spend"], s["saved"]]
            for s in summary["spend"]
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
                cell(a["model"]),
                cell(a["modality"]),
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
