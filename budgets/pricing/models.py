"""Models as mmtok knows them (token rules, what they take) and their rate cards (sheet, genai-prices, LiteLLM)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmtok.budgets.pricing.catalog import Catalog, CatalogEntry, catalog, dashed_date, split_name
from mmtok.budgets.pricing.money import CARDS, OPTIONS, RateCard, Tier, litellm_card, plain
from mmtok.budgets.pricing.names import closest_names
from mmtok.budgets.pricing.sheets import Family, ModelRow, families, sheet_stamp, sheets
from mmtok.errors import PriceError

PriceSheets = Sequence[str | os.PathLike[str]]
INPUT_RATES = {"text": "input", "image": "input_image", "audio": "input_audio", "video": "input_video"}


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
    raise PriceError(f"unknown model {model.asked!r}{closest_names(model.name, model.prices)} (see `mmtok models`)")


LITELLM_ONLY_RATES = ("output_image",)  # rates genai-prices has no field for: LiteLLM's map gives them


def _explicit_rates(card: RateCard, entry: CatalogEntry | None, option: str) -> RateCard:
    """``card`` with each rate it only has from the text rate (``card.inherited``: an audio rate genai-prices does
    not give), and each it lacks that genai-prices has no field for (image output), taken from LiteLLM's map where
    that gives the model an explicit one."""
    wanted = (*card.inherited, *(r for r in LITELLM_ONLY_RATES if r not in card.tiers[0].rates))
    if not wanted or entry is None:
        return card
    variant = "" if option == "standard" else option
    found = {rate: entry.cost_per_mtok(rate, variant) for rate in wanted}
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


def _sheet_card(row: ModelRow, option: str) -> RateCard:
    from mmtok.budgets.pricing.sheets import ITEM_KEYS, MTOK_KEYS, RELATIVE_KEYS

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


def provider_of(model: Model) -> str:
    """The provider whose settings and limits a model has: the catalog's, else its rule family's."""
    if model.provider:
        return model.provider
    family = model.family.name if model.family else ""
    return family.split("-")[0] if family.split("-")[0] in ("openai", "anthropic", "google", "xai") else ""
