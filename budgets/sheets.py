"""Price sheets (``prices/*.toml``) and model families (``families.toml``): loading, validation, lookup.

A sheet lists models with their rates in USD as exact decimals, each row with its ``source`` URL and ``as_of``
date. Rates per modality: ``*_per_mtok`` (per million tokens), ``*_per_image`` / ``*_per_second`` (per item), or
``*_relative`` (a multiple of the text input rate, for mmtok's semantic-granularity scheme). A row may override
its family's formula parameters (``image = { tile_tokens = 180 }``) to calibrate against measured bills.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import functools
import os
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from mmtok.errors import PriceError
from mmtok.files import read_toml

MODALITIES = ("text", "image", "audio", "video")
RATE_KEYS = frozenset(
    {"input_per_mtok", "output_per_mtok"}
    | {f"{m}_input_per_mtok" for m in ("image", "audio", "video")}
    | {"image_input_per_image", "audio_input_per_second", "video_input_per_second"}
    | {f"{m}_relative" for m in ("image", "audio", "video")}
)
ROW_KEYS = RATE_KEYS | {"source", "provider_page", "as_of", "notes", "image", "audio", "video", "text"}
SHEET_KEYS = {"provider", "currency", "description", "models", "family"}
FORMULA_MODALITIES = ("image", "audio", "video")


def _package_dir() -> Path:
    return Path(__file__).resolve().parent


def shipped_sheets() -> list[Path]:
    return sorted((_package_dir() / "prices").glob("*.toml"))


@dataclass(frozen=True)
class Family:
    name: str
    match: tuple[str, ...]
    text: str  # tiktoken encoding name, or "estimate:chars/4" / "estimate:<encoding>"
    formulas: dict[str, dict[str, Any]]  # modality -> {"formula": name, params...}
    source: str

    def matches(self, model: str) -> bool:
        return any(fnmatch.fnmatchcase(model, pattern) for pattern in self.match)


@dataclass(frozen=True)
class ModelRow:
    """One model's rates and provenance from a price sheet."""

    name: str
    provider: str
    currency: str
    rates: dict[str, Decimal]
    source: str
    as_of: dt.date
    sheet: Path
    provider_page: str = ""
    notes: str = ""
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    text: str | None = None  # overrides the family's text rule


def parse_rate(value: Any, where: str) -> Decimal:
    """A price as an exact decimal; floats are refused in favour of strings ("2.50") to keep sheets exact."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise PriceError(f"{where}: price must be a number, got {value!r}")
    try:
        rate = Decimal(str(value))
    except InvalidOperation:
        raise PriceError(f"{where}: price must be a number, got {value!r}") from None
    if not rate.is_finite():
        raise PriceError(f"{where}: price must be finite, got {value!r}")
    if rate < 0:
        raise PriceError(f"{where}: price must not be negative, got {value!r}")
    return rate


def _parse_family(entry: Any, where: str) -> Family:
    if not isinstance(entry, dict):
        raise PriceError(f"{where}: each [[family]] must be a table")
    unknown = set(entry) - {"name", "match", "text", "source", *FORMULA_MODALITIES}
    if unknown:
        raise PriceError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} in family {entry.get('name')!r}")
    name = entry.get("name")
    match = entry.get("match")
    if not isinstance(name, str) or not isinstance(match, list) or not all(isinstance(m, str) for m in match):
        raise PriceError(f"{where}: a family needs a 'name' and a 'match' list of patterns")
    formulas = {}
    for modality in FORMULA_MODALITIES:
        spec = entry.get(modality)
        if spec is not None:
            if not isinstance(spec, dict) or "formula" not in spec:
                raise PriceError(f"{where}: family {name!r} {modality} needs a table with a 'formula'")
            formulas[modality] = dict(spec)
    return Family(
        name, tuple(match), str(entry.get("text", "estimate:chars/4")), formulas, str(entry.get("source", ""))
    )


@functools.lru_cache(maxsize=8)
def _families_cached(paths: tuple[Path, ...], stamps: tuple[float, ...]) -> tuple[Family, ...]:
    families: list[Family] = []
    for path in paths:
        data = read_toml(path, "price sheet", PriceError)
        entries = data.get("family", [])
        if not isinstance(entries, list):
            raise PriceError(f"{path}: 'family' must be an array of tables ([[family]])")
        families.extend(_parse_family(e, str(path)) for e in entries)
    return tuple(families)


def _stamp(path: Path) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        raise PriceError(f"{path}: price sheet does not exist") from None


def families(extra_sheets: tuple[Path, ...] = ()) -> tuple[Family, ...]:
    """Families from user sheets first (so they can add or replace rules), then the shipped ``families.toml``."""
    paths = (*extra_sheets, _package_dir() / "families.toml")
    return _families_cached(paths, tuple(_stamp(p) for p in paths))


def _parse_row(name: str, row: Any, sheet: Path, provider: str, currency: str) -> ModelRow:
    where = f"{sheet} [models.{name!r}]"
    if not isinstance(row, dict):
        raise PriceError(f"{where}: must be a table")
    unknown = set(row) - ROW_KEYS
    if unknown:
        raise PriceError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    rates = {key: parse_rate(row[key], f"{where} {key}") for key in RATE_KEYS if key in row}
    if "input_per_mtok" not in rates:
        raise PriceError(f"{where}: 'input_per_mtok' (USD per 1M text input tokens) is required")
    source = row.get("source")
    if not isinstance(source, str) or not source:
        raise PriceError(f"{where}: 'source' (where the prices come from) is required")
    as_of = row.get("as_of")
    if isinstance(as_of, str):
        try:
            as_of = dt.date.fromisoformat(as_of)
        except ValueError:
            raise PriceError(f"{where}: 'as_of' must be a date like 2026-07-24, got {as_of!r}") from None
    if not isinstance(as_of, dt.date):
        raise PriceError(f"{where}: 'as_of' (the date the prices were read) is required")
    overrides = {}
    for modality in FORMULA_MODALITIES:
        if modality in row:
            if not isinstance(row[modality], dict):
                raise PriceError(f"{where}: {modality} override must be a table of formula parameters")
            overrides[modality] = dict(row[modality])
    return ModelRow(
        name,
        provider,
        currency,
        rates,
        source,
        as_of,
        sheet,
        str(row.get("provider_page", "")),
        str(row.get("notes", "")),
        overrides,
        row.get("text"),
    )


@functools.lru_cache(maxsize=8)
def _rows_cached(paths: tuple[Path, ...], stamps: tuple[float, ...]) -> dict[str, ModelRow]:
    rows: dict[str, ModelRow] = {}
    for path in paths:
        data = read_toml(path, "price sheet", PriceError)
        unknown = set(data) - SHEET_KEYS
        if unknown:
            raise PriceError(f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))}")
        provider = data.get("provider")
        if not isinstance(provider, str):
            raise PriceError(f"{path}: 'provider' is required")
        currency = data.get("currency", "USD")
        models = data.get("models", {})
        if not isinstance(models, dict):
            raise PriceError(f"{path}: [models.NAME] tables expected")
        for name, row in models.items():
            rows[name] = _parse_row(name, row, path, provider, currency)
    return rows


def model_rows(extra_sheets: tuple[Path, ...] = ()) -> dict[str, ModelRow]:
    """All priced models: shipped sheets, then user sheets (a user row replaces a shipped one of the same name)."""
    paths = (*shipped_sheets(), *extra_sheets)
    return _rows_cached(paths, tuple(_stamp(p) for p in paths))
