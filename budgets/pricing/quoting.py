"""A request's quote on one model: each part counted, each line costed at the rate that applies, the warnings."""

from __future__ import annotations

import datetime as dt
import fnmatch
import functools
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from mmtok.budgets import formulas as F
from mmtok.budgets.formats import format_warning
from mmtok.budgets.money import MILLION, RateCard, plain
from mmtok.budgets.pricing import caching as C
from mmtok.budgets.pricing.counts import Attachment, count_parts
from mmtok.budgets.pricing.limits import broken_limits
from mmtok.budgets.pricing.models import INPUT_RATES, Model, provider_of, rate_card
from mmtok.budgets.pricing.options import Options
from mmtok.budgets.pricing.quote import Line, Quote
from mmtok.errors import PriceError

AUDIO_RATE_WORDS = {"input_audio": "audio input", "output_audio": "audio output"}  # money.DOUBTFUL_INHERITED
SAME_RATE_FILE = Path(__file__).resolve().parent.parent / "modality_rates.toml"


class UnknownRate(PriceError):
    """No rate of a part's own modality is known: the part is left out of the quote (which is incomplete)."""


@functools.cache
def _same_rate_table() -> list[dict[str, Any]]:
    import tomllib

    return tomllib.loads(SAME_RATE_FILE.read_text(encoding="utf-8"))["same_input_rate"]


def same_input_rates(model: Model) -> dict[str, str]:
    """The rates ``model``'s provider documents as its text rate (rate name -> the page and the date it was read),
    from ``budgets/modality_rates.toml``."""
    names = (model.name, model.asked.lower())
    found: dict[str, str] = {}
    for rule in _same_rate_table():
        if any(fnmatch.fnmatchcase(n, pattern) for n in names for pattern in rule["match"]):
            found |= dict.fromkeys(rule["modalities"], f"{rule['source']}, read {rule['read']}")
    return found


def _rate_text(
    card: RateCard, rate: Decimal, what: str, tier: str, rate_name: str = "", same_rate: dict[str, str] | None = None
) -> str:
    """The rate in words with its source. A rate that is only the text rate (``card.inherited``: no audio rate in
    the price data) is said where the provider documents one price for every modality (``same_rate``), and
    refused otherwise: the part is left out, not priced at the text rate in silence."""
    where = card.rate_sources.get(rate_name) or f"{card.source} {card.model_ref}"
    if rate_name in card.inherited:
        if rate_name not in (same_rate or {}):
            words = AUDIO_RATE_WORDS[rate_name]
            sources = "LiteLLM's map gives none" if card.source.startswith("LiteLLM") else (
                f"{card.source} gives none, LiteLLM's map neither")  # fmt: skip
            raise UnknownRate(
                f"no {words} rate is known for {card.model_ref} ({sources}): "
                f"not priced at the text rate, which may be far below it; give the rate in a price sheet (--prices)"
            )
        where += f": one input price for every modality ({same_rate[rate_name]})"
    option = "" if card.option == "standard" else f", {card.option}"
    return f"${rate}/1M {what} ({where}{option}{', ' + tier if tier else ''})"


def _line_cost(
    card: RateCard,
    rates: dict[str, Decimal],
    modality: str,
    tokens: int,
    quantity: float,
    tier: str,
    same_rate: dict[str, str],
    cache: str = "",
) -> tuple[Decimal, str]:
    if cache and "input" in rates:  # written to the prompt cache: every modality at the write rate
        rate, where = C.write_rate(rates, cache)
        option = "" if card.option == "standard" else f", {card.option}"
        words = f"cache-write tokens ({C.TTL_WORDS[cache]}: {where}, {card.source} {card.model_ref}{option})"
        return tokens * rate / MILLION, f"${plain(rate)}/1M {words}"
    item_rate = card.per_item.get(
        {"image": "image_input_per_image", "audio": "audio_input_per_second", "video": "video_input_per_second"}.get(
            modality, ""
        )
    )
    if item_rate is not None:
        cost = item_rate * Decimal(str(round(quantity, 6)))
        if modality == "image":
            return cost, f"${item_rate}/image ({card.source})"
        where = f"{card.source} {card.model_ref}"
        return cost, f"${plain(item_rate * 60)}/minute of {modality}, billed by duration ({where})"
    rate_name = INPUT_RATES.get(modality, modality)
    rate = rates.get(rate_name)
    if rate is None:
        raise PriceError(f"{card.source}: {card.model_ref} has no {rate_name.replace('_', ' ')} rate")
    what = {"input": "input tokens", "cache_read": "cached input tokens", "cache_write": "cache-write tokens"}
    words = what.get(rate_name, f"{rate_name.replace('_', ' ')} tokens")
    return tokens * rate / MILLION, _rate_text(card, rate, words, tier, rate_name, same_rate)


def make_quote(
    model: Model, attachments: Sequence[Attachment], options: Options, label: str, request_bytes: int | None = None
) -> Quote:
    """The quote of ``attachments`` on ``model``. ``request_bytes``: the body's length as sent, for the provider's
    request-size limit (file requests: their media as base64)."""
    at = options.at or dt.date.today()
    card = rate_card(model, at, options.option)
    counted, missing, warnings = _counted_parts(model, attachments, options, "audio_input_per_second" in card.per_item)
    input_tokens = sum(c.tokens for _, _, c, _, _ in counted)
    tier = card.tier_for(input_tokens)
    tier_text = f"tier > {tier.above_input_tokens:,} input tokens" if tier.above_input_tokens else ""
    counted, plan = _cache_plan(model, counted, tier.rates)
    lines = []
    same_rate = same_input_rates(model) if card.inherited else {}
    for name, modality, count, quantity, cache in counted:
        try:
            cost, rate = _line_cost(card, tier.rates, modality, count.tokens, quantity, tier_text, same_rate, cache)
        except PriceError as e:
            missing.append(f"{name}: {e}")
            continue
        lines.append(Line(name, modality, count.tokens, cost, count.working, rate, count.label, cache))
    if missing and not lines:
        raise PriceError("; ".join(missing))  # nothing in the request can be priced: an error, not a zero
    if options.output_tokens:
        try:
            lines.append(_output_line(model, card, tier.rates, options, tier_text, same_rate))
        except UnknownRate as e:
            missing.append(f"output: {e}")
    if plan is None and "input" in tier.rates and provider_of(model) in ("openai", "google"):
        plan = C.automatic_plan(provider_of(model), input_tokens, tier.rates)
    limits = broken_limits(provider_of(model), model.asked, attachments, request_bytes)
    warnings += limits
    if card.request_fee:
        lines.append(Line("request", "request", 0, card.request_fee, "per-request fee", f"${card.request_fee}/request"))
    warnings += _model_warnings(model, card, at, input_tokens, tier.above_input_tokens)
    warnings += [
        f"{line.item}: {line.tokens:,} {line.modality} tokens priced at $0 ({line.rate})"
        for line in lines
        if line.tokens and not line.cost
    ]
    return Quote(
        label,
        model.asked,
        card.model_ref,
        model.provider,
        model.family.name if model.family else "",
        tuple(lines),
        card.source,
        card.source_url,
        card.as_of,
        options.option,
        tier_text,
        tuple(missing),
        tuple(warnings),
        limits=tuple(limits),
        cache=plan,
    )


def _cache_plan(
    model: Model, counted: list[tuple[str, str, F.TokenCount, float, str]], rates: dict[str, Decimal]
) -> tuple[list[tuple[str, str, F.TokenCount, float, str]], C.CachePlan | None]:
    """The parts a body's cache marks write to the prompt cache, and the plan: a prefix under the model's minimum
    is not cached (its marks are dropped, and the plan says so)."""
    by_ttl: dict[str, int] = {}
    for _, _, count, _, cache in counted:
        if cache:
            by_ttl[cache] = by_ttl.get(cache, 0) + count.tokens
    if not by_ttl or "input" not in rates:
        return counted, None
    minimum, total = C.anthropic_minimum(model.name), sum(by_ttl.values())
    if total < minimum:
        return [(n, m, c, q, "") for n, m, c, q, _ in counted], C.below_minimum(total, minimum, model.asked)
    return counted, C.written_plan(by_ttl, rates)


def _counted_parts(
    model: Model, attachments: Sequence[Attachment], options: Options, by_duration: bool = False
) -> tuple[list[tuple[str, str, F.TokenCount, float, str]], list[str], list[str]]:
    """(name, modality, count, quantity) of each part of the request (media by the model's rules, then the token
    counts given), the parts that cannot be counted, and the counting notes."""
    counted: list[tuple[str, str, F.TokenCount, float, str]] = []
    missing: list[str] = []
    warnings: list[str] = []
    for name, item, detail, clip, cache in attachments:
        try:
            parts, note = count_parts(model, item, detail or options.detail, by_duration, clip)
        except PriceError as e:
            missing.append(f"{name}: {e}")
            continue
        counted += [(name, m, c, q, cache) for m, c, q in parts]
        warnings += [f"{name}: {n}" for n in (note, format_warning(model, item)) if n]
    given = (("text", options.text_tokens), ("cache_read", options.cached_input_tokens))
    for kind, tokens in (*given, ("cache_write", options.cache_write_tokens)):
        if tokens:
            count = F.TokenCount(tokens, f"{tokens} {kind.replace('_', ' ')} tokens, as given")
            counted.append(("cache", kind, count, 0, ""))
    return counted, missing, warnings


def _model_warnings(model: Model, card: RateCard, at: dt.date, input_tokens: int, tier_above: int | None) -> list[str]:
    """What a quote must say about the model and its rates: retired, deprecated, priced as another, long context."""
    warnings = []
    if model.retired and model.retired <= at:
        warnings.append(f"{model.asked} was retired on {model.retired} (LiteLLM map); priced as if still served")
    if card.deprecated:
        warnings.append(f"genai-prices marks {card.model_ref} as deprecated")
    if model.entry is None and model.row is None and card.model_ref.split(":")[-1] != model.name:
        warnings.append(f"{model.asked} is not in the model catalog: genai-prices prices it as {card.model_ref}")
    if tier_above:
        warnings.append(f"{input_tokens:,} input tokens: the long-context rates above {tier_above:,} apply")
    return warnings


OUTPUT_RATES = {"text": "output", "audio": "output_audio", "image": "output_image"}
OUTPUT_WORDS = {"output": "output tokens", "output_audio": "audio output tokens", "output_image": "image output tokens"}


def _output_modalities(model: Model, options: Options) -> tuple[str, ...]:
    """What the reply holds: the body's modalities, else audio where asked (--output-audio) or where the model
    produces nothing else, else text."""
    if options.output_modalities:
        return options.output_modalities
    if options.output_audio or model.output_modalities == ("audio",):
        return ("audio",)
    return ("text",)


def _output_line(
    model: Model, card: RateCard, rates: dict[str, Decimal], options: Options, tier: str, same_rate: dict[str, str]
) -> Line:
    """The output's line: every token at the highest rate among the modalities the reply may hold (the body's
    ``modalities`` / ``responseModalities``), so that a bound is never priced at the text rate in silence."""
    priced = []
    for modality in _output_modalities(model, options):
        if modality != "text" and modality not in model.output_modalities and model.entry is not None:
            made = ", ".join(model.output_modalities)
            raise PriceError(f"{model.asked} does not produce {modality} (LiteLLM map: {made})")
        rate_name = OUTPUT_RATES[modality]
        rate = rates.get(rate_name)
        if rate is None:
            raise UnknownRate(f"no {rate_name.replace('_', ' ')} rate is known for {card.model_ref} ({card.source})")
        text = _rate_text(card, rate, OUTPUT_WORDS[rate_name], tier, rate_name, same_rate)
        priced.append((rate, rate_name, text))
    rate, rate_name, rate_text = max(priced, key=lambda p: p[0])
    tokens = options.output_tokens
    what = OUTPUT_WORDS[rate_name]
    working = f"{tokens:,} {what}, as given"
    if options.output_bound:
        working = options.output_bound
        if len(priced) > 1:
            asked = " and ".join(p[1].removeprefix("output_") if p[1] != "output" else "text" for p in priced)
            working += f"; the reply may hold {asked}: every token at the highest of their rates"
    label = (options.output_label or "upper bound") if options.output_bound else "exact"
    return Line("output", rate_name, tokens, tokens * rate / MILLION, working, rate_text, label)
