"""Import LiteLLM's ``model_prices_and_context_window.json`` into an mmtok price sheet (TOML).

LiteLLM's keys (per token / per image / per second, in USD) map onto mmtok's rates per million tokens, per image
and per second. Where LiteLLM gives no modality-specific rate but the model's family has a token rule for that
modality, the modality is billed at the text input rate, as OpenAI, Anthropic and Google bill image and video
tokens; the row's ``notes`` says so.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import os
from decimal import Decimal
from typing import Any

from mmtok.budgets.pricing.sheets import UNPRINTABLE, families
from mmtok.errors import PriceError
from mmtok.files import read_json, write_atomic

LITELLM_URL = "https://github.com/BerriAI/litellm/blob/main/model_prices_and_context_window.json"
_PER_TOKEN = {
    "input_cost_per_token": "input_per_mtok",
    "output_cost_per_token": "output_per_mtok",
    "cache_read_input_token_cost": "cache_read_per_mtok",
    "cache_creation_input_token_cost": "cache_write_per_mtok",
    "input_cost_per_image_token": "image_input_per_mtok",
    "input_cost_per_audio_token": "audio_input_per_mtok",
}
_PER_ITEM = {
    "input_cost_per_image": "image_input_per_image",
    "input_cost_per_audio_per_second": "audio_input_per_second",
    "input_cost_per_video_per_second": "video_input_per_second",
}


def _json_rate(value: Any, where: str) -> Decimal:
    """A price from LiteLLM's JSON (a number in USD), as the exact decimal of its shortest text form."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PriceError(f"{where}: price must be a number, got {value!r:.40}")
    rate = Decimal(str(value))
    if not rate.is_finite() or rate < 0:
        raise PriceError(f"{where}: price must be a finite, non-negative number, got {value!r}")
    return rate


def _decimal_text(value: Decimal) -> str:
    text = format(value.normalize(), "f")
    return text if "." not in text else text.rstrip("0").rstrip(".") or "0"


def read_litellm(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    data = read_json(path, "LiteLLM price map", PriceError)
    if not isinstance(data, dict):
        raise PriceError(f"{path}: expected a JSON object of models")
    return {k: v for k, v in data.items() if isinstance(v, dict) and k != "sample_spec"}


def litellm_rows(
    data: dict[str, dict[str, Any]], patterns: list[str] | None = None, where: str = "litellm"
) -> dict[str, dict[str, str]]:
    """mmtok rate rows (decimal strings) for the models matching ``patterns`` (fnmatch; all when None)."""
    fams = families()
    rows: dict[str, dict[str, str]] = {}
    for name, entry in sorted(data.items()):
        if patterns and not any(fnmatch.fnmatchcase(name, p) for p in patterns):
            continue
        if not name.strip() or len(name) > 200 or UNPRINTABLE.search(name):
            continue  # a name a sheet refuses (a line break, a control character): not a model, not written
        if "input_cost_per_token" not in entry:
            continue
        row: dict[str, str] = {}
        for key, target in _PER_TOKEN.items():
            if key in entry:
                row[target] = _decimal_text(_json_rate(entry[key], f"{where} {name}.{key}") * 1_000_000)
        for key, target in _PER_ITEM.items():
            if key in entry:
                row[target] = _decimal_text(_json_rate(entry[key], f"{where} {name}.{key}"))
        family = next((f for f in fams if f.matches(name)), None)
        as_text = []
        for modality in ("image", "video"):  # billed as input tokens; audio never at the text rate in silence
            has_rate = any(k.startswith(f"{modality}_input_") for k in row)
            if not has_rate and family is not None and modality in family.formulas:
                row[f"{modality}_input_per_mtok"] = row["input_per_mtok"]
                as_text.append(modality)
        if as_text:
            row["notes"] = f"{' and '.join(as_text)} tokens billed at the text input rate"
        rows[name] = row
    return rows


def sheet_toml(
    rows: dict[str, dict[str, str]], provider: str, source: str, as_of: dt.date, provider_page: str = ""
) -> str:
    """A price sheet in mmtok's TOML format, written by a TOML writer (names and values are escaped, whatever the
    map holds); every row carries its source and date."""
    import tomli_w

    models = {}
    for name, row in rows.items():
        models[name] = {
            **{key: row[key] for key in ORDER if key in row},
            **({"notes": row["notes"]} if "notes" in row else {}),
            "source": source,
            **({"provider_page": provider_page} if provider_page else {}),
            "as_of": as_of,
        }
    header = f"# Imported from LiteLLM's price map by `mmtok prices import-litellm` on {dt.date.today().isoformat()}.\n"
    return header + tomli_w.dumps({"provider": provider, "currency": "USD", "models": models})


ORDER = (
    "input_per_mtok",
    "output_per_mtok",
    "cache_read_per_mtok",
    "cache_write_per_mtok",
    "image_input_per_mtok",
    "image_input_per_image",
    "audio_input_per_mtok",
    "audio_input_per_second",
    "video_input_per_mtok",
    "video_input_per_second",
)


def import_litellm(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    provider: str = "litellm",
    patterns: list[str] | None = None,
    source: str | None = None,
    as_of: dt.date | None = None,
    provider_page: str = "",
) -> int:
    """Write a sheet for the matching models of a LiteLLM price file; returns how many models it holds."""
    rows = litellm_rows(read_litellm(path), patterns, where=str(path))
    if not rows:
        raise PriceError(f"{path}: no priced models match {patterns}")
    text = sheet_toml(rows, provider, source or LITELLM_URL, as_of or dt.date.today(), provider_page)
    write_atomic(out, text)
    return len(rows)
