"""``mmtok models``: the priced LLMs a request is sent to, what each takes, its media rule and its prices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from mmtok.cli.common import (
    Column,
    console,
    csv_writer,
    flushes_json_lines,
    fmt_num,
    one_output_format,
    print_error,
    print_json_line,
    print_table,
)
from mmtok.errors import PriceError

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
                "image_rule": rule.get("rule"),
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
                f"{rule['rule']} ({rule['label']})" if rule else "",
                r["prices"].get("input", "?") if r["prices"] else "?",
                r["prices"].get("output", "") if r["prices"] else "",
                fmt_num(r["context_window"]) if r["context_window"] else "",
                r["retired"] or "",
            ]
        )
    print_table(columns, [[_escape(cell) for cell in row] for row in cells])
    if any(not r["prices"] for r in rows):
        console().print("[dim]? no price known (see price_error in --json)[/]")


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
