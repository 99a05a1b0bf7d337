"""What a request costs on a model: tokens per attachment and modality, exact decimal costs, the working, the source.

    >>> quote = price(["photo.jpg", "talk.wav"], text="Summarise.", model="gemini-3.1-pro-preview")  # doctest: +SKIP
    >>> quote.tokens("image"), quote.total_cost, quote.lines[0].working                        # doctest: +SKIP

A request is one API call: its text and attachments are input, ``output_tokens`` are counted once, cached and
cache-write tokens are priced at their own rates, and the long-context tier is chosen from the whole request's input.
Token rules come from ``families.toml`` (each with its source, the date it was read and a label); money from
genai-prices, LiteLLM's map, or a price sheet (``money.py``); capabilities and retirement dates from the model
catalog (``catalog.py``). Media are read from headers only (``mmtok.load``), so pricing a folder of photos never
decodes a pixel. An attachment the model cannot take is listed in ``missing`` and the quote is incomplete, never
priced at zero.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import functools
import math
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from mmtok.budgets import formulas as F
from mmtok.budgets.catalog import Catalog, CatalogEntry, catalog, dashed_date, split_name
from mmtok.budgets.formats import format_warning
from mmtok.budgets.money import CARDS, MILLION, OPTIONS, RateCard, Tier, litellm_card, plain
from mmtok.budgets.sheets import Family, ModelRow, families, sheet_stamp, sheets
from mmtok.errors import MediaError, MmtokError, PriceError
from mmtok.media import Audio, Image, Text, Video, iter_files, load

PriceSheets = Sequence[str | os.PathLike[str]]
DETAIL_LEVELS = ("low", "medium", "high", "ultra_high", "original", "auto")
INPUT_RATES = {"text": "input", "image": "input_image", "audio": "input_audio", "video": "input_video"}
AUDIO_RATE_WORDS = {"input_audio": "audio input", "output_audio": "audio output"}  # money.DOUBTFUL_INHERITED


@dataclass(frozen=True)
class Line:
    """One part of a request on one model: an attachment's modality, cached tokens, the output, a request fee."""

    item: str  # the attachment ("photo.jpg", "<text>"), or "cache" / "output" / "request"
    modality: str  # text | image | audio | video | cache_read | cache_write | output | output_audio | request
    tokens: int
    cost: Decimal
    working: str  # how the tokens were counted
    rate: str  # the rate applied, and why
    label: str = "exact"  # of the token count: exact | documented | upper bound | estimate

    @property
    def exact(self) -> bool:
        return self.label == "exact"

    def to_dict(self) -> dict[str, Any]:
        return {
            "item": self.item,
            "modality": self.modality,
            "tokens": self.tokens,
            "cost": str(self.cost),
            "working": self.working,
            "rate": self.rate,
            "label": self.label,
        }


OUTPUT_KINDS = ("output", "output_audio")


@dataclass(frozen=True)
class Quote:
    item: str  # what was priced, for people
    model: str  # as asked
    model_ref: str  # as the price source names it ("openai:gpt-5.2")
    provider: str
    family: str
    lines: tuple[Line, ...]
    money_source: str  # genai-prices | LiteLLM map <version> | a sheet's path
    source_url: str
    as_of: dt.date
    option: str = "standard"  # standard | batch | flex | priority
    tier: str = ""  # the long-context tier applied, in words ("" for the base rates)
    missing: tuple[str, ...] = ()  # attachments left out, with the reason
    warnings: tuple[str, ...] = ()
    currency: str = "USD"

    @property
    def input_lines(self) -> tuple[Line, ...]:
        return tuple(ln for ln in self.lines if ln.modality not in OUTPUT_KINDS)

    @property
    def input_tokens(self) -> int:
        return sum(ln.tokens for ln in self.input_lines)

    @property
    def output_tokens(self) -> int:
        return sum(ln.tokens for ln in self.lines if ln.modality in OUTPUT_KINDS)

    @property
    def input_cost(self) -> Decimal:
        return sum((ln.cost for ln in self.input_lines), Decimal(0))

    @property
    def output_cost(self) -> Decimal:
        return sum((ln.cost for ln in self.lines if ln.modality in OUTPUT_KINDS), Decimal(0))

    @property
    def total_cost(self) -> Decimal:
        return sum((ln.cost for ln in self.lines), Decimal(0))

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def label(self) -> str:
        return F.weakest([ln.label for ln in self.lines])

    @property
    def exact(self) -> bool:
        return self.label == "exact"

    @property
    def source(self) -> str:
        return f"{self.money_source} ({self.source_url})" if self.source_url else self.money_source

    def tokens(self, modality: str | None = None) -> int:
        """Tokens of one modality (``"image"``, ``"cache_read"``, ``"output"``...), or all input tokens."""
        if modality is None:
            return self.input_tokens
        return sum(ln.tokens for ln in self.lines if ln.modality == modality)

    def to_dict(self) -> dict[str, Any]:
        tokens: dict[str, int] = {}
        sums = {False: [0, Decimal(0)], True: [0, Decimal(0)]}  # input, output: tokens and cost, in one pass
        total = Decimal(0)
        for ln in self.lines:
            tokens[ln.modality] = tokens.get(ln.modality, 0) + ln.tokens
            part = sums[ln.modality in OUTPUT_KINDS]
            part[0] += ln.tokens
            part[1] += ln.cost
            total += ln.cost  # in line order, as total_cost adds them
        (input_tokens, input_cost), (output_tokens, output_cost) = sums[False], sums[True]
        return {
            "item": self.item,
            "model": self.model,
            "model_ref": self.model_ref,
            "provider": self.provider,
            "family": self.family,
            "tokens": tokens,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "input_cost": str(input_cost),
            "output_cost": str(output_cost),
            "total_cost": str(total),
            "currency": self.currency,
            "label": self.label,
            "complete": self.complete,
            "missing": list(self.missing),
            "warnings": list(self.warnings),
            "option": self.option,
            "tier": self.tier,
            "lines": [ln.to_dict() for ln in self.lines],
            "money_source": self.money_source,
            "source_url": self.source_url,
            "as_of": self.as_of.isoformat(),
        }


# ------------------------------------------------------------------------------------------------------ models
@dataclass(frozen=True)
class Model:
    """A model as mmtok knows it: its token rules, what it takes, where its money comes from."""

    asked: str  # the name the user typed
    name: str  # bare, lower-case, aliases resolved
    provider: str
    family: Family | None
    formulas: dict[str, dict[str, Any]]  # the family's rules with the sheet row's calibration applied
    text_rule: str
    takes: tuple[str, ...]  # input modalities
    takes_source: str  # where ``takes`` comes from
    output_modalities: tuple[str, ...]
    row: ModelRow | None = None  # a price sheet row: money from the sheet
    entry: CatalogEntry | None = None
    prices: tuple[Path, ...] = field(default=(), repr=False)

    def accepts(self, modality: str) -> bool:
        return modality in self.takes

    @property
    def retired(self) -> dt.date | None:
        return self.entry.retired if self.entry else None


def _family(names: Iterable[str], prices: tuple[Path, ...]) -> Family | None:
    candidates = [n for n in names if n]
    return next((f for f in families(prices) for n in candidates if f.matches(n)), None)


@functools.lru_cache(maxsize=512)
def _resolve(asked: str, prices: tuple[Path, ...], catalog_in_use: Catalog, stamps: tuple[float, ...]) -> Model:
    """``resolve``'s model, cached by the sheets' modification times too: a sheet edited since is read again."""
    book = sheets(prices)
    provider, bare = split_name(asked)
    target = book.aliases.get(bare)
    if target is not None:
        provider, bare = split_name(target)
    row = book.rows.get(bare)
    entry = None if row is not None else catalog().get(f"{provider}/{bare}" if provider else bare)
    family = _family([bare, dashed_date(bare), entry.name if entry else ""], prices)
    formulas = {m: dict(p) for m, p in (family.formulas if family else {}).items()}
    for modality, override in (row.overrides if row else {}).items():
        if modality not in formulas and "formula" not in override:
            raise PriceError(f"{row.sheet}: {bare} overrides {modality} but its family has no {modality} rule")
        formulas[modality] = {**formulas.get(modality, {}), **override}
    if entry is not None:
        takes = tuple(m for m in entry.modalities if m in INPUT_RATES)
        takes_source = f"LiteLLM map {catalog().litellm_version}"
        outputs = entry.output_modalities
    else:
        takes = ("text", *formulas)
        takes_source = f"the {family.name} rules" if family else "text only (no media rule)"
        outputs = ("text",)
    text_rule = (row.text if row else None) or (family.text if family else "estimate:chars/4")
    return Model(
        asked,
        bare,
        row.provider if row else (entry.provider if entry else provider or ""),
        family,
        formulas,
        text_rule,
        takes,
        takes_source,
        outputs,
        row,
        entry,
        prices,
    )


def resolve(model: str, prices: PriceSheets = ()) -> Model:
    """The model named ``model`` (provider prefixes, any case, dated snapshots, aliases)."""
    if not isinstance(model, str) or not model.strip():
        raise PriceError(f"a model name is needed, got {model!r}")
    paths = tuple(Path(p) for p in prices)
    return _resolve(model, paths, catalog(), tuple(sheet_stamp(p) for p in paths))


def rate_card(model: Model, at: dt.date | None = None, option: str = "standard") -> RateCard:
    """What ``model`` costs on ``at`` under ``option``: its sheet row, else genai-prices, else LiteLLM's map. Kept
    per model object, date and option in ``CARDS`` (whose ``forget`` drops it with the price data), so a folder's
    quotes look their card up once."""
    at = at or dt.date.today()
    key = (id(model), at, option)
    kept = CARDS.by_model.get(key)
    if kept is not None and kept[0] is model:  # the same object: an id is not reused while it is held here
        return kept[1]
    card = _rate_card(model, at, option)
    if len(CARDS.by_model) >= 4096:
        CARDS.by_model.clear()
    CARDS.by_model[key] = (model, card)
    return card


def _rate_card(model: Model, at: dt.date, option: str) -> RateCard:
    if option not in OPTIONS:
        raise PriceError(f"unknown price option {option!r}; use {', '.join(OPTIONS)}")
    if model.row is not None:
        return _sheet_card(model.row, option)
    card = CARDS.get(_genai_name(model), at, option)
    if card is not None:
        return _explicit_rates(card, model.entry, option)
    if model.entry is not None:
        return litellm_card(model.entry, at, option, catalog().litellm_version)
    raise PriceError(f"unknown model {model.asked!r}{_closest(model.name, model.prices)} (see `mmtok models`)")


def _explicit_rates(card: RateCard, entry: CatalogEntry | None, option: str) -> RateCard:
    """``card`` with each rate it only has from the text rate (``card.inherited``: an audio rate genai-prices does
    not give) taken from LiteLLM's map where that gives the model an explicit one."""
    if not card.inherited or entry is None:
        return card
    variant = "" if option == "standard" else option
    found = {rate: entry.cost_per_mtok(rate, variant) for rate in card.inherited}
    found = {rate: plain(value) for rate, value in found.items() if value is not None}
    if not found:
        return card
    tiers = tuple(Tier(t.above_input_tokens, {**t.rates, **found}) for t in card.tiers)
    source = f"LiteLLM map {catalog().litellm_version} {entry.litellm_key}"
    return dataclasses.replace(
        card,
        tiers=tiers,
        inherited=tuple(r for r in card.inherited if r not in found),
        rate_sources={**card.rate_sources, **dict.fromkeys(found, source)},
    )


def _genai_name(model: Model) -> str:
    """The name to look up in genai-prices, with the provider made explicit where it is known (so Claude on Vertex
    is not taken for Anthropic's own price)."""
    provider = model.entry.provider if model.entry else split_name(model.asked)[0]
    name = model.entry.name if model.entry else model.name
    return f"{provider}/{name}" if provider else name


def _closest(name: str, prices: tuple[Path, ...]) -> str:
    known = [*catalog().rows, *catalog().aliases, *sheets(prices).rows, *sheets(prices).aliases]
    close = difflib.get_close_matches(name, known, n=4, cutoff=0.6)
    return f"; closest: {', '.join(close)}" if close else ""


def _sheet_card(row: ModelRow, option: str) -> RateCard:
    from mmtok.budgets.sheets import ITEM_KEYS, MTOK_KEYS, RELATIVE_KEYS

    if option != "standard":
        raise PriceError(f"{row.sheet}: {row.name} has no {option} prices (a sheet row holds one set of rates)")
    rates = {MTOK_KEYS[k]: v for k, v in row.rates.items() if k in MTOK_KEYS}
    for key, rate in RELATIVE_KEYS.items():
        if key in row.rates:
            rates[rate] = rates["input"] * row.rates[key]
    per_item = {k: v for k, v in row.rates.items() if k in ITEM_KEYS}
    return RateCard(
        str(row.sheet), row.name, row.provider_page, row.as_of, option, (Tier(0, rates),), per_item=per_item
    )


# ------------------------------------------------------------------------------------------------------ tokens
def _relabel(count: F.TokenCount, floor: str) -> F.TokenCount:
    label = F.weakest([count.label, floor])
    return count if label == count.label else count.but(label=label)


def _image_count(model: Model, width: int, height: int, detail: str | None) -> F.TokenCount:
    params = model.formulas.get("image")
    if params is None and model.family is None and model.entry is None and model.row is None:
        # a name nothing here knows (no catalog entry, sheet row or family rule): most likely a typo
        closest = _closest(model.name, model.prices)
        raise PriceError(f"unknown model {model.asked!r} (no catalog entry, sheet row or token rule){closest}")
    if params is None or not model.accepts("image"):
        raise PriceError(f"{model.asked} does not take images")
    formula, floor = params["formula"], params.get("label", "exact")
    if formula == "openai-tile":
        count = F.openai_tile(
            width, height, params["base_tokens"], params["tile_tokens"], detail or "auto", params.get("short_side", 768)
        )
    elif formula == "openai-patch":
        count = _openai_patch(model, params, width, height, detail)
    elif formula == "anthropic-patches":
        count = F.anthropic_patches(width, height, params["max_edge"], params["max_tokens"])
    elif formula == "gemini-tiles":
        count = F.gemini_tiles(width, height, params.get("tokens_per_tile", 258))
    elif formula == "gemini-2.5":
        level = detail or params.get("default_level", "unspecified")
        if level in params["levels"]:
            F._check_size(width, height)
            count = F.fixed_level(level, params["levels"], "documented")
        elif level in ("unspecified", "high", "auto"):
            tiles = F.gemini_tiles(width, height)
            working = f"media_resolution={level} (pan & scan): {tiles.working}"
            count = tiles.but(working, "estimate")
        else:
            raise PriceError(f"media_resolution must be low, medium or high on {model.asked}, got {level!r}")
    elif formula == "fixed-level":
        F._check_size(width, height)
        count = F.fixed_level(detail or params["default_level"], params["levels"], "exact")
    elif formula == "mistral-patches":
        count = F.mistral_patches(width, height, params["patch_px"], params["max_px"])
    elif formula == "tiles":
        count = F.tiles(
            width, height, params["tile_px"], params["tile_tokens"], params["base_tokens"], params["fit_px"]
        )
    elif formula == "qwen2-vl":
        count = F.qwen2_vl_image(
            width, height, params.get("min_pixels", 3136), params.get("max_pixels", 12845056), params.get("factor", 28)
        )
    elif formula == "llava-next":
        count = F.llava_next(width, height)
    elif formula == "fixed":
        F._check_size(width, height)
        count = F.fixed(params["tokens"], f"{model.family.name if model.family else model.name} fixed")
    elif formula == "patch-grid":
        count = F.patch_grid(width, height, params["patch_px"])
    else:
        raise PriceError(f"{model.asked}: unknown image formula {formula!r}")
    return _relabel(count, floor)


def _openai_patch(model: Model, params: dict[str, Any], width: int, height: int, detail: str | None) -> F.TokenCount:
    levels = params["levels"]
    level = params["auto"] if detail in (None, "auto") else detail
    if level not in levels:
        raise PriceError(f"detail={detail} is not available on {model.asked} (levels: {', '.join(levels)}, auto)")
    sizing = levels[level]
    count = F.openai_patch(width, height, params["multiplier"], sizing.get("patch_budget"), sizing["max_dim"])
    return count.but(f"detail={level}: {count.working}")


def _audio_count(model: Model, duration_s: float, what: str = "audio", by_duration: bool = False) -> F.TokenCount:
    """The audio's tokens by the model's rule; with no rule but a price per second (``by_duration``), no tokens:
    the bill is the duration's."""
    params = model.formulas.get("audio")
    if params is None and by_duration and model.accepts("audio"):
        return F.TokenCount(0, f"{what}: {duration_s:.3f} s, billed by duration (no token rule)", "exact")
    if params is None or not model.accepts("audio"):
        raise PriceError(f"{model.asked} does not take audio")
    return F.per_second(duration_s, params["tokens_per_second"], what, params.get("label", "exact"))


def _video_counts(model: Model, video: Video, detail: str | None) -> tuple[list[tuple[str, F.TokenCount]], str]:
    """(modality, count) parts of a video: its frames and, where the model bills it apart, its sound; and a note
    when the sound track is not sent."""
    params = model.formulas.get("video")
    if params is None or not model.accepts("video"):
        raise PriceError(f"{model.asked} does not take video")
    formula, floor, duration = params["formula"], params.get("label", "exact"), video.duration_s
    parts: list[tuple[str, F.TokenCount]] = []
    if formula == "per-second":
        parts.append(("video", F.per_second(duration, params["tokens_per_second"], "video")))
    elif formula == "frames":
        level = detail or params["default_level"]
        per_frame = F.fixed_level(level, params["levels"], floor).tokens
        frames = math.ceil(duration * params["fps"] - 1e-9)
        working = f"{frames} frames at {params['fps']:g} fps x {per_frame} (media_resolution={level})"
        parts.append(("video", F.TokenCount(frames * per_frame, f"{working} = {frames * per_frame}", floor)))
    elif formula == "qwen2-vl-video":
        parts.append(("video", F.qwen2_vl_video(duration, video.frame_count, video.width, video.height, params["fps"])))
    elif formula == "frames-patch-grid":
        frames = math.ceil(duration * params["fps"] - 1e-9)
        grid = F.patch_grid(video.width, video.height, params["patch_px"])
        parts.append(("video", F.TokenCount(frames * grid.tokens, f"{frames} frames x ({grid.working})")))
    else:
        raise PriceError(f"{model.asked}: unknown video formula {formula!r}")
    parts = [(m, _relabel(c, floor)) for m, c in parts]
    if video.audio is None:
        return parts, ""
    sound = video.audio.duration_s
    if "audio_tokens_per_second" in params:
        rate = params["audio_tokens_per_second"]
        parts.append(("audio", F.per_second(sound, rate, "sound track", "documented")))
    elif model.accepts("audio") and "audio" in model.formulas:
        parts.append(("audio", _audio_count(model, sound, "sound track")))
    else:
        return parts, f"{model.asked} takes no audio: the sound track is not sent"
    return parts, ""


def _counts(
    model: Model, item: Any, detail: str | None, by_duration: bool = False
) -> tuple[list[tuple[str, F.TokenCount, float]], str]:
    """(modality, count, quantity) parts of one attachment; quantity is images or seconds, for per-item rates
    (``by_duration``: the model bills audio per second)."""
    if _is_token_sequence(item):
        if not (model.family and model.family.name == "mmtok-semantic"):
            raise PriceError(f"token sequences are priced on mmtok's own models (mmtok-*), not {model.asked}")
        if len(item) == 0:
            raise PriceError("an empty token sequence: nothing to price")
        what = f"{len(item)} {item.modality} tokens from {item.tokenizer or 'a tokenizer'}"
        return [(item.modality, F.TokenCount(len(item), what), 1.0)], ""
    if isinstance(item, Image):
        return [("image", _image_count(model, item.width, item.height, detail), 1.0)], ""
    if isinstance(item, Audio):
        count = _audio_count(model, item.duration_s, by_duration=by_duration)
        return [("audio", count, item.duration_s)], _implausible_length(item)
    if isinstance(item, Video):
        parts, note = _video_counts(model, item, detail)
        note = "; ".join(n for n in (note, _implausible_length(item)) if n)
        seconds = {"video": item.duration_s, "audio": item.audio.duration_s if item.audio else 0.0}
        return [(m, c, seconds[m]) for m, c in parts], note
    if isinstance(item, Text):
        from mmtok.budgets.text import count_text  # tiktoken loads only when there is text to count

        if not item.text.strip():
            raise PriceError("empty text (or only white space): nothing to price")

        return [("text", count_text(item.text, model.text_rule), 1.0)], ""
    raise PriceError(f"cannot price a {type(item).__name__}")


MIN_PLAUSIBLE_BITS_PER_SECOND = 8  # below any real codec's rate, even FLAC of silence: the header is not the data


def _implausible_length(media: Any) -> str:
    """A note when a file is far too small for the duration its header declares (priced from the header)."""
    size, seconds = getattr(media, "size_bytes", None), media.duration_s
    if not size or seconds <= 0 or size * 8 / seconds >= MIN_PLAUSIBLE_BITS_PER_SECOND:
        return ""
    return (
        f"its header declares {seconds:,.0f} s in {size:,} bytes ({size * 8 / seconds:.3g} bit/s): priced as "
        "declared, but the data cannot hold that; decode it (mmtok tokenize) to check"
    )


def _is_token_sequence(item: Any) -> bool:
    """Without importing torch: if mmtok.tokens was never imported, ``item`` cannot be a TokenSequence."""
    tokens = sys.modules.get("mmtok.tokens")
    return tokens is not None and isinstance(item, tokens.TokenSequence)


# ------------------------------------------------------------------------------------------------------- money
@dataclass(frozen=True)
class Options:
    """How the request is billed: see :func:`price`."""

    detail: str | None = None
    at: dt.date | None = None
    option: str = "standard"
    output_tokens: int = 0
    output_audio: bool = False
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    text_tokens: int = 0  # more text input tokens, counted by the caller (a prompt of known size)

    def __post_init__(self) -> None:
        for name in ("output_tokens", "cached_input_tokens", "cache_write_tokens", "text_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise PriceError(f"{name} must be a non-negative integer, got {value!r}")
        if self.at is not None and not isinstance(self.at, dt.date):
            raise PriceError(f"at must be a date like 2026-07-24, got {self.at!r}")
        if self.detail is not None and self.detail not in DETAIL_LEVELS:
            raise PriceError(f"detail must be one of {', '.join(DETAIL_LEVELS)}, got {self.detail!r}")
        if self.option not in OPTIONS:
            raise PriceError(f"unknown price option {self.option!r}; use {', '.join(OPTIONS)}")

    @classmethod
    def of(
        cls, *, at: dt.date | str | None = None, batch: bool = False, tier: str | None = None, **fields: Any
    ) -> Options:
        """Options from the user's words: a date as text, ``batch`` / ``tier`` as the one price option they are."""
        if isinstance(at, str):
            try:
                at = dt.date.fromisoformat(at)
            except ValueError:
                raise PriceError(f"at must be a date like 2026-07-24, got {at!r}") from None
        if batch and tier:
            raise PriceError("batch and a service tier are different price options: choose one")
        if tier is not None and tier not in ("flex", "priority"):
            raise PriceError(f"tier must be flex or priority, got {tier!r}")
        return cls(at=at, option="batch" if batch else (tier or "standard"), **fields)


def _rate_text(card: RateCard, rate: Decimal, what: str, tier: str, rate_name: str = "") -> str:
    where = card.rate_sources.get(rate_name) or f"{card.source} {card.model_ref}"
    if rate_name in card.inherited:
        where += f": its text rate, for want of an {AUDIO_RATE_WORDS[rate_name]} rate"
    option = "" if card.option == "standard" else f", {card.option}"
    return f"${rate}/1M {what} ({where}{option}{', ' + tier if tier else ''})"


def _line_cost(
    card: RateCard, rates: dict[str, Decimal], modality: str, tokens: int, quantity: float, tier: str
) -> tuple[Decimal, str]:
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
    return tokens * rate / MILLION, _rate_text(
        card, rate, what.get(rate_name, f"{rate_name.replace('_', ' ')} tokens"), tier, rate_name
    )


def _quote(model: Model, attachments: Sequence[tuple[str, Any]], options: Options, label: str) -> Quote:
    at = options.at or dt.date.today()
    card = rate_card(model, at, options.option)
    counted, missing, warnings = _counted_parts(model, attachments, options, "audio_input_per_second" in card.per_item)
    input_tokens = sum(c.tokens for _, _, c, _ in counted)
    tier = card.tier_for(input_tokens)
    tier_text = f"tier > {tier.above_input_tokens:,} input tokens" if tier.above_input_tokens else ""
    lines = []
    for name, modality, count, quantity in counted:
        try:
            cost, rate = _line_cost(card, tier.rates, modality, count.tokens, quantity, tier_text)
        except PriceError as e:
            missing.append(f"{name}: {e}")
            continue
        lines.append(Line(name, modality, count.tokens, cost, count.working, rate, count.label))
    if missing and not lines:
        raise PriceError("; ".join(missing))  # nothing in the request can be priced: an error, not a zero
    if options.output_tokens:
        lines.append(_output_line(model, card, tier.rates, options, tier_text))
    if card.request_fee:
        lines.append(Line("request", "request", 0, card.request_fee, "per-request fee", f"${card.request_fee}/request"))
    warnings += _model_warnings(model, card, at, input_tokens, tier.above_input_tokens)
    warnings += _inherited_warnings(card, lines)
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
    )


def _counted_parts(
    model: Model, attachments: Sequence[tuple[str, Any]], options: Options, by_duration: bool = False
) -> tuple[list[tuple[str, str, F.TokenCount, float]], list[str], list[str]]:
    """(name, modality, count, quantity) of each part of the request (media by the model's rules, then the token
    counts given), the parts that cannot be counted, and the counting notes."""
    counted: list[tuple[str, str, F.TokenCount, float]] = []
    missing: list[str] = []
    warnings: list[str] = []
    for name, item in attachments:
        try:
            parts, note = _counts(model, item, options.detail, by_duration)
        except PriceError as e:
            missing.append(f"{name}: {e}")
            continue
        counted += [(name, m, c, q) for m, c, q in parts]
        warnings += [f"{name}: {n}" for n in (note, format_warning(model, item)) if n]
    given = (("text", options.text_tokens), ("cache_read", options.cached_input_tokens))
    for kind, tokens in (*given, ("cache_write", options.cache_write_tokens)):
        if tokens:
            counted.append(
                ("cache", kind, F.TokenCount(tokens, f"{tokens} {kind.replace('_', ' ')} tokens, as given"), 0)
            )
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


def _inherited_warnings(card: RateCard, lines: Sequence[Line]) -> list[str]:
    """A line priced at the text rate for want of an audio rate: the provider may charge audio more."""
    used = sorted({INPUT_RATES.get(line.modality, line.modality) for line in lines} & set(card.inherited))
    words = AUDIO_RATE_WORDS
    return [
        f"{card.source} gives {card.model_ref} no {words[r]} rate: its {words[r]} tokens are priced at the text "
        f"rate, which may be below the provider's (check {card.source_url or 'the provider page'}, or give a "
        "price sheet)"
        for r in used
    ]


def _output_line(model: Model, card: RateCard, rates: dict[str, Decimal], options: Options, tier: str) -> Line:
    audio = options.output_audio or model.output_modalities == ("audio",)
    if audio and "audio" not in model.output_modalities and model.entry is not None:
        raise PriceError(f"{model.asked} does not produce audio")
    rate_name = "output_audio" if audio else "output"
    rate = rates.get(rate_name)
    if rate is None:
        raise PriceError(f"{card.source}: {card.model_ref} has no {rate_name.replace('_', ' ')} rate")
    tokens = options.output_tokens
    what = "audio output tokens" if audio else "output tokens"
    return Line(
        "output",
        rate_name,
        tokens,
        tokens * rate / MILLION,
        f"{tokens} {what}, as given",
        _rate_text(card, rate, what, tier, rate_name),
    )


# ------------------------------------------------------------------------------------------------------- price
def _describe(item: Any) -> str:
    if isinstance(item, (str, os.PathLike)):
        return os.fspath(item)
    path = getattr(item, "path", None)
    if path is not None:
        return str(path)
    if isinstance(item, Text):
        return "<text>"
    return f"<{type(item).__name__}>"


def _attachments(items: Any, text: str | None, allow_empty: bool = False) -> list[tuple[str, Any]]:
    if items is None:
        items = []
    elif isinstance(items, (str, os.PathLike)) or not isinstance(items, (list, tuple)):
        items = [items]
    out = []
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            out.append((_describe(item), item))
        elif os.fspath(item).endswith(".safetensors"):  # a token file: its sequences are the attachments
            from mmtok.tokens import load_sequences

            sequences = load_sequences(item)
            single = len(sequences) == 1
            out += [(os.fspath(item) if single else f"{os.fspath(item)}[{k}]", s) for k, s in sequences.items()]
        else:
            out.append((os.fspath(item), load(item)))
    if text is not None:
        out.append(("<text>", Text.from_string(text)))
    if not out and not allow_empty:
        raise PriceError("nothing to price: pass paths, media objects, TokenSequences or text=...")
    return out


def price(
    items: Any = None,
    model: str = "gpt-4o",
    *,
    text: str | None = None,
    detail: str | None = None,
    at: dt.date | str | None = None,
    batch: bool = False,
    tier: str | None = None,
    output_tokens: int = 0,
    output_audio: bool = False,
    cached_input_tokens: int = 0,
    cache_write_tokens: int = 0,
    text_tokens: int = 0,
    prices: PriceSheets = (),
) -> Quote:
    """Price one request on one model.

    ``items``: a file path, a loaded ``Image``/``Audio``/``Video``/``Text``, a ``TokenSequence`` (mmtok-* models), or
    a list of them; with ``text``, they form one request. ``detail``: OpenAI low/high/original/auto, or a Gemini
    media_resolution level. ``at``: the price on a past date. ``batch`` / ``tier`` ("flex", "priority"): the
    provider's discounted or priority rates. ``output_tokens``: the output, counted once, at the audio-output rate
    with ``output_audio``. ``cached_input_tokens`` / ``cache_write_tokens``: more input tokens read from / written to
    the prompt cache. ``text_tokens``: more text input tokens, of a prompt whose size you know. ``prices``: your own
    sheets (their rows and aliases override).
    """
    options = _options(
        detail, at, batch, tier, output_tokens, output_audio, cached_input_tokens, cache_write_tokens, text_tokens
    )
    given = options.text_tokens + options.cached_input_tokens + options.cache_write_tokens
    attachments = _attachments(items, text, allow_empty=given > 0)
    label = attachments[0][0] if len(attachments) == 1 else f"request of {len(attachments)} parts"
    label = label if attachments else "<text>"
    return _quote(resolve(model, prices), attachments, options, label)


def _options(
    detail: Any, at: Any, batch: Any, tier: Any, output: Any, audio: Any, cached: Any, written: Any, text: Any
) -> Options:
    """``Options.of`` for ``price``'s arguments, made once per distinct set (a folder prices with the same ones)."""
    try:
        return _options_cached(detail, at, batch, tier, output, audio, cached, written, text)
    except TypeError:  # an unhashable argument: Options.of says what is wrong with it
        return _options_of(detail, at, batch, tier, output, audio, cached, written, text)


def _options_of(
    detail: Any, at: Any, batch: Any, tier: Any, output: Any, audio: Any, cached: Any, written: Any, text: Any
) -> Options:
    return Options.of(
        detail=detail,
        at=at,
        batch=batch,
        tier=tier,
        output_tokens=output,
        output_audio=audio,
        cached_input_tokens=cached,
        cache_write_tokens=written,
        text_tokens=text,
    )


_options_cached = functools.lru_cache(maxsize=256, typed=True)(_options_of)  # typed: 1 is not True


def price_requests(
    requests: Iterable[tuple[str, list[str | os.PathLike[str]]]],
    models: Sequence[str],
    options: Options,
    *,
    text: str | None = None,
    prices: PriceSheets = (),
) -> Iterator[tuple[str, MmtokError | list[Quote | MmtokError]]]:
    """Price each (label, paths) request, with ``text``, on every model; each file is read once. A file that cannot
    be read fails its request (one error in place of the list); a model that cannot price a request is an error in
    its place in the list. Nothing is raised, so a batch always finishes."""
    resolved = [resolve(m, prices) for m in models]  # bad names fail here, before any work
    for label, paths in requests:
        try:
            attachments = _attachments(paths, text)
        except MmtokError as e:
            yield label, e
            continue
        results: list[Quote | MmtokError] = []
        for model in resolved:
            try:
                results.append(_quote(model, attachments, options, label))
            except MmtokError as e:
                results.append(e)
        yield label, results


def file_requests(
    paths: Iterable[str | os.PathLike[str]], extra: Sequence[str | os.PathLike[str]] = ()
) -> Iterator[tuple[str, list[str | os.PathLike[str]] | MediaError]]:
    """One request per file under ``paths`` (folders walked), each with the ``extra`` attachments."""
    for item in iter_files(paths):
        if isinstance(item, MediaError):
            yield str(item.source), item
        else:
            yield str(item), [item, *extra]


# ------------------------------------------------------------------------------------------------- image tokens
def image_token_count(
    width: int, height: int, model: str, detail: str | None = None, prices: PriceSheets = ()
) -> F.TokenCount:
    """Tokens of a ``width`` x ``height`` image (as displayed) on ``model``, with the working and its label."""
    if detail is not None and detail not in DETAIL_LEVELS:
        raise PriceError(f"detail must be one of {', '.join(DETAIL_LEVELS)}, got {detail!r}")
    return _image_count(resolve(model, prices), int(width), int(height), detail)


def model_image_count(model: Model, width: int, height: int, detail: str | None = None) -> F.TokenCount:
    """``image_token_count`` for a model already resolved."""
    return _image_count(model, int(width), int(height), detail)


def image_tokens(width: int, height: int, model: str, detail: str | None = None, prices: PriceSheets = ()) -> int:
    """Tokens of a ``width`` x ``height`` image on ``model`` (``detail``: OpenAI low / high / original / auto, or a
    Gemini media_resolution level)."""
    return image_token_count(width, height, model, detail, prices).tokens
