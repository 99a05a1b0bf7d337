"""How ``mmtok price`` reports its quotes: JSON lines, CSV, or a table at the end; errors and warnings said once each,
the same failure over many inputs said once with a count, and budget gates (--max-cost, --max-tokens) checked."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from mmtok.cli.common import (
    Column,
    console,
    csv_writer,
    err_console,
    fmt_num,
    print_error,
    print_json_line,
    print_table,
    print_warning,
    short_path,
)
from mmtok.errors import MmtokError

if TYPE_CHECKING:
    from mmtok.budgets.pricing import Quote

OUTPUT_KINDS = ("output", "output_audio", "output_image")  # as mmtok.budgets.pricing.quote says (not imported)

MODALITY_COLUMNS = ("text", "image", "audio", "video")
CSV_FIELDS = [
    "item",
    "model",
    "model_ref",
    *[f"{m}_tokens" for m in MODALITY_COLUMNS],
    "cached_tokens",
    "input_tokens",
    "output_tokens",
    "input_cost",
    "output_cost",
    "total_cost",
    "currency",
    "label",
    "complete",
    "option",
    "tier",
    "working",
    "money_source",
    "as_of",
]
REPEATS_SHOWN = 3  # the same failure on this many inputs is said each time; past that, counted and said once


class Output:
    """Where quotes go (JSON lines, CSV, or a table at the end), how many inputs failed, and the budget gates."""

    def __init__(
        self, json_out: bool, csv_out: bool, max_cost: Decimal | None = None, max_tokens: int | None = None
    ) -> None:
        self.json_out = json_out
        self.writer = csv_writer(CSV_FIELDS) if csv_out else None
        self.max_cost = max_cost
        self.max_tokens = max_tokens
        self.table: list[Quote] = []
        self.models: list[str] = []  # in the order first priced, for the table's totals
        self.warned: set[str] = set()
        self.repeats: dict[tuple[str, str], int] = {}
        self.failures = 0
        self.over_budget = 0
        self.cache_notes: list[str] = []  # a body's prompt-cache marks: written tokens and their read price

    def error(self, error: MmtokError | str, *, item: str = "", model: str = "", json: bool = True) -> None:
        self.failures += 1
        message = str(error)
        reason = message.removeprefix(f"{item}: ") if item else message
        seen = self.repeats.get((model, reason), 0)
        self.repeats[(model, reason)] = seen + 1
        if seen < REPEATS_SHOWN:
            print_error(_naming(message, item, model))
        if self.json_out and json:
            print_json_line({k: v for k, v in (("item", item), ("model", model)) if v} | {"error": message})

    def results(self, item: str, models: Sequence[str], results: Any) -> None:
        if isinstance(results, MmtokError):  # the request itself could not be read: one line, not one per model
            self.error(results, item=item)
            return
        for name, result in zip(models, results, strict=True):
            if isinstance(result, MmtokError):
                self.error(result, item=item, model=name)
                continue
            self.quote(result)

    def quote(self, quote: Quote) -> None:
        for missing in quote.missing:  # left-out parts are errors: the total is incomplete
            self.error(f"{missing} (left out of the total)", item=quote.item, model=quote.model, json=False)
        for warning in quote.warnings:
            if warning not in self.warned:
                self.warned.add(warning)
                print_warning(warning)
        self._gate(quote)
        if quote.cache is not None and quote.cache.kind != "automatic":  # automatic caching: in --json only
            self.cache_notes.append(f"{quote.item} on {quote.model}: {quote.cache.working}")
        if quote.model not in self.models:
            self.models.append(quote.model)
        if self.json_out:
            print_json_line(quote.to_dict())
        elif self.writer:
            self.writer.writerow(_csv_row(quote))
        else:
            self.table.append(quote)

    def _gate(self, quote: Quote) -> None:
        """One line per request over a budget (--max-cost, --max-tokens), and exit 1."""
        over = []
        if self.max_cost is not None and quote.total_cost > self.max_cost:
            over.append(f"${quote.total_cost:.6f} is over --max-cost ${self.max_cost}")
        tokens = quote.input_tokens + quote.output_tokens
        if self.max_tokens is not None and tokens > self.max_tokens:
            over.append(f"{tokens:,} tokens (input and output) is over --max-tokens {self.max_tokens:,}")
        if over:
            self.over_budget += 1
            self.failures += 1
            print_error(f"{quote.item} on {quote.model}: {'; '.join(over)}")

    def finish(self) -> None:
        for (model, reason), count in self.repeats.items():
            if count > REPEATS_SHOWN:
                print_error(_naming(f"{reason} (and {count - REPEATS_SHOWN:,} more inputs the same)", "", model))
        if not self.json_out and not self.writer and self.table:  # nothing priced: the error lines say why
            _print_table(self.table, self.models)
        if not self.json_out:  # beside a CSV on stdout, on stderr
            for note in dict.fromkeys(self.cache_notes):
                (err_console() if self.writer else console()).print(f"[dim]prompt cache: {_escape(note)}[/]")


def _naming(message: str, *names: str) -> str:
    """The error prefixed with the request and model it is about, unless it names them already: the same line
    whatever the number of models."""
    prefix = [name for name in names if name and name not in message]
    return ": ".join([*prefix, message])


def _csv_row(quote: Quote) -> dict[str, object]:
    return {
        "item": quote.item,
        "model": quote.model,
        "model_ref": quote.model_ref,
        **{f"{m}_tokens": quote.tokens(m) for m in MODALITY_COLUMNS},
        "cached_tokens": quote.tokens("cache_read") + quote.tokens("cache_write"),
        "input_tokens": quote.input_tokens,
        "output_tokens": quote.output_tokens,
        "input_cost": quote.input_cost,
        "output_cost": quote.output_cost,
        "total_cost": quote.total_cost,
        "currency": quote.currency,
        "label": quote.label,
        "complete": quote.complete,
        "option": quote.option,
        "tier": quote.tier,
        "working": " | ".join(ln.working for ln in quote.lines),
        "money_source": quote.source,
        "as_of": quote.as_of.isoformat(),
    }


def money(value: Decimal) -> str:
    """USD for a table: 6 decimals under $1, never a positive cost shown as 0.000000."""
    if 0 < value < Decimal("0.0000005"):
        return "<0.000001"
    return f"{value:.6f}" if value < 1 else f"{value:,.4f}"


LABEL_MARKS = {"exact": "", "documented": " d", "upper bound": " ≤", "estimate": " ~", "lower bound": " ≥"}


WORKING_MIN_WIDTH = 30  # narrower than this, the working is printed under the table, one line per quote


MODALITY_PRIORITY = {"image": 5, "text": 4, "audio": 3, "video": 2}  # left out in this order before a number is cut


def _print_table(quotes: list[Quote], models: list[str]) -> None:
    columns = [
        Column("input", fold=True, min_width=14),
        Column("model", fold=True, min_width=12),
        Column("in\ntok", numeric=True),
        *(Column(f"{m}\ntok", numeric=True, priority=MODALITY_PRIORITY[m]) for m in MODALITY_COLUMNS),
        Column("out\ntok", numeric=True, priority=6),
        Column("cost\nUSD", numeric=True),
        Column("working", fold=True, priority=1, min_width=WORKING_MIN_WIDTH),
    ]
    rows = []
    totals: dict[str, Decimal] = {}
    workings = []
    for q in quotes:
        cells = [fmt_num(q.tokens(m)) if q.tokens(m) else "" for m in MODALITY_COLUMNS]
        out = _output_cell(q)
        cost = money(q.total_cost) + LABEL_MARKS[q.label] + ("" if q.complete else " !")
        working = _working(q)  # cached tokens, the output and a request fee too
        rows.append([_escape(_shown(q.item)), q.model, fmt_num(q.input_tokens), *cells, out, cost, _escape(working)])
        workings.append((_shown(q.item), q.model, working))
        totals[q.model] = totals.get(q.model, Decimal(0)) + q.total_cost
    section = None
    if len(quotes) > len(models):
        section = len(rows)
        for name in models:
            if name in totals:
                rows.append(["[bold]total[/]", name, "", *[""] * len(MODALITY_COLUMNS), "", money(totals[name]), ""])
    dropped = print_table(columns, rows, section_at=section, note_left_out=False)
    left = [name for name in dropped if name != "working"]
    if left:
        console().print(f"[dim]left out at this width: {', '.join(left)} (every field: --json or --csv)[/]")
    if "working" in dropped:  # folded out of a narrow table: each quote's working on its own lines
        for item, model, working in workings:
            if working:
                console().print(f"[dim]{_escape(item)} · {model}:[/] {_escape(working)}")
    _print_sources(quotes)


def _output_cell(quote: Quote) -> str:
    """The output tokens, marked ≤ where they are the body's budget (an upper bound), not a count."""
    if not quote.output_tokens:
        return ""
    bound = any(ln.label == "upper bound" for ln in quote.lines if ln.modality in OUTPUT_KINDS)
    return fmt_num(quote.output_tokens) + (" ≤" if bound else "")


def _shown(item: str) -> str:
    """An input as the table names it: a URL as it is (already without secrets), a path shortened."""
    return item if item.startswith(("http://", "https://")) else short_path(item)


def _print_sources(quotes: list[Quote]) -> None:
    seen: dict[str, Quote] = {}
    for q in quotes:
        seen.setdefault(q.model, q)
    for name, q in seen.items():
        extras = ", ".join(x for x in (q.option if q.option != "standard" else "", q.tier) if x)
        console().print(
            f"[dim]{name}: {q.family or 'no media'} rules; money from {q.money_source} {q.model_ref}"
            f"{' (' + extras + ')' if extras else ''}, prices of {q.as_of}[/]"
        )
    marks = sorted({q.label for q in quotes} - {"exact"}, key=list(LABEL_MARKS).index)
    if marks:
        console().print("[dim]" + "; ".join(f"{LABEL_MARKS[m].strip()} {m}" for m in marks) + " (see the working)[/]")
    if any(not q.complete for q in quotes):
        console().print("[dim]! incomplete: a part is left out of the total (the error lines above say why)[/]")


def _working(quote: Quote) -> str:
    """Each line's working, named by its part where a request has several (a body's ``messages[0].content[1]``)."""
    own = (quote.item, "output", "cache", "request")
    return "; ".join(f"{ln.item}: {ln.working}" if ln.item not in own else ln.working for ln in quote.lines)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
