"""What ``mmtok models`` lists: per model, what it takes, its media rules and labels, rates, context, retirement."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence
from typing import Any

from mmtok.budgets.pricing import Model, model_image_count, rate_card, resolve
from mmtok.budgets.pricing.catalog import catalog
from mmtok.budgets.pricing.quoting import same_input_rates
from mmtok.budgets.pricing.sheets import sheets
from mmtok.errors import PriceError

SHOWN_RATES = ("input", "cache_read", "cache_write", "output", "input_audio", "output_audio", "output_image")


def _rule(model: Model, modality: str, params: dict[str, Any]) -> dict[str, Any]:
    """A rule's name, formula, label and parameters. The name is the one ``mmtok price`` gives the rules a quote
    was counted by (the model's family in ``families.toml``, ``anthropic-high-resolution``); the formula is
    the arithmetic it applies (``anthropic-patches``). The label is the rule's, and what a quote at the default
    detail carries where that differs (OpenAI's ``detail=auto`` is billed as high: an upper bound; Gemini 2.5's
    default pan & scan is an estimate), taken from a quote of a 1,024 x 1,024 image."""
    label = params.get("label", "exact")
    if modality == "image":
        default = model_image_count(model, 1024, 1024).label
        label = label if default == label else f"{label}; default detail: {default}"
    return {
        "rule": model.family.name if model.family else params["formula"],
        "formula": params["formula"],
        "label": label,
        "parameters": {k: v for k, v in params.items() if k not in ("formula", "label")},
    }


def describe(model: Model, at: dt.date | None = None) -> dict[str, Any]:
    """One model as a JSON-ready row."""
    row: dict[str, Any] = {
        "model": model.name,
        "provider": model.provider,
        "family": model.family.name if model.family else "",
        "takes": list(model.takes),
        "takes_source": model.takes_source,
        "outputs": list(model.output_modalities),
        "text": model.text_rule,
        "rules": {m: _rule(model, m, p) for m, p in model.formulas.items() if model.accepts(m)},
        "rule_source": model.family.source if model.family else "",
        "rule_read": model.family.read.isoformat() if model.family and model.family.read else None,
        "retired": model.retired.isoformat() if model.retired else None,
        "prices": {},
        "context_window": model.entry.max_input_tokens if model.entry else None,
    }
    try:
        card = rate_card(model, at)
    except PriceError as e:
        row["price_error"] = str(e)
        return row
    base = card.tiers[0].rates
    documented = same_input_rates(model) if card.inherited else {}
    # a rate that is only the text rate (no audio rate in the price data) is not shown as the audio rate, unless the
    # provider documents one price for every modality (budgets/pricing/modality_rates.toml)
    row["prices"] = {k: str(base[k]) for k in SHOWN_RATES if k in base and (k not in card.inherited or k in documented)}
    row["no_rate"] = [k for k in card.inherited if k not in documented]
    row["long_context"] = [
        {"above_input_tokens": t.above_input_tokens, "input": str(t.rates.get("input"))} for t in card.tiers[1:]
    ]
    row["money_source"] = f"{card.source} {card.model_ref}"
    row["context_window"] = card.context_window or row["context_window"]
    return row


def model_rows(
    provider: str | None = None, modality: str | None = None, prices: Sequence[str | os.PathLike[str]] = ()
) -> list[dict[str, Any]]:
    """Every model of the catalog and the price sheets, optionally of one provider or taking one modality."""
    names = [*catalog().rows, *sheets(tuple(prices)).rows]
    rows = []
    for name in sorted(set(names)):
        model = resolve(name, prices)
        if provider is not None and model.provider != provider.lower():
            continue
        if modality is not None and not model.accepts(modality):
            continue
        rows.append(describe(model))
    return rows
