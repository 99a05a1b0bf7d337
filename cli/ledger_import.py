"""``mmtok ledger import OUTPUT --batch-input INPUT --ledger L``: a batch's results stored as ledger rows, so that the
proxy's reports and budgets count batch spend too (``budgets/ledger/batch_results.py``). Reached through ``mmtok
ledger`` (its PATH ``import``), which otherwise reports a ledger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from mmtok.cli.common import print_error, print_note, say

WRITE_EVERY = 512  # rows per transaction


def check_import_args(path: str, output: str | None, batch_input: Path | None, into: str | None) -> bool:
    """Whether the command is an import; the import's own arguments given to a report are a usage error."""
    if path == "import":
        for value, hint in ((output, "OUTPUT"), (batch_input, "--batch-input"), (into, "--ledger")):
            if value is None:
                raise typer.BadParameter(
                    "mmtok ledger import needs OUTPUT, --batch-input and --ledger", param_hint=hint
                )
        return True
    for value, hint in ((output, "OUTPUT"), (batch_input, "--batch-input"), (into, "--ledger")):
        if value is not None:
            raise typer.BadParameter("goes with `mmtok ledger import OUTPUT --batch-input INPUT --ledger L`",
                                     param_hint=hint)  # fmt: skip
    return False


def import_batch(output: str, batch_input: Path, into: str, prices: tuple[Any, ...], json_out: bool) -> None:
    """Pair the output with its input, write a row per request, and say what was stored and what did not pair."""
    from mmtok.budgets.ledger import open_ledger
    from mmtok.budgets.ledger.batch_results import Pairing, batch_records, check_pair

    check_pair(output, batch_input)
    pairing = Pairing()
    book = open_ledger(into)
    refused: list[str] = []
    try:
        pending = []
        for record in batch_records(output, batch_input, prices, pairing=pairing):
            pending.append(record)
            if len(pending) >= WRITE_EVERY:
                refused += _write(book, pending)
        refused += _write(book, pending)
    finally:
        book.close()
    _said(output, into, pairing, refused, json_out)


def _write(book: Any, records: list[Any]) -> list[str]:
    failed = book.write(records) or []
    records.clear()
    return [f"row {record.id}: {why}" for record, why in failed]


def _said(output: str, into: str, pairing: Any, refused: list[str], json_out: bool) -> None:
    for problem in [*pairing.problems, *refused]:
        print_error(problem)
    if pairing.unmatched:
        shown = ", ".join(pairing.unmatched[:5]) + (" ..." if len(pairing.unmatched) > 5 else "")
        print_note(f"{len(pairing.unmatched):,} result(s) in {output} answer no request of the input: {shown}")
    if pairing.no_result:
        print_note(f"{pairing.no_result:,} request(s) of the input have no result in {output}")
    stored = pairing.rows - len(refused)
    if json_out:
        say(json.dumps({"ledger": into, "rows": stored, "no_result": pairing.no_result,
                        "unmatched": pairing.unmatched, "problems": [*pairing.problems, *refused]}))  # fmt: skip
    else:
        say(f"{into}: {stored:,} row(s) from {output} (a row already there is kept once)")
    if pairing.problems or refused:
        raise typer.Exit(1)
