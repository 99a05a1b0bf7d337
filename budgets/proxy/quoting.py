"""A call's prediction: the body read by :func:`mmtok.request.parse_body` and priced by
:func:`mmtok.budgets.pricing.price_request`, the same calls ``mmtok price body.json`` makes, turned into what the
proxy needs: a cost to check limits against, tokens per modality, and the call's shape for the ledger (each part's
kind, geometry, settings and hash, never its content)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from mmtok.budgets.ledger import Record
from mmtok.budgets.proxy.config import ProxyConfig
from mmtok.budgets.proxy.providers import COUNT_APIS, Route
from mmtok.errors import MmtokError

# The body shape each API's requests have, for the reader: the counting endpoints take their API's body.
BODY_APIS = {
    "openai-input-tokens": "openai-responses",
    "anthropic-count-tokens": "anthropic-messages",
    "gemini-count-tokens": "gemini-generate",
}
OFFLOAD_BYTES = 256 * 1024  # a larger body is measured and priced on a worker thread, off the event loop
GEOMETRY = (("w", "width"), ("h", "height"), ("seconds", "duration_s"), ("bytes", "size_bytes"))


@dataclass
class Prediction:
    """What mmtok predicts for a call, or why it cannot."""

    model: str | None = None
    tokens: dict[str, int] = field(default_factory=dict)  # modality -> tokens, output budget included
    input_tokens: int | None = None
    cost: Decimal | None = None
    label: str | None = None
    complete: bool = False
    problem: str = ""  # why the prediction is missing or incomplete
    parts: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    invalid: str = ""  # a value the provider refuses (HTTP 400): the proxy answers so without sending the call
    limits: list[str] = field(default_factory=list)  # provider limits the request breaks (it will be refused)

    def fill(self, record: Record) -> None:
        record.model = self.model
        record.parts, record.settings = self.parts, self.settings
        record.predicted, record.predicted_input = self.tokens, self.input_tokens
        record.predicted_cost, record.predicted_label = self.cost, self.label
        said = [f"prediction: {self.problem}" if self.problem else "", *(f"provider limit: {m}" for m in self.limits)]
        record.message = "; ".join(m for m in (record.message, *said) if m)

    def headers(self) -> dict[str, str]:
        """What the proxy says about the call in its answer's headers."""
        if self.input_tokens is None:
            return {"x-mmtok-predicted": "unknown"}
        out = {"x-mmtok-predicted-input-tokens": str(self.input_tokens), "x-mmtok-predicted-label": self.label or ""}
        if self.cost is not None:
            out["x-mmtok-predicted-cost-usd"] = str(self.cost)
        return out


def _body(payload: dict[str, Any], where: Route) -> dict[str, Any]:
    """The request body inside a Gemini countTokens call (``generateContentRequest``), or the payload itself."""
    inner = payload.get("generateContentRequest") if where.api == "gemini-count-tokens" else None
    return inner if isinstance(inner, dict) else payload


def part_shape(measured: Any) -> dict[str, Any]:
    """A measured part as the ledger keeps it: kind, where, settings, geometry and a content hash; never its text or
    bytes (text parts keep their length in characters)."""
    part, media = measured.part, measured.media
    shape: dict[str, Any] = {"kind": part.kind, "where": part.where, "role": part.role}
    if part.detail:
        shape["detail"] = part.detail
    if part.kind == "text" or part.ref is None:
        shape["chars"] = len(part.text or "")
    else:
        ref = part.ref
        shape["scheme"], shape["mime"] = ref.scheme, ref.mime
        held = ref.data or ref.url or ref.path or ref.file_id or ""
        shape["sha256"] = hashlib.sha256(held.encode("utf-8", "replace")).hexdigest()
    for name, attribute in GEOMETRY:
        value = getattr(media, attribute, None) if media is not None and part.kind != "text" else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            shape[name] = round(value, 3) if isinstance(value, float) else value
    pages = getattr(media, "pages", None)
    if isinstance(pages, (list, tuple)):
        shape["pages"] = len(pages)
    if measured.error:
        shape["uncountable"] = measured.error
    return shape


def predict(payload: dict[str, Any], where: Route, config: ProxyConfig) -> Prediction:
    """The prediction for one call (never raises for a bad body: the problem is said in the prediction)."""
    from mmtok.budgets.pricing import quote_request, resolve
    from mmtok.request import InvalidBody, OutputAsk, measuring, parse_body

    body = _body(payload, where)
    try:
        request = parse_body(body, api=BODY_APIS.get(where.api, where.api), source=where.upstream_path)
    except MmtokError as e:
        return Prediction(where.model or _model(body), problem=str(e))
    if where.api in COUNT_APIS:  # a counting call generates nothing, and its output settings are not sent on
        request = dataclasses.replace(request, invalid=(), output=OutputAsk())
    prediction = Prediction(where.model or request.model, settings=_settings(request))
    try:
        model = resolve(prediction.model or "", config.prices)
        with measuring(request.parts, _policy(config.read_urls, config.allow_private)) as measured:
            prediction.parts = [part_shape(m) for m in measured]
            quote = quote_request(request, measured, model, _standard(), output_given=where.api in COUNT_APIS)
    except InvalidBody as e:
        prediction.invalid = "; ".join(str(p) for p in e.problems)
        prediction.problem = str(e)
        return prediction
    except MmtokError as e:
        prediction.problem = str(e)
        return prediction
    fill_from_quote(prediction, quote)
    return prediction


@functools.lru_cache(maxsize=8)
def _policy(read_urls: bool, allow_private: bool) -> Any:
    """What measuring a call's body may do, as the proxy's flags say (made once: a frozen value)."""
    from mmtok.media.remote import UrlPolicy
    from mmtok.request import Policy

    return Policy(urls=UrlPolicy(read=read_urls, allow_private=allow_private))


@functools.cache
def _standard() -> Any:
    """The options a call is priced with before its body's own settings: standard rates, today (a frozen value)."""
    from mmtok.budgets.pricing import Options

    return Options()


def fill_from_quote(prediction: Prediction, quote: Any) -> None:
    """``prediction``'s tokens, cost and label from a quote (overhead lines, such as OpenAI's message framing,
    apart from text), in one pass over its lines."""
    from mmtok.budgets.pricing import formulas
    from mmtok.budgets.pricing.quote import OUTPUT_KINDS

    tokens: dict[str, int] = {}
    input_tokens, cost, output = 0, Decimal(0), None
    for line in quote.lines:
        kind = "overhead" if line.item.startswith("<") and line.modality == "text" else line.modality
        tokens[kind] = tokens.get(kind, 0) + line.tokens
        cost += line.cost  # in line order, as Quote.total_cost adds them
        if line.modality in OUTPUT_KINDS:
            output = output or line
        else:
            input_tokens += line.tokens
    prediction.tokens, prediction.input_tokens, prediction.cost = tokens, input_tokens, cost
    prediction.label = formulas.weakest([ln.label for ln in quote.lines])
    prediction.complete = quote.complete
    prediction.problem = "; ".join(quote.missing)
    prediction.limits = list(quote.limits)
    if output is not None:
        prediction.settings["output_bound"] = output.working
    if quote.cache is not None:
        prediction.settings["cache"] = quote.cache.to_dict()


async def predict_async(payload: dict[str, Any], where: Route, config: ProxyConfig, content: bytes) -> Prediction:
    """``predict``, on a worker thread for a large body or one that may name a URL to read (so that one slow body
    does not stall every other call)."""
    try:
        if len(content) > OFFLOAD_BYTES or (config.read_urls and b'"http' in content):
            return await asyncio.to_thread(predict, payload, where, config)
        return predict(payload, where, config)
    except Exception as e:  # a fault in pricing must not stop the call: it goes on, unpriced, and says why
        model = where.model or _model(_body(payload, where))
        return Prediction(model, problem=f"mmtok failed to price this body ({type(e).__name__}: {e}): please report it")


def _model(body: dict[str, Any]) -> str | None:
    model = body.get("model")
    return model if isinstance(model, str) else None


def _settings(request: Any) -> dict[str, Any]:
    ask = request.output
    settings = {
        "messages": request.messages,
        "max_output_tokens": request.max_output_tokens,
        "service_tier": request.service_tier,
        "media_resolution": request.media_resolution,
        "tools": request.tools,
        "replies": ask.candidates if ask.candidates > 1 else None,
        "output_modalities": list(ask.modalities) or None,
        "thinking": ask.thinking or None,
    }
    return {k: v for k, v in settings.items() if v not in (None, 0)}
