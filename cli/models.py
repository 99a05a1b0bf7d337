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
    "audio_input_per_mtok",
    "audio_output_per_mtok",
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
    from mmtok.budgets.pricing.listing import model_rows

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
        _model_table(rows, "audio" if modality == "audio" else "")


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
                "audio_input_per_mtok": (r["prices"] or {}).get("input_audio"),
                "audio_output_per_mtok": (r["prices"] or {}).get("output_audio"),
            }
        )


def _model_table(rows: list[dict[str, Any]], rates_of: str = "") -> None:
    """The models as a table; ``rates_of="audio"`` (``--modality audio``) shows the audio input and output rates
    in place of the text ones, and "?" where the price data has no audio rate (never the text rate in silence)."""
    rule_of, (rate_in, rate_out) = (
        ("audio", ("input_audio", "output_audio")) if rates_of else ("image", ("input", "output"))
    )
    prefix = "audio " if rates_of else ""
    columns = (
        Column("model", fold=True, min_width=16),
        Column("provider", priority=3),
        Column("takes", priority=5),
        Column(f"{rule_of} rule", fold=True, priority=1, min_width=16),
        Column(f"{prefix}in\n$/1M" if prefix else "in $/1M", numeric=True),
        Column(f"{prefix}out\n$/1M" if prefix else "out $/1M", numeric=True),
        Column("context", numeric=True, priority=4),
        Column("retired", priority=6),
    )
    cells = []
    for r in rows:
        rule = r["rules"].get(rule_of)
        prices = r["prices"] or {}
        cells.append(
            [
                r["model"],
                r["provider"],
                ",".join(m for m in r["takes"] if m != "text"),
                f"{rule['rule']} ({rule['label']})" if rule else "",
                prices.get(rate_in, "?"),
                prices.get(rate_out, "" if rate_out == "output" or "audio" not in r.get("outputs", []) else "?"),
                fmt_num(r["context_window"]) if r["context_window"] else "",
                r["retired"] or "",
            ]
        )
    print_table(columns, [[_escape(cell) for cell in row] for row in cells])
    if any(not r["prices"] or (rates_of and rate_in not in r["prices"]) for r in rows):
        console().print(f"[dim]? no {prefix}price known (see price_error and no_rate in --json)[/]")


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
