"""Rates in USD per million tokens, from a maintained price database: genai-prices first, then LiteLLM's map.

A :class:`RateCard` holds what one model costs on one date under one service option (standard, batch, flex,
priority): per-million-token rates for each kind of token the request can carry, in long-context tiers where the
provider has them, and a per-request fee. Pricing a request is then a few multiplications (``pricing/``).

genai-prices (pydantic's maintained database, ``Decimal`` prices, dated changes, batch/flex/priority variants,
cliff-style long-context tiers) is the source for provider models. Its data is read through its own API:
``find_provider_model`` for the name and ``calc_price`` for every number, probed once per rate with a usage that
isolates that rate; a test checks that quotes equal ``calc_price`` on the whole usage. Importing genai-prices costs
~0.15 s (pydantic), so the cards are cached on disk per (installed data, name, date, option): a warm CLI call never
imports it. Models genai-prices does not know are priced from LiteLLM's cost fields in the model catalog.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import importlib.util
import json
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple

from mmtok.budgets.pricing.catalog import CatalogEntry, split_name
from mmtok.errors import PriceError

MILLION = Decimal(1_000_000)
OPTIONS = {
    "standard": None,
    "batch": {"processing": "batch"},
    "flex": {"service_tier": "flex"},
    "priority": {"service_tier": "priority"},
}
GENAI_PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "google": "google",
    "xai": "x-ai",
    "mistral": "mistral",
}
CARD_FORMAT = 4  # bump when RateCard's stored form changes


class GenaiRate(NamedTuple):
    """How one rate is read from genai-prices: the price that sets it, and the rate whose price it takes without
    one (as calc_price bills it: audio tokens as input tokens when there is no audio rate; a rate with neither is
    absent, never a zero), and the usage of a request that isolates it (n tokens of each key), with the side of the
    bill it lands on."""

    price_key: str
    parent: str | None
    usage: tuple[str, ...]
    side: str


# The kinds of token a request carries, as genai-prices' usage keys name them (cache and media counts are parts of
# input_tokens; audio output is a part of output_tokens).
GENAI_RATES = {
    "input": GenaiRate("input_mtok", None, ("input_tokens",), "input_price"),
    "cache_read": GenaiRate("cache_read_mtok", "input", ("input_tokens", "cache_read_tokens"), "input_price"),
    "cache_write": GenaiRate("cache_write_mtok", "input", ("input_tokens", "cache_write_tokens"), "input_price"),
    "input_audio": GenaiRate("input_audio_mtok", "input", ("input_tokens", "input_audio_tokens"), "input_price"),
    "input_image": GenaiRate("input_image_mtok", "input", ("input_tokens", "input_image_tokens"), "input_price"),
    "input_video": GenaiRate("input_video_mtok", "input", ("input_tokens", "input_video_tokens"), "input_price"),
    "output": GenaiRate("output_mtok", None, ("input_tokens", "output_tokens"), "output_price"),
    "output_audio": GenaiRate(
        "output_audio_mtok", "output", ("input_tokens", "output_tokens", "output_audio_tokens"), "output_price"
    ),
}
# Rates whose parent's price is a guess rather than the provider's rule: providers bill image and video tokens as
# input tokens, but audio tokens mostly at their own (higher) rates, so an audio rate taken from the text rate is
# flagged (``RateCard.inherited``) and replaced by an explicit one from LiteLLM's map where that has it.
DOUBTFUL_INHERITED = ("input_audio", "output_audio")
# genai-prices' per-hour audio prices: models billed by duration, not tokens. Provider pages read 2026-12-01:
# developers.openai.com/api/docs/models/gpt-live-1 ("$0.05 per minute, billed per second", session time: the file's
# duration is the least a session carrying it lasts), .../gpt-realtime-whisper ("$0.017 per minute" of audio).
AUDIO_TIME_PRICES = ("audio_hours", "input_audio_hours")


@dataclass(frozen=True)
class Tier:
    above_input_tokens: int  # applies when the request's input tokens exceed this (0: the base rates)
    rates: dict[str, Decimal]  # rate name -> USD per 1M tokens


@dataclass(frozen=True)
class RateCard:
    source: str  # "genai-prices", "LiteLLM map 1.110.2", or a sheet's path
    model_ref: str  # the model as the source names it ("openai:gpt-5.2")
    source_url: str  # the provider's price page, where known
    as_of: dt.date  # the date these prices apply to (a sheet: the date it was read)
    option: str  # standard | batch | flex | priority
    tiers: tuple[Tier, ...]
    request_fee: Decimal = Decimal(0)
    per_item: dict[str, Decimal] = field(default_factory=dict)  # sheets: image_per_image, audio/video_per_second
    deprecated: bool = False
    context_window: int | None = None
    inherited: tuple[str, ...] = ()  # DOUBTFUL_INHERITED rates that are the text rate, for want of their own
    rate_sources: dict[str, str] = field(default_factory=dict)  # rate -> its source, where not ``source``

    def tier_for(self, input_tokens: int) -> Tier:
        """The tier a request of ``input_tokens`` is billed in: the highest one it exceeds ("cliff" pricing)."""
        chosen = self.tiers[0]
        for tier in self.tiers[1:]:
            if input_tokens > tier.above_input_tokens:
                chosen = tier
        return chosen

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "model_ref": self.model_ref,
            "source_url": self.source_url,
            "as_of": self.as_of.isoformat(),
            "option": self.option,
            "tiers": [[t.above_input_tokens, {k: str(v) for k, v in t.rates.items()}] for t in self.tiers],
            "request_fee": str(self.request_fee),
            "deprecated": self.deprecated,
            "context_window": self.context_window,
            "per_item": {k: str(v) for k, v in self.per_item.items()},
            "inherited": list(self.inherited),
            "rate_sources": dict(self.rate_sources),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RateCard:
        return cls(
            data["source"],
            data["model_ref"],
            data["source_url"],
            dt.date.fromisoformat(data["as_of"]),
            data["option"],
            tuple(Tier(int(above), {k: Decimal(v) for k, v in rates.items()}) for above, rates in data["tiers"]),
            Decimal(data["request_fee"]),
            per_item={k: Decimal(v) for k, v in data["per_item"].items()},
            deprecated=bool(data["deprecated"]),
            context_window=data["context_window"],
            inherited=tuple(data["inherited"]),
            rate_sources={str(k): str(v) for k, v in data["rate_sources"].items()},
        )


def plain(value: Decimal) -> Decimal:
    """``value`` without trailing zeros or an exponent: 10.00 -> 10, 1.750 -> 1.75 (never 1E+1)."""
    return Decimal(format(value.normalize(), "f"))


def check_option(option: str) -> dict[str, str] | None:
    if option not in OPTIONS:
        raise PriceError(f"unknown price option {option!r}; use {', '.join(OPTIONS)}")
    return OPTIONS[option]


# ------------------------------------------------------------------------------------------------ genai-prices
@functools.cache
def genai_data_file() -> Path | None:
    """Price data taken in with ``mmtok prices update --from data.json``; it replaces the installed snapshot."""
    from mmtok.cache import cache_dir

    path = cache_dir("prices") / "genai-prices-data.json"
    return path if path.is_file() else None


@functools.cache
def genai_fingerprint() -> str:
    """Which genai-prices data is in use, without importing it: the installed data module's size and time, or the
    taken-in data file's hash."""
    custom = genai_data_file()
    if custom is not None:
        import hashlib  # here, not at the top: OpenSSL's module takes ~10 ms to load, on every CLI start

        return "file-" + hashlib.sha1(custom.read_bytes()).hexdigest()[:16]
    spec = importlib.util.find_spec("genai_prices")
    if spec is None or spec.origin is None:
        raise PriceError("genai-prices is not installed: pip install genai-prices")
    data = Path(spec.origin).with_name("data.py")
    stat = data.stat()
    return f"pkg-{stat.st_size}-{stat.st_mtime_ns}"


@functools.cache
def genai_snapshot() -> Any:
    """genai-prices' data snapshot, with taken-in data applied. Never starts its updater: no network."""
    from genai_prices import data_snapshot

    custom = genai_data_file()
    if custom is None:
        return data_snapshot.get_snapshot()
    from genai_prices.types import _providers_from_raw  # the parser its own updater uses

    from mmtok.files import read_json

    try:
        providers = _providers_from_raw(read_json(custom, "genai-prices data", PriceError, max_bytes=64 << 20))
    except (TypeError, ValueError, KeyError) as e:
        raise PriceError(f"{custom}: not genai-prices data ({type(e).__name__}: {e})") from None
    return data_snapshot.DataSnapshot(providers=providers, from_auto_update=False)


def genai_card(name: str, at: dt.date, option: str) -> RateCard | None:
    """The card genai-prices gives ``name`` on ``at`` under ``option``; None when it does not know the model."""
    from genai_prices import Usage
    from genai_prices.types import TieredPrices

    provider_hint, bare = split_name(name)
    snapshot = genai_snapshot()
    try:
        provider, model = snapshot.find_provider_model(bare, None, GENAI_PROVIDERS.get(provider_hint or ""), None)
    except LookupError:
        return None
    when = dt.datetime.combine(at, dt.time(12), tzinfo=dt.UTC)
    context = check_option(option)
    if context is not None and not _has_variant(model, context, when):
        raise PriceError(f"genai-prices has no {option} prices for {provider.id}:{model.id} on {at}")
    prices = model.get_prices(when, context)
    starts = sorted({t.start for v in vars(prices).values() if isinstance(v, TieredPrices) for t in v.tiers})

    def cost(**usage: int) -> Any:
        return prices.calc_price(Usage(**usage))

    explicit = {k for k, v in vars(prices).items() if v is not None}
    rates = _rates_with_prices(explicit)
    tiers = []
    for index, above in enumerate([0, *starts]):
        n = above + 1 if index else (starts[0] if starts else 1_000_000)  # a request inside this tier
        probes = {rate: cost(**dict.fromkeys(GENAI_RATES[rate].usage, n))[GENAI_RATES[rate].side] for rate in rates}
        tiers.append(Tier(above, {rate: plain(value * MILLION / n) for rate, value in probes.items()}))
    fee = cost()["total_price"]
    per_item = {}
    if explicit & set(AUDIO_TIME_PRICES):  # billed by duration: one hour of input audio, less the request fee
        hour = Decimal(cost(audio_seconds=3600, input_audio_seconds=3600)["total_price"]) - Decimal(fee)
        per_item["audio_input_per_second"] = hour / 3600
    urls = provider.pricing_urls or []
    return RateCard(
        "genai-prices",
        f"{provider.id}:{model.id}",
        urls[0] if urls else "",
        at,
        option,
        tuple(tiers),
        plain(Decimal(fee)),
        per_item=per_item,
        deprecated=bool(model.deprecated),
        context_window=model.context_window,
        inherited=tuple(
            r
            for r in DOUBTFUL_INHERITED
            if r in rates and GENAI_RATES[r].price_key not in explicit and not (r == "input_audio" and per_item)
        ),
    )


def _rates_with_prices(explicit: set[str]) -> list[str]:
    """The token rates a model has: its own price, or its parent's (GENAI_RATES)."""
    have: list[str] = []
    for rate, how in GENAI_RATES.items():
        if how.price_key in explicit or how.parent in have:
            have.append(rate)
    return have


def _has_variant(model: Any, context: dict[str, str], when: dt.datetime) -> bool:
    return any(
        all(context.get(k) == v for k, v in variant.when.items())
        and (variant.constraint is None or variant.constraint.active(when))
        for variant in model.price_variants or ()
    )


class CardCache:
    """Rate cards by (data, name, date, option): in memory, and in one JSON file under the user cache (written
    atomically), so a new process prices without importing genai-prices."""

    def __init__(self) -> None:
        self._stored: dict[str, dict[str, Any] | None] | None = None
        self._cards: dict[str, RateCard | None] = {}
        self.by_model: dict[tuple[int, dt.date, str], tuple[Any, RateCard]] = {}  # pricing's final card per model

    @functools.cached_property
    def _file(self) -> Path:
        from mmtok.cache import cache_dir

        return cache_dir("prices") / f"cards-{CARD_FORMAT}-{genai_fingerprint()}.json"

    def _load(self) -> dict[str, dict[str, Any] | None]:
        if self._stored is None:
            try:
                data = json.loads(self._file.read_text(encoding="utf-8")) if self._file.is_file() else {}
                self._stored = data if isinstance(data, dict) else {}
            except (OSError, ValueError):
                self._stored = {}  # a damaged cache is rebuilt, never trusted
        return self._stored

    def get(self, name: str, at: dt.date, option: str) -> RateCard | None:
        provider, bare = split_name(name)
        key = f"{provider or ''}|{bare}|{at.isoformat()}|{option}"
        if key not in self._cards:
            self._cards[key] = self._read(key, name, at, option)
        return self._cards[key]

    def _read(self, key: str, name: str, at: dt.date, option: str) -> RateCard | None:
        stored = self._load()
        if key in stored:
            try:
                return None if stored[key] is None else RateCard.from_json(stored[key])
            except (KeyError, TypeError, ValueError, ArithmeticError):
                pass  # a stale or tampered entry: computed again below
        card = genai_card(name, at, option)
        stored[key] = None if card is None else card.to_json()
        from mmtok.files import write_atomic

        with contextlib.suppress(OSError):  # a read-only cache only costs speed
            write_atomic(self._file, json.dumps(stored, sort_keys=True))
        return card

    def forget(self) -> None:
        self.__init__()
        self.__dict__.pop("_file", None)


CARDS = CardCache()


def forget() -> None:
    """Drop what this process remembers of price data (after new data was taken in or removed)."""
    for cached in (genai_data_file, genai_fingerprint, genai_snapshot):
        cached.cache_clear()
    CARDS.forget()


# --------------------------------------------------------------------------------------------- LiteLLM's map
def litellm_card(entry: CatalogEntry, at: dt.date, option: str, version: str) -> RateCard:
    """A card from the LiteLLM cost fields kept in the catalog (for models genai-prices does not price)."""
    variant = "" if option == "standard" else option
    check_option(option)

    def rates(above_200k: bool) -> dict[str, Decimal]:
        out = {}
        for rate in ("input", "cache_read", "cache_write", "input_audio", "input_image", "output", "output_audio",
                     "output_image"):  # fmt: skip
            value = entry.cost_per_mtok(rate, variant, above_200k)
            if value is None and above_200k:
                value = entry.cost_per_mtok(rate, variant)
            if value is not None:
                out[rate] = plain(value)
        return out

    base = rates(False)
    if "input" not in base:
        what = f"{option} prices" if variant else "prices"
        raise PriceError(f"LiteLLM's map has no {what} for {entry.litellm_key}, and genai-prices does not know it")
    inherited = tuple(rate for rate in DOUBTFUL_INHERITED if rate not in base)  # the text rate, flagged
    for child, parent in (
        ("cache_read", "input"),
        ("cache_write", "input"),
        ("input_audio", "input"),
        ("input_image", "input"),
        ("input_video", "input"),
        ("output_audio", "output"),
    ):
        if parent in base:
            base.setdefault(child, base[parent])
    tiers = [Tier(0, base)]
    if entry.cost_per_mtok("input", variant, above_200k=True) is not None:
        tiers.append(Tier(200_000, {**base, **rates(True)}))
    return RateCard(
        f"LiteLLM map {version}", entry.litellm_key, entry.source_url, at, option, tuple(tiers),
        context_window=entry.max_input_tokens, inherited=inherited,
    )  # fmt: skip
