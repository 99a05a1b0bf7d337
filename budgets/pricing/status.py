"""``mmtok prices status`` and ``update``: which price data is in use, how old it is, and taking in newer data.

Everything here is offline: newer data comes as a file the user downloaded (genai-prices' ``data.json`` or
LiteLLM's model map) or as a newer installed genai-prices package.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from mmtok.budgets.pricing import catalog as catalog_module
from mmtok.budgets.pricing import money
from mmtok.budgets.pricing.catalog import SHIPPED, catalog, user_catalog_path, write_catalog
from mmtok.budgets.pricing.money import genai_data_file, genai_snapshot
from mmtok.budgets.pricing.sheets import sheets, shipped_sheets
from mmtok.errors import PriceError
from mmtok.files import read_json


def _genai_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("genai-prices")
    except PackageNotFoundError:
        raise PriceError("genai-prices is not installed: pip install genai-prices") from None


def newest_price_date(today: dt.date | None = None) -> dt.date | None:
    """The newest dated price change in genai-prices' data that is already in force: a floor on its freshness
    (the package records no build date)."""
    from genai_prices.types import ConditionalPrice, StartDateConstraint

    today = today or dt.date.today()
    dates = []
    for provider in genai_snapshot().providers:
        for model in provider.models:
            prices = model.prices if isinstance(model.prices, list) else []
            constraints = [p.constraint for p in prices if isinstance(p, ConditionalPrice)]
            constraints += [v.constraint for v in model.price_variants or ()]
            dates += [c.start_date for c in constraints if isinstance(c, StartDateConstraint) and c.start_date <= today]
    return max(dates, default=None)


def _age(date: dt.date | None) -> int | None:
    return None if date is None else (dt.date.today() - date).days


def price_status() -> dict[str, Any]:
    taken_in = genai_data_file()
    newest = newest_price_date()
    cat = catalog()
    where = "shipped" if cat.path == SHIPPED else f"yours: {cat.path}"
    parts = [
        {
            "source": "genai-prices",
            "what": "provider prices (money)",
            "version": f"taken-in file {taken_in}" if taken_in else f"package {_genai_version()}",
            "dated": newest.isoformat() if newest else None,
            "age_days": _age(newest),
        },
        {
            "source": "LiteLLM map",
            "what": f"model catalog: modalities, retirements ({len(cat.rows)} models)",
            "version": f"litellm {cat.litellm_version} ({where})",
            "dated": cat.built.isoformat(),
            "age_days": _age(cat.built),
        },
    ]
    for path in shipped_sheets():
        rows = [r for r in sheets().rows.values() if r.sheet == path]
        dated = max((r.as_of for r in rows), default=None)
        parts.append(
            {
                "source": f"sheet {path.name}",
                "what": f"{len(rows)} self-hosted models",
                "version": str(path),
                "dated": dated.isoformat() if dated else None,
                "age_days": _age(dated),
            }
        )
    notes = [
        "genai-prices' dated column is the newest price change in its data already in force (it records no build "
        "date); update it with `pip install -U genai-prices` or `mmtok prices update --from data.json`.",
        "The catalog's date is when it was built from LiteLLM's map; update it with "
        "`mmtok prices update --from model_prices_and_context_window.json --litellm-version X`.",
    ]
    return {"parts": parts, "notes": notes}


def take_in(source: Path | None, litellm_version: str = "") -> list[str]:
    """Take in a downloaded data file (genai-prices data.json, or LiteLLM's map); with no file, report the
    installed genai-prices, whose data is then in use unless a taken-in file overrides it."""
    if source is None:
        lines = [f"genai-prices {_genai_version()} is installed"]
        taken = genai_data_file()
        lines.append(
            f"taken-in data {taken} overrides it (`mmtok prices update --reset` to use the package's)"
            if taken
            else "its data is in use; cached rate cards are keyed by it, so a newer package takes effect at once"
        )
        return lines
    data = read_json(source, "price data", PriceError, max_bytes=64 << 20)
    if isinstance(data, list):
        return _take_in_genai(source, data)
    if isinstance(data, dict) and any(isinstance(v, dict) and "litellm_provider" in v for v in data.values()):
        count = write_catalog(source, user_catalog_path(), litellm_version or "unknown")  # forgets the old one
        return [f"model catalog: {count} models from {source} -> {user_catalog_path()}"]
    raise PriceError(f"{source}: neither genai-prices data (a JSON list of providers) nor a LiteLLM model map")


def _take_in_genai(source: Path, data: list[Any]) -> list[str]:
    from genai_prices.types import _providers_from_raw  # the parser genai-prices' own updater uses

    from mmtok.files import write_atomic

    try:
        providers = _providers_from_raw(data)
    except (TypeError, ValueError, KeyError) as e:
        raise PriceError(f"{source}: not genai-prices data ({type(e).__name__}: {str(e)[:200]})") from None
    target = Path(str(_data_target()))
    write_atomic(target, json.dumps(data))
    money.forget()
    models = sum(len(p.models) for p in providers)
    return [f"genai-prices data: {len(providers)} providers, {models} models from {source} -> {target}"]


def _data_target() -> Path:
    from mmtok.cache import cache_dir

    return cache_dir("prices") / "genai-prices-data.json"


def reset_taken_in() -> list[str]:
    lines = []
    for path in (_data_target(), user_catalog_path()):
        if path.is_file():
            path.unlink()
            lines.append(f"removed {path}")
    money.forget()
    catalog_module.forget()
    return lines or ["nothing taken in: the installed data is in use"]
