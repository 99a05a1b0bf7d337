"""``mmtok price`` and ``mmtok models``: what requests cost on each model, and what each model takes and costs."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from mmtok.cli.common import (
    Column,
    console,
    csv_writer,
    flushes_json_lines,
    fmt_num,
    max_pixels_option,
    one_output_format,
    print_error,
    print_json_line,
    print_table,
    print_warning,
    progress,
    resolve_max_pixels,
    short_path,
)
from mmtok.errors import MmtokError, PriceError

if TYPE_CHECKING:
    from mmtok.budgets.pricing import Quote

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


@flushes_json_lines
def price(
    paths: list[Path] = typer.Argument(None, help="Files or folders; each file is one request (see --one-request)."),
    model: list[str] = typer.Option(["gpt-4o"], "--model", "-m", help="Model to price on (repeatable)."),
    text: str | None = typer.Option(None, "--text", help="The request's text (the prompt of every request)."),
    attach: list[Path] = typer.Option([], "--attach", "-a", help="Attach this file to every request (repeatable)."),
    one_request: bool = typer.Option(False, "--one-request", help="All inputs, attachments and text form one call."),
    detail: str | None = typer.Option(
        None, help="OpenAI: low|high|original|auto; Gemini media_resolution: low|medium|high|ultra_high."
    ),
    at: str | None = typer.Option(None, "--at", help="Prices on this date (YYYY-MM-DD; default today)."),
    batch: bool = typer.Option(False, "--batch", help="The provider's batch rates."),
    tier: str | None = typer.Option(None, "--tier", help="Service tier: flex or priority."),
    output_tokens: int = typer.Option(0, "--output-tokens", min=0, help="Output tokens of each request."),
    output_audio: bool = typer.Option(False, "--output-audio", help="The output is audio: audio-output rate."),
    cached: int = typer.Option(0, "--cached-input-tokens", min=0, help="More input tokens read from the cache."),
    cache_write: int = typer.Option(0, "--cache-write-tokens", min=0, help="More input tokens written to the cache."),
    prices: list[Path] = typer.Option([], "--prices", help="Your own price sheet (TOML); its rows override."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per request and model on stdout."),
    csv_out: bool = typer.Option(False, "--csv", help="CSV on stdout."),
    max_pixels: int | None = max_pixels_option(),
) -> None:
    """What each request costs on each model: tokens per attachment and modality, the rate applied and why, the
    working, and the price source with its date. Token files (.safetensors) are priced as their sequences."""
    from mmtok.budgets.pricing import Options, price_requests

    one_output_format(json_out, csv_out)
    limit = resolve_max_pixels(max_pixels)
    if not paths and text is None and not attach:
        raise typer.BadParameter("give files or folders to price, --attach files, or --text")
    try:
        options = Options.of(
            detail=detail,
            at=at,
            batch=batch,
            tier=tier,
            output_tokens=output_tokens,
            output_audio=output_audio,
            cached_input_tokens=cached,
            cache_write_tokens=cache_write,
        )
        _check_sheets(prices)
    except PriceError as e:
        print_error(e)
        raise typer.Exit(2) from None
    out = _Output(json_out, csv_out)
    models = _usable_models(model, prices, options, out)
    try:  # read once, with the pixel limit; a file that cannot be read fails every request: one line, then stop
        attached = [_read(a, limit) for a in attach]
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(1) from None
    requests = _requests(paths or [], attached, attach, one_request, limit, out)
    for item, results in price_requests(requests, models, options, text=text, prices=prices):
        out.results(item, models, results)
    out.finish(models)
    if out.failures:
        raise typer.Exit(1)


def _check_sheets(prices: list[Path]) -> None:
    """A bad sheet is one line, not one per model."""
    from mmtok.budgets.sheets import sheets

    sheets(tuple(prices))


def _usable_models(names: list[str], prices: list[Path], options: Any, out: _Output) -> list[str]:
    """The models that can be priced; an unknown one (or one without the asked-for prices) is one line and the
    others go on. None usable is a usage error."""
    from mmtok.budgets.pricing import rate_card, resolve

    usable = []
    for name in names:
        try:
            rate_card(resolve(name, prices), options.at, options.option)
            usable.append(name)
        except PriceError as e:
            out.error(e, model=name)
    if not usable:
        raise typer.Exit(2)
    return usable


def _requests(
    paths: list[Path], attached: list[object], attach: list[Path], one_request: bool, limit: int, out: _Output
) -> Iterator[tuple[str, list]]:
    """Each file one request (with the attachments), or all of them one request; unreadable files are one line
    each and left out."""
    from mmtok.budgets.pricing import file_requests

    found = list(file_requests(paths))  # walked first, so the bar has a total
    files = []
    for label, item in progress(found, "pricing"):
        try:
            if isinstance(item, MmtokError):
                raise item
            read = _read(item[0], limit)
        except MmtokError as e:
            out.error(e, json=False)
            continue
        if one_request:
            files.append(read)
        else:
            yield label, [read, *attached]
    if one_request:
        yield "request", [*files, *attached]
    elif not paths:
        yield ("<text>" if not attach else str(attach[0])), attached


class _Output:
    """Where quotes go (JSON lines, CSV, or a table at the end) and how many inputs failed."""

    def __init__(self, json_out: bool, csv_out: bool) -> None:
        self.json_out = json_out
        self.writer = csv_writer(CSV_FIELDS) if csv_out else None
        self.table: list[Quote] = []
        self.warned: set[str] = set()
        self.failures = 0

    def error(self, error: MmtokError, *, item: str = "", model: str = "", json: bool = True) -> None:
        self.failures += 1
        print_error(_naming(error, item, model))
        if self.json_out and json:
            print_json_line({k: v for k, v in (("item", item), ("model", model)) if v} | {"error": str(error)})

    def results(self, item: str, models: list[str], results: Any) -> None:
        if isinstance(results, MmtokError):  # the request itself could not be read: one line, not one per model
            self.error(results, item=item)
            return
        for name, result in zip(models, results, strict=True):
            if isinstance(result, MmtokError):
                self.error(result, item=item, model=name)
                continue
            self.failures += bool(result.missing)
            _report(result, self.warned)
            if self.json_out:
                print_json_line(result.to_dict())
            elif self.writer:
                self.writer.writerow(_csv_row(result))
            else:
                self.table.append(result)

    def finish(self, models: list[str]) -> None:
        if not self.json_out and not self.writer and self.table:  # nothing priced: the error lines say why
            _print_table(self.table, models)


def _read(path: str | Path, max_pixels: int) -> object:
    """A media file read from its headers (with the pixel limit); a token file stays a path (its sequences are
    its attachments)."""
    import mmtok

    if str(path).endswith(".safetensors"):
        return path
    return mmtok.load(path, max_pixels=max_pixels)


def _naming(error: MmtokError, *names: str) -> str:
    """The error prefixed with the request and model it is about, unless it names them already: the same line
    whatever the number of models."""
    message = str(error)
    prefix = [name for name in names if name and name not in message]
    return ": ".join([*prefix, message])


def _report(quote: Quote, warned: set[str]) -> None:
    """Left-out attachments are errors (the total is incomplete); warnings are said once."""
    for missing in quote.missing:
        print_error(f"{missing} (left out of the total)")
    for warning in quote.warnings:
        if warning not in warned:
            warned.add(warning)
            print_warning(warning)


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


LABEL_MARKS = {"exact": "", "documented": " d", "upper bound": " ≤", "estimate": " ~"}


WORKING_MIN_WIDTH = 30  # narrower than this, the working is printed under the table, one line per quote


def _print_table(quotes: list[Quote], models: list[str]) -> None:
    columns = [
        Column("input", fold=True, min_width=14),
        Column("model", fold=True, min_width=14),
        *(Column(f"{m}\ntok", numeric=True) for m in MODALITY_COLUMNS),
        Column("cost\nUSD", numeric=True),
        Column("working", fold=True, priority=1, min_width=WORKING_MIN_WIDTH),
    ]
    rows = []
    totals: dict[str, Decimal] = {}
    workings = []
    for q in quotes:
        cells = [fmt_num(q.tokens(m)) if q.tokens(m) else "" for m in MODALITY_COLUMNS]
        cost = money(q.total_cost) + LABEL_MARKS[q.label] + ("" if q.complete else " !")
        working = "; ".join(ln.working for ln in q.lines)  # cached tokens, the output and a request fee too
        rows.append([_escape(short_path(q.item)), q.model, *cells, cost, _escape(working)])
        workings.append((short_path(q.item), q.model, working))
        totals[q.model] = totals.get(q.model, Decimal(0)) + q.total_cost
    section = None
    if len(quotes) > len(models):
        section = len(rows)
        for name in models:
            if name in totals:
                rows.append(["[bold]total[/]", name, *[""] * len(MODALITY_COLUMNS), money(totals[name]), ""])
    dropped = print_table(columns, rows, section_at=section, note_left_out=False)
    if "working" in dropped:  # folded out of a narrow table: each quote's working on its own lines
        for item, model, working in workings:
            if working:
                console().print(f"[dim]{_escape(item)} · {model}:[/] {_escape(working)}")
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
        console().print("[dim]! incomplete: an attachment the model does not take is left out (see the errors)[/]")


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


MODEL_CSV_FIELDS = (
    "model",
    "provider",
    "family",
    "takes",
    "outputs",
    "text",
    "image_rule",
    "image_label",
    "input_per_mtok",
    "output_per_mtok",
    "context_window",
    "retired",
    "rule_source",
    "rule_read",
    "price_error",
)


@flushes_json_lines
def models(
    provider: str | None = typer.Option(
        None, help="Only this provider (openai, anthropic, google, xai, mistral, ...)."
    ),
    modality: str | None = typer.Option(None, help="Only models that take this modality (image, audio, video)."),
    prices: list[Path] = typer.Option([], "--prices", help="Your own price sheet (TOML)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per model."),
    csv_out: bool = typer.Option(False, "--csv", help="CSV on stdout, one row per model."),
) -> None:
    """Priced models, the LLMs a request is sent to: what each takes, its media rule and label, prices per 1M
    tokens, context, retirement. (mmtok's own networks, the tokenizers and critics it runs, are
    `mmtok.list_tokenizers()` and `mmtok.list_models()` in Python.)"""
    from mmtok.budgets.listing import model_rows

    one_output_format(json_out, csv_out)
    if modality is not None and modality not in ("text", "image", "audio", "video"):
        raise typer.BadParameter(f"must be text, image, audio or video, got {modality!r}", param_hint="--modality")
    try:
        rows = model_rows(provider, modality, prices)
    except PriceError as e:
        print_error(e)
        raise typer.Exit(2) from None
    if not rows:
        asked = " ".join(
            f"{flag} {value}" for flag, value in (("--provider", provider), ("--modality", modality)) if value
        )
        print_error(f"no models match {asked or 'the price data'} (see `mmtok models`)")
        raise typer.Exit(2)
    if json_out:
        for row in rows:
            print_json_line(row)
    elif csv_out:
        _model_csv(rows)
    else:
        _model_table(rows)


def _model_csv(rows: list[dict[str, Any]]) -> None:
    writer = csv_writer(MODEL_CSV_FIELDS)
    for r in rows:
        rule = r["rules"].get("image") or {}
        writer.writerow(
            {
                **r,
                "takes": " ".join(r["takes"]),
                "outputs": " ".join(r.get("outputs") or []),
                "image_rule": rule.get("formula"),
                "image_label": rule.get("label"),
                "input_per_mtok": (r["prices"] or {}).get("input"),
                "output_per_mtok": (r["prices"] or {}).get("output"),
            }
        )


def _model_table(rows: list[dict[str, Any]]) -> None:
    columns = (
        Column("model", fold=True, min_width=16),
        Column("provider", priority=3),
        Column("takes", priority=5),
        Column("image rule", fold=True, priority=1, min_width=16),
        Column("in $/1M", numeric=True),
        Column("out $/1M", numeric=True),
        Column("context", numeric=True, priority=4),
        Column("retired", priority=6),
    )
    cells = []
    for r in rows:
        rule = r["rules"].get("image")
        cells.append(
            [
                r["model"],
                r["provider"],
                ",".join(m for m in r["takes"] if m != "text"),
                f"{rule['formula']} ({rule['label']})" if rule else "",
                r["prices"].get("input", "?") if r["prices"] else "?",
                r["prices"].get("output", "") if r["prices"] else "",
                fmt_num(r["context_window"]) if r["context_window"] else "",
                r["retired"] or "",
            ]
        )
    print_table(columns, [[_escape(cell) for cell in row] for row in cells])
    if any(not r["prices"] for r in rows):
        console().print("[dim]? no price known (see price_error in --json)[/]")
