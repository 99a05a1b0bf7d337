"""A request's quote on one model: each part counted, each line costed at the rate that applies, the warnings."""

from __future__ import annotations

import datetime as dt
import fnmatch
import functools
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from mmtok.budgets.pricing import caching as C
from mmtok.budgets.pricing import formulas as F
from mmtok.budgets.pricing.counts import Attachment, count_parts
from mmtok.budgets.pricing.formats import format_warning
from mmtok.budgets.pricing.limits import broken_limits
from mmtok.budgets.pricing.models import INPUT_RATES, Model, provider_of, rate_card
from mmtok.budgets.pricing.money import MILLION, RateCard, plain
from mmtok.budgets.pricing.options import Options
from mmtok.budgets.pricing.quote import Line, Quote
from mmtok.errors import PriceError

AUDIO_RATE_WORDS = {"input_audio": "audio input", "output_audio": "audio output"}  # money.DOUBTFUL_INHERITED
SAME_RATE_FILE = Path(__file__).resolve().parent / "modality_rates.toml"


class UnknownRate(PriceError):
    """No rate of a part's own modality is known: the part is left out of the quote (which is incomplete)."""


@functools.cache
def _same_rate_table() -> list[dict[str, Any]]:
    import tomllib

    return tomllib.loads(SAME_RATE_FILE.read_text(encoding="utf-8"))["same_input_rate"]


def same_input_rates(model: Model) -> dict[str, str]:
    """The rates ``model``'s provider documents as its text rate (rate name -> the page and the date it was read),
    from ``budgets/pricing/modality_rates.toml``."""
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


ITEM_RATES = {"image": "image_input_per_image", "audio": "audio_input_per_second", "video": "video_input_per_second"}
RATE_WORDS = {"input": "input tokens", "cache_read": "cached input tokens", "cache_write": "cache-write tokens"}
Priced = tuple[str, Decimal, str]  # how a line is costed ("tokens": per million, "item": per image or second), the
# rate, the rate in words


class Basis:
    """What quotes on one model, date and price option share, whatever the request: the rate card, its tiers in
    words, the rates the provider documents as its text rate, each rate in words, the output's rate, the model's
    warnings. Made once (:func:`basis`) and filled as rates are asked for, so a folder, a batch file or a proxy's
    calls word each rate once; every entry depends only on what the key (model, date, option) and the card fix."""

    def __init__(self, model: Model, at: dt.date, card: RateCard) -> None:
        self.model, self.at, self.card = model, at, card
        self.provider = provider_of(model)
        self.by_duration = "audio_input_per_second" in card.per_item
        self.same_rate = same_input_rates(model) if card.inherited else {}
        self.tier_texts = tuple(
            f"tier > {t.above_input_tokens:,} input tokens" if t.above_input_tokens else "" for t in card.tiers
        )
        self.warnings = tuple(_model_warnings(model, card, at))
        self._priced: dict[tuple[int, str, str], Priced | PriceError] = {}
        self._outputs: dict[tuple[int, tuple[str, ...]], tuple[list[tuple[Decimal, str, str]]] | PriceError] = {}

    def tier(self, input_tokens: int) -> int:
        """The index of the tier a request of ``input_tokens`` is billed in (:meth:`RateCard.tier_for`)."""
        tiers = self.card.tiers
        chosen = 0
        for index in range(1, len(tiers)):
            if input_tokens > tiers[index].above_input_tokens:
                chosen = index
        return chosen

    def priced(self, tier: int, modality: str, cache: str) -> Priced:
        """How a line of ``modality`` is costed in ``tier`` (written to the prompt cache for ``cache``), or the
        :class:`PriceError` that leaves it out."""
        key = (tier, modality, cache)
        found = self._priced.get(key)
        if found is None:
            try:
                found = _priced(self.card, self.card.tiers[tier].rates, modality, self.tier_texts[tier],
                                self.same_rate, cache)  # fmt: skip
            except PriceError as e:
                found = e
            self._priced[key] = found
        if isinstance(found, PriceError):
            raise type(found)(*found.args)  # a new error each time: a raised one keeps its traceback
        return found

    def output(self, tier: int, modalities: tuple[str, ...]) -> list[tuple[Decimal, str, str]]:
        """(rate, rate name, rate in words) of each modality the reply may hold, in ``tier``, or the error that
        leaves the output out (:class:`UnknownRate`) or the request unpriced."""
        key = (tier, modalities)
        found = self._outputs.get(key)
        if found is None:
            try:
                found = (_output_rates(self.model, self.card, tier, modalities, self.tier_texts[tier], self.same_rate),)
            except PriceError as e:
                found = e
            self._outputs[key] = found
        if isinstance(found, PriceError):
            raise type(found)(*found.args)
        return found[0]


_BASES: dict[tuple[int, dt.date, str], Basis] = {}


def basis(model: Model, at: dt.date, option: str) -> Basis:
    """The :class:`Basis` of quotes on ``model`` at ``at`` under ``option``, made again where the rate card is no
    longer the one it was made from (the price data was reloaded: ``money.forget``)."""
    card = rate_card(model, at, option)
    key = (id(model), at, option)
    kept = _BASES.get(key)
    if kept is not None and kept.model is model and kept.card is card:
        return kept
    if len(_BASES) >= 4096:
        _BASES.clear()
    made = _BASES[key] = Basis(model, at, card)
    return made


def _priced(
    card: RateCard, rates: dict[str, Decimal], modality: str, tier: str, same_rate: dict[str, str], cache: str = ""
) -> Priced:
    if cache and "input" in rates:  # written to the prompt cache: every modality at the write rate
        rate, where = C.write_rate(rates, cache)
        option = "" if card.option == "standard" else f", {card.option}"
        words = f"cache-write tokens ({C.TTL_WORDS[cache]}: {where}, {card.source} {card.model_ref}{option})"
        return "tokens", rate, f"${plain(rate)}/1M {words}"
    item_rate = card.per_item.get(ITEM_RATES.get(modality, ""))
    if item_rate is not None:
        if modality == "image":
            return "item", item_rate, f"${item_rate}/image ({card.source})"
        where = f"{card.source} {card.model_ref}"
        return "item", item_rate, f"${plain(item_rate * 60)}/minute of {modality}, billed by duration ({where})"
    rate_name = INPUT_RATES.get(modality, modality)
    rate = rates.get(rate_name)
    if rate is None:
        raise PriceError(f"{card.source}: {card.model_ref} has no {rate_name.replace('_', ' ')} rate")
    words = RATE_WORDS.get(rate_name, f"{rate_name.replace('_', ' ')} tokens")
    return "tokens", rate, _rate_text(card, rate, words, tier, rate_name, same_rate)


def make_quote(
    model: Model,
    attachments: Sequence[Attachment],
    options: Options,
    label: str,
    request_bytes: int | None = None,
    warnings: Sequence[str] = (),
    missing: Sequence[str] = (),
) -> Quote:
    """The quote of ``attachments`` on ``model``. ``request_bytes``: the body's length as sent, for the provider's
    request-size limit (file requests: their media as base64). ``warnings`` and ``missing``: what the caller found
    (a body's settings), said after the quote's own."""
    at = options.at or dt.date.today()
    shared = basis(model, at, options.option)
    card = shared.card
    counted, left_out, said = _counted_parts(model, attachments, options, shared.by_duration)
    input_tokens = 0
    for part in counted:
        input_tokens += part[2].tokens
    tier = shared.tier(input_tokens)
    rates = card.tiers[tier].rates
    counted, plan = _cache_plan(model, counted, rates)
    lines = _priced_lines(shared, tier, counted, left_out)
    if left_out and not lines:
        raise PriceError("; ".join(left_out))  # nothing in the request can be priced: an error, not a zero
    if options.output_tokens:
        try:
            lines.append(_output_line(model, shared, tier, options))
        except UnknownRate as e:
            left_out.append(f"output: {e}")
    if plan is None and "input" in rates and shared.provider in ("openai", "google"):
        plan = C.automatic_plan(shared.provider, input_tokens, rates)
    limits = broken_limits(shared.provider, model.asked, attachments, request_bytes)
    said += limits
    if card.request_fee:
        lines.append(Line("request", "request", 0, card.request_fee, "per-request fee", f"${card.request_fee}/request"))
    said += shared.warnings
    above = card.tiers[tier].above_input_tokens
    if above:
        said.append(f"{input_tokens:,} input tokens: the long-context rates above {above:,} apply")
    said += [f"{x.item}: {x.tokens:,} {x.modality} tokens priced at $0 ({x.rate})" for x in _free(lines)]
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
        shared.tier_texts[tier],
        (*left_out, *missing),
        (*said, *warnings),
        limits=tuple(limits),
        cache=plan,
    )


def _priced_lines(
    shared: Basis, tier: int, counted: list[tuple[str, str, F.TokenCount, float, str]], left_out: list[str]
) -> list[Line]:
    """One priced line per counted part at ``tier``'s rates; a part without a rate goes to ``left_out``, named."""
    lines = []
    for name, modality, count, quantity, cache in counted:
        try:
            how, rate, words = shared.priced(tier, modality, cache)
        except PriceError as e:
            left_out.append(f"{name}: {e}")
            continue
        cost = count.tokens * rate / MILLION if how == "tokens" else rate * Decimal(str(round(quantity, 6)))
        lines.append(Line(name, modality, count.tokens, cost, count.working, words, count.label, cache))
    return lines


def _free(lines: list[Line]) -> list[Line]:
    """The lines with tokens and no cost: said, so that a $0 rate is never mistaken for a count of nothing."""
    return [line for line in lines if line.tokens and not line.cost]


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


def _model_warnings(model: Model, card: RateCard, at: dt.date) -> list[str]:
    """What every quote on the model must say about it and its rates: retired, deprecated, priced as another (a
    request in the long-context tier says so too, in :func:`make_quote`)."""
    warnings = []
    if model.retired and model.retired <= at:
        warnings.append(f"{model.asked} was retired on {model.retired} (LiteLLM map); priced as if still served")
    if card.deprecated:
        warnings.append(f"genai-prices marks {card.model_ref} as deprecated")
    if model.entry is None and model.row is None and card.model_ref.split(":")[-1] != model.name:
        warnings.append(f"{model.asked} is not in the model catalog: genai-prices prices it as {card.model_ref}")
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


def _output_rates(
    model: Model, card: RateCard, tier: int, modalities: tuple[str, ...], tier_text: str, same_rate: dict[str, str]
) -> list[tuple[Decimal, str, str]]:
    """(rate, rate name, rate in words) of each modality the reply may hold."""
    rates = card.tiers[tier].rates
    priced = []
    for modality in modalities:
        if modality != "text" and modality not in model.output_modalities and model.entry is not None:
            made = ", ".join(model.output_modalities)
            raise PriceError(f"{model.asked} does not produce {modality} (LiteLLM map: {made})")
        rate_name = OUTPUT_RATES[modality]
        rate = rates.get(rate_name)
        if rate is None:
            raise UnknownRate(f"no {rate_name.replace('_', ' ')} rate is known for {card.model_ref} ({card.source})")
        text = _rate_text(card, rate, OUTPUT_WORDS[rate_name], tier_text, rate_name, same_rate)
        priced.append((rate, rate_name, text))
    return priced


def _output_line(model: Model, shared: Basis, tier: int, options: Options) -> Line:
    """The output's line: every token at the highest rate among the modalities the reply may hold (the body's
    ``modalities`` / ``responseModalities``), so that a bound is never priced at the text rate in silence."""
    priced = shared.output(tier, _output_modalities(model, options))
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
