"""``mmtok price`` on a batch file: one quote for the file (per-model totals at batch rates, the standard cost and the
discount beside them), a line per request on ``--json`` / ``--csv``, the gates on the whole file (or each line with
``--per-line``), the provider's file limits said before anything is priced, and each bad line named by its number."""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from mmtok.cli.common import (
    Column,
    console,
    fmt_num,
    print_error,
    print_json_line,
    print_table,
    print_warning,
    progress_bar,
    progress_counter,
    say,
)
from mmtok.cli.quotes import money

ERRORS_SHOWN = 20  # bad lines said one by one; past that, counted (every one is in --json)


@dataclass
class Gates:
    """--max-cost and --max-tokens, on the whole file or (``per_line``) on each request."""

    max_cost: Decimal | None = None
    max_tokens: int | None = None
    per_line: bool = False
    failures: list[str] = field(default_factory=list)

    def line(self, result: Any) -> None:
        if self.per_line:
            self._check(f"line {result.number} ({result.custom_id}) on {result.model}", result.cost,
                        result.input_tokens + result.output_tokens)  # fmt: skip

    def file(self, label: str, quote: Any) -> None:
        if not self.per_line:
            for total in quote.totals.values():
                self._check(f"{label} on {total.model}", total.cost, total.input_tokens + total.output_tokens)

    def _check(self, what: str, cost: Decimal, tokens: int) -> None:
        over = []
        if self.max_cost is not None and cost > self.max_cost:
            over.append(f"${cost:.6f} at batch rates is over --max-cost ${self.max_cost}")
        if self.max_tokens is not None and tokens > self.max_tokens:
            over.append(f"{tokens:,} tokens (input and output) is over --max-tokens {self.max_tokens:,}")
        if over:
            self.failures.append(f"{what}: {'; '.join(over)}")


class _Shown:
    """Where a batch's results go as they come: JSON lines, CSV rows (in ``mmtok price``'s columns, the request
    named ``FILE line N (custom_id)``), and the failures said on stderr."""

    def __init__(self, label: str, json_out: bool, writer: Any, gates: Gates) -> None:
        self.label, self.json_out, self.writer, self.gates = label, json_out, writer, gates
        self.errors = 0

    def result(self, result: Any) -> None:
        from mmtok.budgets.pricing.batch import LinePrice

        if isinstance(result, LinePrice):
            self.gates.line(result)
        else:
            self.errors += 1
            if self.errors <= ERRORS_SHOWN:
                print_error(f"{self.label}: {result}")
        if self.json_out:
            print_json_line(_json_row(self.label, result))
        elif self.writer is not None:
            self.writer.writerow(_csv_row(self.label, result))


def _json_row(label: str, result: Any) -> dict[str, Any]:
    from mmtok.budgets.pricing.batch import LinePrice

    if isinstance(result, LinePrice):
        return {"item": label, **result.to_dict()}
    return {"item": label, "line": result.number, "custom_id": result.custom_id,
            "model": getattr(result, "model", ""), "error": str(result)}  # fmt: skip


def _csv_row(label: str, result: Any) -> dict[str, Any]:
    from mmtok.budgets.pricing.batch import LinePrice

    item = f"{label} line {result.number}" + (f" ({result.custom_id})" if result.custom_id else "")
    if not isinstance(result, LinePrice):
        return {"item": item, "model": getattr(result, "model", ""), "complete": False, "working": f"error: {result}"}
    tokens = result.tokens
    return {
        "item": item, "model": result.model, "model_ref": result.model_ref,
        **{f"{m}_tokens": tokens.get(m, 0) for m in ("text", "image", "audio", "video")},
        "cached_tokens": tokens.get("cache_read", 0) + tokens.get("cache_write", 0),
        "input_tokens": result.input_tokens, "output_tokens": result.output_tokens,
        "input_cost": result.input_cost, "output_cost": result.output_cost, "total_cost": result.cost,
        "currency": "USD", "label": result.label, "complete": result.complete, "option": result.option,
        "working": "; ".join(result.missing), "money_source": result.money_source, "as_of": result.as_of,
    }  # fmt: skip


def price_batch_file(
    label: str, path: Path, models: list[str], gates: Gates, json_out: bool, writer: Any, **pricing: Any
) -> bool:
    """Price one batch file on its requests' own models and ``models``; True where all went well (no bad line,
    no limit broken, no gate passed)."""
    from mmtok.budgets.pricing.batch import BatchQuote, LineQuoter, add_result, default_workers, finish, iter_batch
    from mmtok.request.batch import open_batch

    batch = open_batch(path)
    survey = batch.survey()
    for problem in survey.problems:  # before anything is priced: the provider would refuse the file
        print_error(f"{label}: {problem}")
    quote = BatchQuote(label, batch.format, batch.provider, survey.size_bytes, limits=list(survey.problems))
    quoter = LineQuoter(**pricing)
    shown = _Shown(label, json_out, writer, gates)
    with _requests_bar(survey.requests, f"pricing {path.name}") as advance:
        for result in iter_batch(batch, models, quoter, workers=default_workers(survey.requests)):
            before = quote.requests
            add_result(quote, batch, result, keep=False)
            shown.result(result)
            advance(quote.requests - before)
    for problem in quote.limits[len(survey.problems) :]:
        print_error(f"{label}: {problem}")
    finish(quote)
    gates.file(label, quote)
    for failure in gates.failures:
        print_error(failure)
    if shown.errors > ERRORS_SHOWN:
        print_error(f"{label}: {shown.errors - ERRORS_SHOWN:,} more line(s) not priced (--json names each)")
    _summary(label, quote, json_out, writer is not None)
    return quote.ok and not gates.failures


@contextlib.contextmanager
def _requests_bar(requests: int | None, description: str) -> Iterator[Callable[[int], None]]:
    """``advance(n)`` for the requests priced: a bar to the file's request count where the first pass counted them
    (JSON Lines), else a count of the requests so far (a JSON document is counted only by reading it)."""
    if requests is not None:
        with progress_bar(requests, description) as advance:
            yield advance
        return
    done = [0]
    with progress_counter(description) as update:

        def advance(n: int = 1) -> None:
            done[0] += n
            update(done[0], None)

        yield advance


def _summary(label: str, quote: Any, json_out: bool, csv_out: bool) -> None:
    """The file's quote: a JSON line, nothing more on CSV (the rows are the lines), or a table per model."""
    if json_out:
        print_json_line({"item": label, "batch": quote.to_dict()})
        return
    if csv_out:
        return
    for warning in quote.warnings:
        print_warning(f"{label}: {warning}")
    columns = [Column("model", fold=True), Column("requests", True), Column("input\ntokens", True),
               Column("output\ntokens ≤", True), Column("batch\nUSD", True), Column("standard\nUSD", True),
               Column("saved", True, priority=1)]  # fmt: skip
    rows = []
    for t in quote.totals.values():
        share = f"{t.discount / t.standard_cost:.0%}" if t.standard_cost else ""
        notes = [w for w, on in (("standard rates", t.option != "batch"), ("compared", not t.own)) if on]
        rows.append([t.model + (f" ({', '.join(notes)})" if notes else ""), fmt_num(t.requests),
                     fmt_num(t.input_tokens), fmt_num(t.output_tokens), money(t.cost), money(t.standard_cost),
                     share])  # fmt: skip
    if rows:
        print_table(columns, rows)
    from mmtok.request.batch import FORMAT_NAMES

    failed = len(quote.errors)
    text = (f"{label}: {FORMAT_NAMES[quote.format]}, {quote.requests:,} request(s), {failed:,} not priced; "
            f"${money(quote.total_cost)} at batch rates, ${money(quote.standard_cost)} at standard rates (saves "
            f"${money(quote.discount)}) on the requests' own models; output at each request's bound")  # fmt: skip
    for line in textwrap.wrap(text, console().width, break_long_words=False, break_on_hyphens=False):
        say(line)
