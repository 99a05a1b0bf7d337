"""Price sheets (``prices/*.toml``, ``--prices``) and model families (``families.toml``): loading and validation.

A sheet lists models with their rates in USD as exact decimals (strings or integers; floats are refused, since
``0.1`` is not exact), each row with its ``source`` URL and ``as_of`` date. Rates per modality: ``*_per_mtok``
(per million tokens), ``*_per_image`` / ``*_per_second`` (per item), or ``*_relative`` (a multiple of the text input
rate, for mmtok's semantic-granularity scheme). A row may override its family's formula parameters
(``image = { tile_tokens = 180 }``) to calibrate against measured bills; every parameter is checked (positive
numbers of the right kind), so a sheet can neither zero a price nor make it negative. ``[aliases]`` names your own
shorthands (``fast = "gpt-5.2"``).

The shipped sheets hold self-hosted models only: provider prices come from genai-prices (``money.py``).
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

from mmtok.budgets.pricing.formulas import LABELS
from mmtok.errors import PriceError
from mmtok.files import UNPRINTABLE, read_toml

MODALITIES = ("text", "image", "audio", "video")
# Sheet rate keys -> the rate names of money.RateCard (per million tokens).
MTOK_KEYS = {
    "input_per_mtok": "input",
    "output_per_mtok": "output",
    "cache_read_per_mtok": "cache_read",
    "cache_write_per_mtok": "cache_write",
    "image_input_per_mtok": "input_image",
    "audio_input_per_mtok": "input_audio",
    "video_input_per_mtok": "input_video",
    "output_audio_per_mtok": "output_audio",
}
ITEM_KEYS = ("image_input_per_image", "audio_input_per_second", "video_input_per_second")
MAX_RATE = Decimal(10**9)  # USD per million tokens, per item or per second: above any real price, far from overflow
RELATIVE_KEYS = {f"{m}_relative": f"input_{m}" for m in ("image", "audio", "video")}
RATE_KEYS = frozenset(MTOK_KEYS) | frozenset(ITEM_KEYS) | frozenset(RELATIVE_KEYS)
ROW_KEYS = RATE_KEYS | {"source", "provider_page", "as_of", "notes", "image", "audio", "video", "text"}
SHEET_KEYS = {"provider", "currency", "description", "models", "family", "aliases"}
FORMULA_MODALITIES = ("image", "audio", "video")
FAMILY_KEYS = {"name", "match", "text", "source", "read", "notes", "overhead", *FORMULA_MODALITIES}
OVERHEAD_KEYS = ("per_request", "per_message")  # tokens bills carry beyond the rules' count, as calibrated
MAX_OVERHEAD_TOKENS = 100_000
FORMULAS = {
    "image": {
        "openai-tile",
        "openai-patch",
        "anthropic-patches",
        "gemini-tiles",
        "gemini-2.5",
        "fixed-level",
        "mistral-patches",
        "tiles",
        "qwen2-vl",
        "llava-next",
        "fixed",
        "patch-grid",
    },
    "audio": {"per-second"},
    "video": {"per-second", "frames", "qwen2-vl-video", "frames-patch-grid"},
}
# Formula parameters and their kind: "int" (a positive integer) or "number" (a positive exact or float number).
PARAMETERS = {
    **dict.fromkeys(
        (
            "base_tokens",
            "tile_tokens",
            "tokens",
            "patch_px",
            "max_dim",
            "patch_budget",
            "max_edge",
            "max_tokens",
            "tokens_per_tile",
            "min_pixels",
            "max_pixels",
            "factor",
            "tile_px",
            "fit_px",
            "max_px",
            "short_side",
        ),
        "int",
    ),
    **dict.fromkeys(("tokens_per_second", "multiplier", "fps", "audio_tokens_per_second"), "number"),
}


# Upper bounds, far above any provider's rule and far from overflow: a sheet cannot price an image at 10^300 tokens.
MAX_FORMULA_TOKENS = 10_000_000  # token counts (base, per tile, per level, budgets)
MAX_FORMULA_PX = 100_000  # sides, patches and tiles in pixels
MAX_FORMULA_PIXELS = 10_000_000_000  # pixel counts (min_pixels, max_pixels)
MAX_FORMULA_RATE = 100_000  # tokens per second, frames per second, multipliers
PARAMETER_MAX = {
    **dict.fromkeys(
        ("base_tokens", "tile_tokens", "tokens", "max_tokens", "tokens_per_tile", "patch_budget"), MAX_FORMULA_TOKENS
    ),
    **dict.fromkeys(
        ("patch_px", "max_dim", "max_edge", "factor", "tile_px", "fit_px", "max_px", "short_side"), MAX_FORMULA_PX
    ),
    **dict.fromkeys(("min_pixels", "max_pixels"), MAX_FORMULA_PIXELS),
    **dict.fromkeys(("tokens_per_second", "multiplier", "fps", "audio_tokens_per_second"), MAX_FORMULA_RATE),
}
# What each formula reads (budgets/pricing/counts.py): a table naming the formula must give these.
REQUIRED = {
    "openai-tile": ("base_tokens", "tile_tokens"),
    "openai-patch": ("multiplier", "levels", "auto"),
    "anthropic-patches": ("max_edge", "max_tokens"),
    "gemini-2.5": ("levels",),
    "fixed-level": ("levels", "default_level"),
    "mistral-patches": ("patch_px", "max_px"),
    "tiles": ("tile_px", "tile_tokens", "base_tokens", "fit_px"),
    "fixed": ("tokens",),
    "patch-grid": ("patch_px",),
    "per-second": ("tokens_per_second",),
    "frames": ("levels", "default_level", "fps"),
    "qwen2-vl-video": ("fps",),
    "frames-patch-grid": ("fps", "patch_px"),
}


def check_formula(table: Any, modality: str, where: str, partial: bool = False) -> dict[str, Any]:
    """A family's (or a sheet override's, ``partial``) formula table, with every parameter checked: its kind and
    upper bound, and, where the table names its formula, every parameter that formula reads (an override that
    changes the formula gives them all)."""
    if not isinstance(table, dict):
        raise PriceError(f"{where}: {modality} must be a table of formula parameters")
    formula = table.get("formula")
    if formula is None and not partial:
        raise PriceError(f"{where}: {modality} needs a 'formula'")
    if formula is not None and formula not in FORMULAS[modality]:
        raise PriceError(
            f"{where}: unknown {modality} formula {formula!r}; known: {', '.join(sorted(FORMULAS[modality]))}"
        )
    for key, value in table.items():
        if key == "formula":
            continue
        if key == "label":
            if value not in LABELS:
                raise PriceError(f"{where}: {modality}.label must be one of {', '.join(LABELS)}, got {value!r}")
        elif key in ("default_level", "auto"):
            if not isinstance(value, str):
                raise PriceError(f"{where}: {modality}.{key} must be a level name, got {value!r}")
        elif key == "levels":
            _check_levels(value, f"{where}: {modality}.levels")
        elif key in PARAMETERS:
            _check_parameter(value, PARAMETERS[key], f"{where}: {modality}.{key}", PARAMETER_MAX[key])
        else:
            raise PriceError(f"{where}: unknown {modality} parameter {key!r}")
    if formula is not None:
        check_complete(table, modality, where)
    return dict(table)


def check_complete(table: dict[str, Any], modality: str, where: str) -> None:
    """A formula table that names its formula gives every parameter the formula reads (openai-patch: a max_dim
    for every level); else a PriceError naming the sheet and the parameter."""
    formula = table.get("formula")
    missing = [key for key in REQUIRED.get(formula, ()) if key not in table]
    if missing:
        raise PriceError(f"{where}: {modality} formula {formula!r} needs {', '.join(missing)}")
    levels = table.get("levels", {})
    if formula == "openai-patch" and not all(isinstance(v, dict) and "max_dim" in v for v in levels.values()):
        raise PriceError(f"{where}: {modality} formula 'openai-patch' needs each level as {{ max_dim = ... }}")


def _check_levels(levels: Any, where: str) -> None:
    if not isinstance(levels, dict) or not levels:
        raise PriceError(f"{where} must be a table of levels")
    for name, value in levels.items():
        if isinstance(value, dict):
            for key, param in value.items():
                if key not in ("max_dim", "patch_budget"):
                    raise PriceError(f"{where}.{name}: unknown key {key!r}")
                _check_parameter(param, "int", f"{where}.{name}.{key}", PARAMETER_MAX[key])
        else:
            _check_parameter(value, "int", f"{where}.{name}", MAX_FORMULA_TOKENS)


def _check_parameter(value: Any, kind: str, where: str, maximum: int) -> None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not 0 < value <= maximum or (kind == "int" and not isinstance(value, int)):
        kind_name = "a positive integer" if kind == "int" else "a positive number"
        raise PriceError(f"{where} must be {kind_name} of at most {maximum:,}, got {str(value)[:40]}")


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
    read: dt.date | None = None  # when the source page was read
    notes: str = ""
    overhead: dict[str, int] = field(default_factory=dict)  # per_request / per_message tokens, from a calibration

    def matches(self, model: str) -> bool:
        # A pattern's literal head is compared first: most families are ruled out without compiling a regex.
        return any(model.startswith(_head(p)) and fnmatch.fnmatchcase(model, p) for p in self.match)


@dataclass(frozen=True)
class ModelRow:
    """One model's rates and provenance from a price sheet."""

    name: str
    provider: str
    currency: str
    rates: dict[str, Decimal]  # sheet keys (input_per_mtok, image_relative, ...) -> exact decimals
    source: str
    as_of: dt.date
    sheet: Path
    provider_page: str = ""
    notes: str = ""
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    text: str | None = None  # overrides the family's text rule


@functools.cache
def _head(pattern: str) -> str:
    """The literal start of an fnmatch pattern (up to its first wildcard)."""
    cut = min((i for i in (pattern.find(c) for c in "*?[") if i >= 0), default=len(pattern))
    return pattern[:cut]


def parse_rate(value: Any, where: str) -> Decimal:
    """A price as an exact decimal: a string ("2.50") or an integer. Floats are refused: 0.1 is not exact."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        kind = 'a float: write it as a string, e.g. "2.50"' if isinstance(value, float) else repr(value)
        raise PriceError(f"{where}: price must be a decimal string or an integer, got {kind}")
    try:
        rate = Decimal(value.strip() if isinstance(value, str) else value)
    except InvalidOperation:
        raise PriceError(f"{where}: price must be a number, got {value!r}") from None
    if not rate.is_finite():
        raise PriceError(f"{where}: price must be finite, got {value!r}")
    if rate < 0:
        raise PriceError(f"{where}: price must not be negative, got {value!r}")
    if rate > MAX_RATE:
        raise PriceError(f"{where}: price must be at most {MAX_RATE:,}, got {value!r}")
    if where.endswith("_relative") and rate == 0:
        raise PriceError(f"{where}: a multiple of the text rate must be above 0 (0 would make the modality free)")
    return rate


def _parse_family(entry: Any, where: str) -> Family:
    if not isinstance(entry, dict):
        raise PriceError(f"{where}: each [[family]] must be a table")
    unknown = set(entry) - FAMILY_KEYS
    if unknown:
        raise PriceError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} in family {entry.get('name')!r}")
    name = entry.get("name")
    match = entry.get("match")
    if not isinstance(name, str) or not isinstance(match, list) or not all(isinstance(m, str) for m in match):
        raise PriceError(f"{where}: a family needs a 'name' and a 'match' list of patterns")
    where = f"{where} family {name!r}"
    formulas = {m: check_formula(entry[m], m, where) for m in FORMULA_MODALITIES if m in entry}
    read = entry.get("read")
    if read is not None and not isinstance(read, dt.date):
        raise PriceError(f"{where}: 'read' must be a date (when the source was read), got {read!r}")
    return Family(
        name,
        tuple(match),
        str(entry.get("text", "estimate:chars/4")),
        formulas,
        str(entry.get("source", "")),
        read,
        str(entry.get("notes", "")),
        _overhead(entry.get("overhead", {}), where),
    )


def _overhead(value: Any, where: str) -> dict[str, int]:
    """``overhead = { per_request = N, per_message = N }``: whole numbers of tokens, each bounded."""
    if not isinstance(value, dict) or set(value) - set(OVERHEAD_KEYS):
        raise PriceError(f"{where}: 'overhead' is a table of {' and '.join(OVERHEAD_KEYS)} (tokens)")
    for key, tokens in value.items():
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens <= MAX_OVERHEAD_TOKENS:
            raise PriceError(f"{where}: overhead {key} must be a whole number of tokens from 0 to 100,000")
    return dict(value)


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


def sheet_stamp(path: Path) -> float:
    """A sheet's modification time: what the caches of its contents are keyed by."""
    try:
        return os.stat(path).st_mtime
    except OSError:
        raise PriceError(f"{path}: price sheet does not exist") from None


def families(extra_sheets: tuple[Path, ...] = ()) -> tuple[Family, ...]:
    """Families from user sheets first (so they can add or replace rules), then the shipped ``families.toml``."""
    paths = (*extra_sheets, _package_dir() / "families.toml")
    return _families_cached(paths, tuple(sheet_stamp(p) for p in paths))


def _parse_row(name: str, row: Any, sheet: Path, provider: str, currency: str) -> ModelRow:
    where = f"{sheet} [models.{name!r}]"
    if not name.strip() or len(name) > 200 or UNPRINTABLE.search(name):
        raise PriceError(f"{where}: a model name is 1 to 200 characters on one line, without control characters")
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
    overrides = {m: check_formula(row[m], m, where, partial=True) for m in FORMULA_MODALITIES if m in row}
    text = row.get("text")
    if text is not None and not isinstance(text, str):
        raise PriceError(f"{where}: 'text' must name a text rule (e.g. \"o200k_base\")")
    return ModelRow(
        name.strip().lower(),
        provider,
        currency,
        rates,
        source,
        as_of,
        sheet,
        str(row.get("provider_page", "")),
        str(row.get("notes", "")),
        overrides,
        text,
    )


@dataclass(frozen=True)
class Sheets:
    rows: dict[str, ModelRow]  # lower-case model name -> row
    aliases: dict[str, str]  # lower-case alias -> model name


@functools.lru_cache(maxsize=8)
def _sheets_cached(paths: tuple[Path, ...], stamps: tuple[float, ...]) -> Sheets:
    rows: dict[str, ModelRow] = {}
    aliases: dict[str, str] = {}
    for path in paths:
        data = read_toml(path, "price sheet", PriceError)
        unknown = set(data) - SHEET_KEYS
        if unknown:
            raise PriceError(f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))}")
        provider = data.get("provider")
        if not isinstance(provider, str):
            raise PriceError(f"{path}: 'provider' is required")
        currency = data.get("currency", "USD")
        if currency != "USD":
            raise PriceError(f"{path}: only USD sheets are supported, got currency {currency!r}")
        models = data.get("models", {})
        if not isinstance(models, dict):
            raise PriceError(f"{path}: [models.NAME] tables expected")
        for name, row in models.items():
            parsed = _parse_row(name, row, path, provider, currency)
            rows[parsed.name] = parsed
        table = data.get("aliases", {})
        if not isinstance(table, dict) or not all(isinstance(v, str) and v for v in table.values()):
            raise PriceError(f'{path}: [aliases] must map names to model names (fast = "gpt-5.2")')
        if any(UNPRINTABLE.search(k) or UNPRINTABLE.search(v) for k, v in table.items()):
            raise PriceError(f"{path}: [aliases] names must be on one line, without control characters")
        aliases.update({k.strip().lower(): v for k, v in table.items()})
    return Sheets(rows, aliases)


def sheets(extra_sheets: tuple[Path, ...] = ()) -> Sheets:
    """Shipped sheets, then user sheets (a user row or alias replaces a shipped one of the same name)."""
    paths = (*shipped_sheets(), *extra_sheets)
    return _sheets_cached(paths, tuple(sheet_stamp(p) for p in paths))


def model_rows(extra_sheets: tuple[Path, ...] = ()) -> dict[str, ModelRow]:
    return sheets(extra_sheets).rows
