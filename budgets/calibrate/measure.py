"""Active measuring for calibration: photos of chosen sizes sent to a provider's free token-counting endpoint, each
count recorded in the ledger as the proxy records a call, so that ``mmtok calibrate`` fits from them.

Endpoints (read 2026-12-02 from the official SDKs' resources, which are generated from the providers' API
references: openai 3.57 ``responses/input_tokens.py``, anthropic 2.15 ``messages/messages.py`` count_tokens,
google-genai 3.6 ``models.py`` count_tokens):

- OpenAI ``POST {base}/responses/input_tokens`` (a Responses body; answers ``input_tokens``),
  https://developers.openai.com/api/reference/python/resources/responses/subresources/input_tokens/methods/count
- Anthropic ``POST {base}/v1/messages/count_tokens`` (a Messages body without max_tokens; ``input_tokens``),
  https://docs.anthropic.com/en/api/messages-count-tokens
- Gemini ``POST {base}/v1beta/models/{model}:countTokens`` (``contents``; ``totalTokens`` and
  ``promptTokensDetails`` per modality), https://ai.google.dev/api/tokens

The key comes from the provider's usual environment variable and goes only to the base URL given; it is never
written anywhere. Two text-only calls go with the photos, so the overhead is measured apart from the images.
"""

from __future__ import annotations

import base64
import io
import os
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import httpx

from mmtok.budgets.ledger import Ledger, Record
from mmtok.budgets.ledger.usage import usage_from_bytes
from mmtok.budgets.proxy import quoting
from mmtok.budgets.proxy.config import ProxyConfig
from mmtok.budgets.proxy.providers import DEFAULT_UPSTREAMS, route
from mmtok.errors import ConfigError

PROMPT = "Describe this picture."
DEFAULT_SIZES = ((256, 256), (512, 512), (768, 768), (1024, 1024), (1024, 768), (1092, 1092), (1536, 1024),
                 (1568, 1568), (1920, 1080), (2000, 2000), (2048, 1536), (800, 2400))  # fmt: skip
KEY_VARIABLES = {"openai": ("OPENAI_API_KEY",), "anthropic": ("ANTHROPIC_API_KEY",),
                 "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY")}  # fmt: skip
PROVIDERS = {"openai": "openai", "anthropic": "anthropic", "google": "gemini"}  # the catalog's name -> the proxy's


def provider_for(model: str, prices: Sequence[Any] = ()) -> str:
    """The API a model is measured through: openai, anthropic or gemini."""
    from mmtok.budgets.pricing import resolve

    found = PROVIDERS.get(resolve(model, prices).provider)
    if found is None:
        raise ConfigError(f"{model}: active measuring speaks to OpenAI, Anthropic and Gemini models only")
    return found


def api_key(provider: str) -> str:
    for name in KEY_VARIABLES[provider]:
        if os.environ.get(name):
            return os.environ[name]
    raise ConfigError(f"measuring {provider} models needs a key in {' or '.join(KEY_VARIABLES[provider])}")


def photo(width: int, height: int) -> bytes:
    """mmtok's sample photo resized to ``width`` x ``height``, as a JPEG."""
    from PIL import Image

    from mmtok.samples import samples_dir

    with Image.open(samples_dir() / "astronaut.png") as image:
        resized = image.convert("RGB").resize((width, height), Image.Resampling.BILINEAR)
    out = io.BytesIO()
    resized.save(out, "JPEG", quality=85)
    return out.getvalue()


def count_request(provider: str, model: str, size: tuple[int, int] | None, detail: str) -> tuple[str, dict]:
    """(path under the provider's base URL, body) of a count call: the prompt and, with ``size``, one photo."""
    data = base64.b64encode(photo(*size)).decode() if size else None
    if provider == "openai":
        content: list[dict[str, Any]] = [{"type": "input_text", "text": PROMPT}]
        if data:
            content.append({"type": "input_image", "image_url": f"data:image/jpeg;base64,{data}", "detail": detail})
        return "/responses/input_tokens", {"model": model, "input": [{"role": "user", "content": content}]}
    if provider == "anthropic":
        blocks: list[dict[str, Any]] = []
        if data:
            blocks.append({"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": data}})
        blocks.append({"type": "text", "text": PROMPT})
        return "/v1/messages/count_tokens", {"model": model, "messages": [{"role": "user", "content": blocks}]}
    parts: list[dict[str, Any]] = [{"text": PROMPT}]
    if data:
        parts.append({"inline_data": {"mime_type": "image/jpeg", "data": data}})
    return f"/v1beta/models/{model}:countTokens", {"contents": [{"role": "user", "parts": parts}]}


def _headers(provider: str, key: str) -> dict[str, str]:
    if provider == "openai":
        return {"authorization": f"Bearer {key}"}
    if provider == "anthropic":
        return {"x-api-key": key, "anthropic-version": "2023-06-01"}
    return {"x-goog-api-key": key}


PROXY_PREFIX = {"openai": "/v1", "anthropic": "/anthropic", "gemini": "/gemini"}


def measure(
    model: str,
    ledger: Ledger,
    sizes: Sequence[tuple[int, int]] = DEFAULT_SIZES,
    *,
    base_url: str | None = None,
    detail: str = "high",
    prices: Sequence[Any] = (),
    client: httpx.Client | None = None,
) -> list[Record]:
    """Count ``sizes`` (and two text-only prompts) on ``model`` at its provider's counting endpoint; each count a
    ledger row with mmtok's prediction beside it. Returns the rows written."""
    provider = provider_for(model, prices)
    key = api_key(provider)
    base = (base_url or DEFAULT_UPSTREAMS[provider]).rstrip("/")
    config = ProxyConfig(ledger="", prices=tuple(prices), read_urls=False)
    records = []
    with client or httpx.Client(timeout=60, trust_env=False, follow_redirects=False) as http:
        for size in [None, *sizes, None]:
            path, body = count_request(provider, model, size, detail)
            records.append(_count(http, provider, base, path, body, key, config))
    ledger.write(records)
    return records


def _count(
    http: httpx.Client, provider: str, base: str, path: str, body: dict, key: str, config: ProxyConfig
) -> Record:
    where = route(PROXY_PREFIX[provider] + path)
    assert where is not None  # the paths above are the proxy's own
    record = Record(provider=provider, api=where.api, path=PROXY_PREFIX[provider] + path, instance="measure")
    quoting.predict(body, where, config).fill(record)
    try:
        answer = http.post(base + path, json=body, headers=_headers(provider, key))
    except httpx.HTTPError as e:
        record.outcome, record.message = "upstream_unreachable", f"{type(e).__name__}: {e}"
        return record
    record.status = answer.status_code
    usage = usage_from_bytes(where.api, answer.content) if answer.is_success else None
    if usage is None:
        record.outcome, record.message = "upstream_error", f"{base + path} answered {answer.status_code}"
        return record
    record.outcome, record.billed = "ok", usage.to_dict()
    record.billed_input, record.billed_output, record.billed_cost = usage.input_tokens, 0, Decimal(0)
    return record
