"""``mmtok calibrate``: a thin command over :mod:`mmtok.budgets.calibrate`, reading a proxy's ledger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from mmtok.cli.common import Column, console, print_error, print_note, print_table, say
from mmtok.cli.ledger import open_for_reading, report_skipped


def rule_text(params: dict[str, Any] | None) -> str:
    """A rule in a few words: its formula and parameters."""
    if not params:
        return ""
    formula = params["formula"]
    if formula == "openai-tile":
        return f"tiles {params['base_tokens']} + {params['tile_tokens']}/512px"
    if formula == "openai-patch":
        budgets = ", ".join(f"{k} {v.get('patch_budget', '-')}" for k, v in params["levels"].items())
        return f"patches x{params['multiplier']} (budget {budgets})"
    if formula == "anthropic-patches":
        return f"28px patches ({params['max_edge']} px, {params['max_tokens']} tokens)"
    if formula == "fixed":
        return f"flat {params['tokens']}"
    if formula == "gemini-tiles":
        return f"{params['tokens_per_tile']}/768px tile"
    if formula == "tiles":
        return f"{params['base_tokens']} + {params['tile_tokens']}/{params['tile_px']}px (fit {params['fit_px']})"
    if "levels" in params:
        return f"{formula} " + ", ".join(f"{k} {v}" for k, v in params["levels"].items())
    return formula


def _sizes(text: str | None) -> tuple[tuple[int, int], ...] | None:
    if text is None:
        return None
    found = []
    for item in text.split(","):
        width, _, height = item.strip().lower().partition("x")
        if not (width.isdigit() and height.isdigit() and 0 < int(width) <= 8192 and 0 < int(height) <= 8192):
            raise typer.BadParameter(f"expected sizes like 512x512,1920x1080, got {item!r}", param_hint="--sizes")
        found.append((int(width), int(height)))
    return tuple(found)


def _measure(path: str, models: list[str], sizes: Any, upstreams: dict[str, str | None], prices: list[Path]) -> None:
    from mmtok.budgets.ledger import open_ledger
    from mmtok.budgets.proxy.measure import DEFAULT_SIZES, measure, provider_for

    book = open_ledger(path)
    try:
        for model in models:
            base = upstreams[provider_for(model, prices)]
            rows = measure(model, book, sizes or DEFAULT_SIZES, base_url=base, prices=tuple(prices))
            failed = [r for r in rows if r.outcome != "ok"]
            print_note(f"{model}: {len(rows) - len(failed)} of {len(rows)} counts recorded in {book.where}")
            for row in failed[:3]:
                print_error(f"{model}: {row.message}")
    finally:
        book.close()


MEASURE = typer.Option(
    [], "--measure", help="First count photos on this model's free token-counting endpoint (needs its key)."
)
SIZES = typer.Option(None, "--sizes", help="Photo sizes to measure, e.g. 512x512,1920x1080.")
SHEET_OUT = typer.Option(..., "--out", "-o", help="The calibration sheet to write (TOML; --prices takes it).")
MEASURE_OPENAI = typer.Option(None, "--openai-upstream", help="OpenAI base URL for --measure.")
MEASURE_ANTHROPIC = typer.Option(None, "--anthropic-upstream")
MEASURE_GEMINI = typer.Option(None, "--gemini-upstream")


def calibrate(
    path: str = typer.Argument(..., help="The proxy's ledger: an SQLite file or a SQLAlchemy URL."),
    out: Path = SHEET_OUT,
    prices: list[Path] = typer.Option([], "--prices", help="Price sheets the calls were priced with."),
    json_out: bool = typer.Option(False, "--json", help="The fits as one JSON object."),
    measure: list[str] = MEASURE,
    sizes: str | None = SIZES,
    openai_upstream: str | None = MEASURE_OPENAI,
    anthropic_upstream: str | None = MEASURE_ANTHROPIC,
    gemini_upstream: str | None = MEASURE_GEMINI,
) -> None:
    """Fit each model's media rule to what its calls were billed (the rule's own parameters, or a new rule family
    where none fits), say where the bills disagree with the documented rule and by how much, and write the fitted
    rules as a dated price sheet for --prices. With --measure, photos of chosen sizes are first counted on the
    provider's free counting endpoint (key from OPENAI_API_KEY, ANTHROPIC_API_KEY or GEMINI_API_KEY) and recorded
    in the ledger."""
    from mmtok.budgets.calibrate import calibrate as fit
    from mmtok.budgets.calibrate import write_sheet
    from mmtok.cli.common import check_out_file

    check_out_file(out, (".toml",))
    chosen = _sizes(sizes)
    if measure:
        upstreams = {"openai": openai_upstream, "anthropic": anthropic_upstream, "gemini": gemini_upstream}
        _measure(path, measure, chosen, upstreams, prices)
    book = open_for_reading(path)
    calibration = fit(book.records(), prices=tuple(prices), source=book.where)
    if not calibration.models:
        print_error(f"{book.where}: no billed calls with images to calibrate from")
        report_skipped(book)
        raise typer.Exit(1)
    write_sheet(calibration, out)
    if json_out:
        models = [m.to_dict() for m in calibration.models]
        say(json.dumps({"sheet": str(out), "models": models, "skipped": dict(calibration.skipped)}, default=str))
    else:
        _print_fits(calibration)
        console().print(f"wrote {out} (use it with --prices)", markup=False, highlight=False)
    report_skipped(book)  # malformed rows, named; exit 1 after the rest was reported


def _print_fits(calibration: Any) -> None:
    """A row per model (documented rule, how it met the bills, the fitted rule), then a line each in words."""
    from mmtok.budgets.calibrate import describe_fit

    columns = [Column("model"), Column("calls", True), Column("documented rule", fold=True), Column("exact", True),
               Column("mean error", True), Column("fitted rule", fold=True), Column("fitted exact", True),
               Column("overhead", priority=1)]  # fmt: skip
    rows = []
    for m in calibration.models:
        doc, fitted = m.documented, m.fitted
        overhead = "" if m.overhead is None else f"+{m.overhead.per_request}/req +{m.overhead.per_message}/msg"
        new = " (new rule)" if m.new_family else ""
        rows.append([m.model, str(m.calls), rule_text(doc.params if doc else None),
                     f"{doc.exact}/{doc.total}" if doc else "", f"{doc.mean_abs_error:.1f}" if doc else "",
                     rule_text(fitted.params if fitted else None) + new,
                     f"{fitted.exact}/{fitted.total}" if fitted else "", overhead])  # fmt: skip
    print_table(columns, rows)
    for m in calibration.models:
        say(f"{m.model}: {describe_fit(m)}")
    for reason, count in sorted(calibration.skipped.items()):
        print_note(f"{count} call(s) left out: {reason}")
