"""``mmtok shrink``'s table: per input and model, tokens and cost before and after, the saving, what was done and
each measure; a footer with the bars and where the files went."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from mmtok.cli.common import Column, console, err_console, fmt_num, print_table, short_path

if TYPE_CHECKING:
    from mmtok.budgets.shrink import ShrinkResult

DONE_MIN_WIDTH = 30  # narrower than this, what was done is printed under the table, one line per result


def print_shrink_table(results: list[ShrinkResult], urls: dict[Path, str] | None = None) -> None:
    """One row per input, its models as sub-rows under it (tokens, cost after, saving, what happened); what was done
    and measured in a column where it fits, else on lines under the table; a total for the run."""
    from mmtok.cli.price import money

    def shown(source: Path) -> str:  # a URL's copy is named by its URL
        return (urls or {}).get(source) or short_path(source)

    columns = [
        Column("input · model", fold=True, min_width=24),
        Column("tokens", numeric=True),
        Column("USD", numeric=True, priority=2),
        Column("saving", numeric=True),
        Column("result"),
        Column("done", fold=True, priority=1, min_width=DONE_MIN_WIDTH),
    ]
    rows: list[list[str]] = []
    last = None
    for r in results:
        if r.source != last:
            rows.append([_escape(shown(r.source)), "", "", "", "", ""])
            last = r.source
        cost = money(r.after.total_cost)
        rows.append(["  " + _escape(r.model), _tokens(r), cost, _saving(r), _status(r), _escape(_done(r))])
    before = sum((r.before.total_cost for r in results), Decimal(0))
    after = sum((r.after.total_cost for r in results), Decimal(0))
    tokens_before, tokens_after = sum(r.tokens_before for r in results), sum(r.tokens_after for r in results)
    saved = _share(1 - float(after / before)) if before else ""
    inputs = len({r.source for r in results})
    total = f"{fmt_num(tokens_before)}→{fmt_num(tokens_after)}"
    rows.append([f"[bold]total[/] ({inputs} × {len({r.model for r in results})})", total, money(after), saved, "", ""])
    dropped = print_table(columns, rows, section_at=len(rows) - 1, note_left_out=False)
    if "done" in dropped:  # folded out of a narrow table: each result's working under it, by input
        last = None
        for r in results:
            if r.source != last:
                console().print(f"[dim]{_escape(shown(r.source))}[/]")
                last = r.source
            cost = f"USD {money(r.before.total_cost)} -> {money(r.after.total_cost)}; " if "USD" in dropped else ""
            console().print(f"  [dim]{_escape(r.model)}:[/] {cost}{_escape(_done(r))}")
    console().print(
        f"total: {fmt_num(tokens_before)} -> {fmt_num(tokens_after)} tokens, USD {money(before)} -> {money(after)}"
        f"{f' ({_in_words(saved)})' if saved else ''}, {inputs} input{'s' if inputs != 1 else ''}, "
        f"{len(results)} result{'s' if len(results) != 1 else ''}"
    )
    _footer(results)


def _tokens(r: ShrinkResult) -> str:
    text = f"{fmt_num(r.tokens_before)}→{fmt_num(r.tokens_after)}"
    if r.seconds_before is not None and r.kind == "audio":
        text += f"\n{r.seconds_before:.1f}→{r.seconds_after:.1f} s"
    return text


def _saving(r: ShrinkResult) -> str:
    return _share(r.saving)


def _share(saving: float) -> str:
    """A saving as the table shows it: 62%, or +800% where the output costs more (a sliced page's pieces)."""
    return f"{saving:.0%}" if saving >= 0 else f"+{-saving:.0%}"


def _in_words(share: str) -> str:
    return f"{share.lstrip('+')} more" if share.startswith("+") else f"{share} saved"


def _status(r: ShrinkResult) -> str:
    if r.status == "sliced":
        return f"{len(r.pieces)} pieces"
    return r.status


def _done(r: ShrinkResult) -> str:
    """What was done, measured, and where it is: one line for people."""
    from mmtok.budgets.shrink.image import ESTIMATED_VIEW_NOTE

    parts = [r.action]
    measures = _measures(r)
    if measures:
        estimated = any(ESTIMATED_VIEW_NOTE in note for note in r.notes)  # Gemini 3: no internal size is published
        parts.append(f"{measures} at an estimated view" if estimated else measures)
    if r.detail and r.status not in ("kept", "converted"):
        parts.append(f"send with {r.detail_name}={r.detail}")
    if r.status in ("lossless", "re-encoded") or (r.kind == "image" and r.bytes_after != r.bytes_before):
        parts.append(f"{fmt_num(r.bytes_before)} -> {fmt_num(r.bytes_after)} bytes")
    if r.same_file_as:
        parts.append(f"the same file as {r.same_file_as}'s, {r.path.name}")
    return "; ".join(parts)


def _measures(r: ShrinkResult) -> str:
    shown = []
    for metric, value in r.measures.items():
        if value is not None:
            shown.append(f"{metric} {value:.3f}")
        elif r.reasons.get(metric, "").startswith("no text found"):
            shown.append(f"{metric} n/a (no text found)")
    return ", ".join(shown)


def _footer(results: list[ShrinkResult]) -> None:
    from mmtok.budgets.shrink.ocr import DETECTOR

    folders = sorted({short_path(r.path.parent) for r in results})
    bars = sorted({b for r in results for b in r.bars.values()})
    console().print(f"[dim]bars: {', '.join(bars) or 'none'}; written to {_escape(', '.join(folders))}[/]")
    if any(r.reasons.get("ocr", "").startswith("no text found") for r in results):
        console().print(f"[dim]ocr n/a: no text found by {DETECTOR}[/]")
    for status, said in (("kept", "kept as they were"), ("converted", "converted to a file format the provider takes")):
        count = sum(r.status == status for r in results)
        if count:
            err_console().print(f"[dim]{count} of {len(results)} {said} (each says why, above)[/]")
    shared = sum(r.same_file_as is not None for r in results)
    if shared:
        err_console().print(f"[dim]{shared} of {len(results)} share a file written for another model[/]")


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
