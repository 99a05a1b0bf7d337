"""Which provider models exist, what they take, and when they retire: a catalog built from LiteLLM's model map.

LiteLLM's ``model_prices_and_context_window.json`` is the maintained source of capabilities (``supports_vision``,
audio and video input, output modalities), context windows and deprecation dates. genai-prices, the money source,
has none of these. mmtok ships a compact catalog of the five providers it has media rules for, built from the map
by this module and committed with the LiteLLM version it came from::

    python -m mmtok.budgets.pricing.catalog model_prices_and_context_window.json --out budgets/pricing/data/models.json

``mmtok prices update --from FILE`` builds the same catalog from a newer map into the user cache, where it takes
precedence over the shipped one. Reading the catalog is one small JSON load; LiteLLM itself is never imported.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from mmtok.errors import PriceError
from mmtok.files import read_json, write_atomic

CATALOG_FORMAT = "mmtok.catalog/1"
SHIPPED = Path(__file__).resolve().parent / "data" / "models.json"
MAX_COST_PER_TOKEN = 1000  # USD: $1e9 per million, the bound price sheets hold too (a cost above it is dropped)
# LiteLLM's provider names -> mmtok's. Vertex AI's own Gemini models count as Google's; third-party models hosted
# on Vertex (Claude, Llama, ...) are listed under their makers' own entries.
PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "google",
    "vertex_ai-language-models": "google",
    "xai": "xai",
    "mistral": "mistral",
}
# Prefixes users type (LiteLLM's, OpenRouter's, genai-prices' provider ids) -> mmtok's provider name.
PREFIXES = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "google",
    "google": "google",
    "vertex_ai": "google",
    "xai": "xai",
    "x-ai": "xai",
    "mistral": "mistral",
    "mistralai": "mistral",
}
# The LiteLLM cost fields kept for models genai-prices does not price (USD per token), by mmtok's rate name.
COST_FIELDS = {
    "input": "input_cost_per_token",
    "output": "output_cost_per_token",
    "cache_read": "cache_read_input_token_cost",
    "cache_write": "cache_creation_input_token_cost",
    "input_audio": "input_cost_per_audio_token",
    "output_audio": "output_cost_per_audio_token",
    "input_image": "input_cost_per_image_token",
    "output_image": "output_cost_per_image_token",
}
COST_VARIANTS = {"": "", "batch": "_batches", "flex": "_flex", "priority": "_priority"}
_COMPACT_DATE = re.compile(r"-(20\d\d)(\d\d)(\d\d)$")


SNAPSHOT_DATE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{8}")  # a dated snapshot's suffix: 2025-06-03 or 20250603


def split_name(name: str) -> tuple[str | None, str]:
    """``"openai/GPT-4o "`` -> ``("openai", "gpt-4o")``: the provider a prefix names (if any) and the bare name,
    lower-cased, as every lookup compares it."""
    bare = name.strip().lower()
    provider = None
    while "/" in bare and bare.split("/", 1)[0] in PREFIXES:
        head, bare = bare.split("/", 1)
        provider = PREFIXES[head]
    return provider, bare


def dashed_date(name: str) -> str:
    """``claude-x-20250929`` stays; ``gpt-5.2-20251211`` -> ``gpt-5.2-2025-12-11`` (OpenAI writes dates dashed)."""
    return _COMPACT_DATE.sub(r"-\1-\2-\3", name)


@dataclass(frozen=True)
class CatalogEntry:
    name: str  # bare, lower-case
    provider: str  # openai | anthropic | google | xai | mistral
    litellm_key: str
    mode: str
    modalities: tuple[str, ...]  # inputs: text, image, audio, video, pdf
    output_modalities: tuple[str, ...]
    max_input_tokens: int | None
    retired: dt.date | None  # LiteLLM's deprecation_date
    costs: dict[str, str]  # LiteLLM cost fields (USD per token, as decimal strings)
    source_url: str
    max_output_tokens: int | None = None  # the most one reply may hold (LiteLLM's max_output_tokens)
    reasoning: bool = False  # LiteLLM's supports_reasoning: the model may think before it answers

    def takes(self, modality: str) -> bool:
        return modality in self.modalities

    def cost_per_mtok(self, rate: str, variant: str = "", above_200k: bool = False) -> Decimal | None:
        field = COST_FIELDS[rate] + ("_above_200k_tokens" if above_200k else "") + COST_VARIANTS[variant]
        value = self.costs.get(field)
        return None if value is None else Decimal(value) * 1_000_000


@dataclass(frozen=True)
class Catalog:
    rows: dict[str, dict[str, Any]]  # bare name -> stored row (entries are built on first use: start-up stays fast)
    aliases: dict[str, str]  # LiteLLM alias_of entries: alias -> bare name
    litellm_version: str
    built: dt.date
    path: Path

    @property
    def entries(self) -> dict[str, CatalogEntry]:
        return {name: self.entry(name) for name in self.rows}

    @functools.lru_cache(maxsize=1024)  # noqa: B019 (one catalog per file, kept for the process)
    def entry(self, name: str) -> CatalogEntry:
        row = self.rows[name]
        try:
            return CatalogEntry(
                name=row["name"],
                provider=row["provider"],
                litellm_key=row["litellm_key"],
                mode=row["mode"],
                modalities=tuple(row["modalities"]),
                output_modalities=tuple(row["output_modalities"]),
                max_input_tokens=row["max_input_tokens"],
                retired=dt.date.fromisoformat(row["retired"]) if row["retired"] else None,
                costs=dict(row["costs"]),
                source_url=row["source_url"],
                max_output_tokens=_count(row.get("max_output_tokens")),
                reasoning=row.get("reasoning") is True,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise PriceError(f"{self.path}: malformed catalog entry {name!r} ({type(e).__name__}: {e})") from None

    def get(self, name: str) -> CatalogEntry | None:
        """The entry of ``name`` (a provider prefix, a dated snapshot, an alias), or, for a bare name the map no
        longer lists, its newest dated snapshot (``gpt-4o-audio-preview`` -> ``...-2025-06-03``)."""
        provider, bare = split_name(name)
        for candidate in (bare, dashed_date(bare), self.aliases.get(bare), self._newest_snapshot(bare)):
            if candidate and candidate in self.rows:
                entry = self.entry(candidate)
                if provider is None or entry.provider == provider:
                    return entry
        return None

    def _newest_snapshot(self, bare: str) -> str | None:
        prefix = bare + "-"
        dated = [k for k in self.rows if k.startswith(prefix) and SNAPSHOT_DATE.fullmatch(k[len(prefix) :])]
        return max(dated, key=lambda k: k[len(prefix) :].replace("-", ""), default=None)

    def __hash__(self) -> int:
        return id(self)


# ------------------------------------------------------------------------------------------------- building
def _modalities(entry: dict[str, Any]) -> tuple[list[str], list[str]]:
    declared = entry.get("supported_modalities")
    inputs = {"text"}
    if isinstance(declared, list):
        inputs |= {m for m in declared if isinstance(m, str)}
    for flag, modality in (
        ("supports_vision", "image"),
        ("supports_audio_input", "audio"),
        ("supports_video_input", "video"),
        ("supports_pdf_input", "pdf"),
    ):
        if entry.get(flag) is True:
            inputs.add(modality)
        elif entry.get(flag) is False:
            inputs.discard(modality)
    outputs = entry.get("supported_output_modalities")
    out = sorted(m for m in outputs if isinstance(m, str)) if isinstance(outputs, list) else ["text"]
    priced = {"audio": "output_cost_per_audio_token", "image": "output_cost_per_image_token"}
    for modality, cost in priced.items():  # a model with a price for audio (image) output produces it
        said = entry.get(f"supports_{modality}_output")
        if modality not in out and (said is True or (said is None and isinstance(entry.get(cost), (int, float)))):
            out.append(modality)
    order = ("text", "image", "audio", "video", "pdf")
    return sorted(inputs, key=lambda m: order.index(m) if m in order else len(order)), out


def _costs(entry: dict[str, Any]) -> dict[str, str]:
    out = {}
    for base in COST_FIELDS.values():
        for tier in ("", "_above_200k_tokens"):
            for variant in COST_VARIANTS.values():
                value = entry.get(base + tier + variant)
                number = isinstance(value, (int, float)) and not isinstance(value, bool)
                if number and math.isfinite(value) and 0 <= value <= MAX_COST_PER_TOKEN:
                    out[base + tier + variant] = format(Decimal(str(value)).normalize(), "f")
    return out


def _entry_row(key: str, entry: dict[str, Any]) -> dict[str, Any] | None:
    provider = PROVIDERS.get(entry.get("litellm_provider", ""))
    if provider is None:
        return None
    _, bare = split_name(key)
    inputs, outputs = _modalities(entry)
    retired = entry.get("deprecation_date")
    return {
        "name": bare,
        "provider": provider,
        "litellm_key": key,
        "mode": str(entry.get("mode") or ""),
        "modalities": inputs,
        "output_modalities": outputs,
        "max_input_tokens": _count(entry.get("max_input_tokens")),
        "max_output_tokens": _count(entry.get("max_output_tokens")),
        "reasoning": entry.get("supports_reasoning") is True,
        "retired": retired if isinstance(retired, str) and _is_date(retired) else None,
        "costs": _costs(entry),
        "source_url": str(entry.get("source") or ""),
    }


def _count(value: Any) -> int | None:
    """A positive token count from the map, or None (a string, a float, a bool or a negative is not one)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _is_date(text: str) -> bool:
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def build_catalog(data: Any, litellm_version: str, built: dt.date | None = None) -> dict[str, Any]:
    """The catalog (JSON-ready) of the five providers' models in a LiteLLM map. Where a model is listed twice (the
    Gemini API's ``gemini/x`` and Vertex AI's ``x``), the Gemini API entry wins."""
    if not isinstance(data, dict):
        raise PriceError("a LiteLLM model map must be a JSON object of models")
    models: dict[str, dict[str, Any]] = {}
    for key, entry in sorted(data.items(), key=lambda kv: (not kv[0].startswith("gemini/"), kv[0])):
        if isinstance(entry, dict) and "litellm_provider" in entry:
            row = _entry_row(key, entry)
            if row is not None:
                models.setdefault(row["name"], row)
    aliases = {}
    for key, entry in data.items():
        if isinstance(entry, dict) and isinstance(entry.get("alias_of"), str):
            _, alias = split_name(key)
            _, target = split_name(entry["alias_of"])
            if target in models and alias not in models:
                aliases[alias] = target
    return {
        "format": CATALOG_FORMAT,
        "source": "LiteLLM model_prices_and_context_window.json",
        "litellm_version": litellm_version,
        "built": (built or dt.date.today()).isoformat(),
        "models": models,
        "aliases": dict(sorted(aliases.items())),
    }


# ------------------------------------------------------------------------------------------------- reading
def user_catalog_path() -> Path:
    from mmtok.cache import cache_dir

    return cache_dir("prices") / "models.json"


@functools.cache
def catalog_path() -> Path:
    """The user's catalog (from ``mmtok prices update --from``) when there is one, else the shipped catalog."""
    user = user_catalog_path()
    return user if user.is_file() else SHIPPED


@functools.lru_cache(maxsize=4)
def _load(path: Path) -> Catalog:
    data = read_json(path, "model catalog", PriceError)
    if not isinstance(data, dict) or data.get("format") != CATALOG_FORMAT:
        raise PriceError(f"{path}: not an mmtok model catalog")
    try:
        rows, aliases = data["models"], data["aliases"]
        if not isinstance(rows, dict) or not isinstance(aliases, dict):
            raise TypeError("models and aliases must be objects")
        return Catalog(rows, aliases, str(data["litellm_version"]), dt.date.fromisoformat(data["built"]), path)
    except (KeyError, TypeError, ValueError) as e:
        raise PriceError(f"{path}: malformed model catalog ({type(e).__name__}: {e})") from None


def catalog() -> Catalog:
    """The catalog in use, read once per process (``forget`` after writing a new one)."""
    return _load(catalog_path())


def forget() -> None:
    """Drop what this process remembers of the catalog (after a new one was written or removed)."""
    catalog_path.cache_clear()
    _load.cache_clear()


def write_catalog(litellm_file: str | Path, out: str | Path, version: str) -> int:
    """Build a catalog from a LiteLLM map file into ``out``; returns the number of models."""
    data = read_json(litellm_file, "LiteLLM model map", PriceError)
    built = build_catalog(data, version)
    write_atomic(out, json.dumps(built, indent=1, sort_keys=True) + "\n")
    forget()
    return len(built["models"])


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Build mmtok's model catalog from LiteLLM's model map.")
    parser.add_argument("litellm_json", type=Path)
    parser.add_argument("--out", type=Path, default=SHIPPED)
    parser.add_argument("--version", required=True, help="the litellm version the file comes from")
    args = parser.parse_args()
    print(f"{write_catalog(args.litellm_json, args.out, args.version)} models -> {args.out}")


if __name__ == "__main__":
    main()
