"""``mmtok calibrate``: a thin command over :mod:`mmtok.budgets.calibrate`, reading a proxy's ledger."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from mmtok.cli.common import Column, console, print_error, print_note, print_table, say
from mmtok.cli.ledger import open_for_reading, report_skipped


def rule_text(params: dict[str, Any] | None) -> str:
    """A rule in a few words: its formula and parameters (no slashes, so a table folds it only between words)."""
    if not params:
        return ""
    formula = params["formula"]
    if formula == "openai-tile":
        return f"{params['base_tokens']} + {params['tile_tokens']} per 512-px tile"
    if formula == "openai-patch":
        budgets = ", ".join(f"{k} {v.get('patch_budget', '-')}" for k, v in params["levels"].items())
        return f"32-px patches x{params['multiplier']}, budget {budgets}"
    if formula == "anthropic-patches":
        return f"28-px patches, at most {params['max_edge']} px and {params['max_tokens']} tokens"
    if formula == "fixed":
        return f"flat {params['tokens']}"
    if formula == "gemini-tiles":
        return f"{params['tokens_per_tile']} per 768-px tile"
    if formula == "tiles":
        return (
            f"{params['base_tokens']} + {params['tile_tokens']} per {params['tile_px']}-px tile "
            f"(fit {params['fit_px']} px)"
        )
    if "levels" in params:
        return f"{formula}: " + ", ".join(f"{k} {v}" for k, v in params["levels"].items())
    return formula


def json_text(value: Any, width: int = 80, indent: int = 0, used: int = 0) -> str:
    """``value`` as JSON whose lines fit ``width`` where they can: a list or object that fits on the rest of its line
    (``used`` columns are taken) stays on it, others open one member per line, two spaces deeper (a long string is
    never cut)."""
    compact = json.dumps(value, default=str, separators=(", ", ": "))
    if used + len(compact) <= width or not isinstance(value, (dict, list)) or not value:
        return compact
    inner = " " * (indent + 2)
    if isinstance(value, list):
        items = [inner + json_text(v, width, indent + 2, len(inner)) for v in value]
    else:
        items = []
        for key, v in value.items():
            head = f"{inner}{json.dumps(str(key))}: "
            items.append(head + json_text(v, width, indent + 2, len(head)))
    opening, closing = "[]" if isinstance(value, list) else "{}"
    return opening + "\n" + ",\n".join(items) + "\n" + " " * indent + closing


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
    from mmtok.budgets.calibrate.measure import DEFAULT_SIZES, measure, provider_for
    from mmtok.budgets.ledger import open_ledger

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
SHEET_OUT = typer.Option(
    None, "--out", "-o", help="The calibration sheet to write (TOML; --prices takes it). Without it: report only."
)
MEASURE_OPENAI = typer.Option(None, "--openai-upstream", help="OpenAI base URL for --measure.")
MEASURE_ANTHROPIC = typer.Option(None, "--anthropic-upstream")
MEASURE_GEMINI = typer.Option(None, "--gemini-upstream")


BATCH_INPUT = typer.Option(
    None, "--batch-input", help="PATH is a batch's output file: the batch input it answers (paired by custom_id)."
)


def calibrate(
    path: str = typer.Argument(..., help="The proxy's ledger (an SQLite file or a SQLAlchemy URL), or a batch output."),
    out: Path | None = SHEET_OUT,
    prices: list[Path] = typer.Option([], "--prices", help="Price sheets the calls were priced with."),
    json_out: bool = typer.Option(False, "--json", help="The fits as one JSON object."),
    measure: list[str] = MEASURE,
    sizes: str | None = SIZES,
    openai_upstream: str | None = MEASURE_OPENAI,
    anthropic_upstream: str | None = MEASURE_ANTHROPIC,
    gemini_upstream: str | None = MEASURE_GEMINI,
    batch_input: Path | None = BATCH_INPUT,
) -> None:
    """Fit each model's media rule to what its calls were billed (the rule's own parameters, or a new rule family
    where none fits), say where the bills disagree with the documented rule and by how much, and write the fitted
    rules as a dated price sheet for --prices. A fit replaces the documented rule only when it predicts calls it
    did not see (leave-one-out), with 3 calls per fitted parameter and sizes on both sides of the rule's
    breakpoints; otherwise the documented rule stays and the sizes to send are named. With --measure, photos of
    chosen sizes are first counted on the provider's free counting endpoint (key from OPENAI_API_KEY,
    ANTHROPIC_API_KEY or GEMINI_API_KEY) and recorded in the ledger."""
    from mmtok.budgets.calibrate import calibrate as fit
    from mmtok.cli.common import check_out_file

    if out is not None:
        check_out_file(out, (".toml",))
    chosen = _sizes(sizes)
    if batch_input is not None:
        if measure:
            raise typer.BadParameter("counts are recorded in a ledger: not with --batch-input", param_hint="--measure")
        _from_batch(path, batch_input, prices, out, json_out)
        return
    if measure:
        upstreams = {"openai": openai_upstream, "anthropic": anthropic_upstream, "gemini": gemini_upstream}
        _measure(path, measure, chosen, upstreams, prices)
    book = open_for_reading(path)
    calibration = fit(book.records(), prices=tuple(prices), source=book.where)
    report(calibration, out, json_out, book.where, lambda: report_skipped(book))


def _from_batch(output: str, batch_input: Path, prices: list[Path], out: Path | None, json_out: bool) -> None:
    """Fit to a batch's bills: its output paired with its input (``budgets/ledger/batch_results.py``), then fitted and
    checked exactly as a ledger's calls are."""
    from mmtok.budgets.calibrate import calibrate as fit
    from mmtok.budgets.ledger.batch_results import Pairing, batch_records, check_pair

    check_pair(output, batch_input)
    pairing = Pairing()
    calibration = fit(batch_records(output, batch_input, tuple(prices), pairing=pairing), prices=tuple(prices),
                      source=f"{output} (batch results of {batch_input})")  # fmt: skip

    def said() -> None:
        for problem in pairing.problems:
            print_error(problem)
        if pairing.no_result or pairing.unmatched:
            print_note(f"{pairing.no_result:,} request(s) without a result, {len(pairing.unmatched):,} result(s) "
                       "without a request")  # fmt: skip
        if pairing.problems:
            raise typer.Exit(1)

    report(calibration, out, json_out, calibration.source, said)


def report(
    calibration: Any, out: Path | None, json_out: bool, where: str, skipped: Callable[[], None] = lambda: None
) -> None:
    """Write the sheet (where asked) and show the fits: a table and a few lines per model, or one JSON object; then
    ``skipped`` names the inputs passed over (and exits 1 where there were any). Shared by the ledger and the
    batch-output sources."""
    from mmtok.budgets.calibrate import write_sheet

    if not calibration.models:
        print_error(f"{where}: no billed calls with images to calibrate from")
        skipped()
        raise typer.Exit(1)
    if out is not None:
        write_sheet(calibration, out)
    if json_out:
        models = [m.to_dict() for m in calibration.models]
        sheet = None if out is None else str(out)
        document = {"sheet": sheet, "models": models, "skipped": dict(calibration.skipped)}
        sys.stdout.write(json_text(document, console().width) + "\n")
    else:
        _print_fits(calibration)
        changed = sum(1 for m in calibration.models if m.changed)
        if out is None:
            say(f"{changed} rule(s) would change; no sheet written (--out SHEET.toml writes one)")
        else:
            say(f"wrote {out}: {changed} rule(s) changed (use it with --prices)")
    skipped()  # malformed rows, named; exit 1 after the rest was reported


def _print_fits(calibration: Any) -> None:
    """A row per model (documented rule, how it met the bills, the best fit, what the sheet holds), then a few
    lines each in words, folded at spaces to the console's width."""
    from mmtok.budgets.calibrate import describe_fit

    columns = [Column("model", fold=True), Column("calls", True), Column("documented rule", fold=True),
               Column("exact", True), Column("error", True, priority=2), Column("best fit", fold=True),
               Column("held out", True, priority=1), Column("sheet", fold=True)]  # fmt: skip
    rows = []
    for m in calibration.models:
        doc, verdict = m.documented, m.verdict
        held = verdict.held_out if verdict is not None else None
        rows.append([m.model, str(m.calls), rule_text(doc.params if doc else None),
                     f"{doc.exact}/{doc.total}" if doc else "", f"{doc.mean_abs_error:.1f}" if doc else "",
                     _best_fit(m), f"{held.exact}/{len(held.errors)}" if held else "", _sheet(m)])  # fmt: skip
    print_table(columns, rows)
    width = console().width
    for m in calibration.models:
        text = f"{m.model}: {describe_fit(m)}"
        for line in textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False):
            say(line)
    for reason, count in sorted(calibration.skipped.items()):
        print_note(f"{count} call(s) left out: {reason}")


def _best_fit(m: Any) -> str:
    if m.candidate is None or not m.proposed:
        return "same as documented" if m.candidate is not None else ""
    new = " (new rule)" if m.candidate.params["formula"] != m.documented.params["formula"] else ""
    return f"{rule_text(m.candidate.params)}{new}, {m.candidate.exact}/{m.candidate.total}"


def _sheet(m: Any) -> str:
    if m.kept:
        return "documented (kept)"
    return "fitted" if m.changed else "documented"
