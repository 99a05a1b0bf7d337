"""What an API request body costs: one quote per body and model, a line per part with its working and label.

    >>> quote = price_request(open("body.json", "rb").read())                       # doctest: +SKIP
    >>> [(line.item, line.modality, line.tokens, line.label) for line in quote.lines] # doctest: +SKIP

The body is read by :func:`mmtok.request.parse_body` (the one parser the CLI, shrink, the proxy and MCP use), its
media measured once (:func:`mmtok.request.measuring`), then priced on each model by the same rules as files. The
body's own settings apply: ``detail`` and ``media_resolution`` per part (on the provider the body is for: another
provider's model gets its own default), ``service_tier`` flex or priority, ``cache_control`` marks (the prefix at the
cache-write rate), and the output's upper bound (``output.py``: the body's limit or the model's maximum, times ``n`` /
``candidateCount``, thinking where billed beside it, at the rate of the modalities asked) unless an output count is
given. A value the provider refuses raises :class:`mmtok.request.InvalidBody`; a part mmtok cannot count makes the
quote incomplete with one line naming it, never a zero.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mmtok.budgets.pricing.counts import Attachment, Given, Uncountable
from mmtok.budgets.pricing.models import Model, PriceSheets, provider_of, rate_card, resolve
from mmtok.budgets.pricing.options import Options, changed
from mmtok.budgets.pricing.output import PROVIDER_NAMES, UnboundedOutput, output_bound
from mmtok.budgets.pricing.overheads import overheads
from mmtok.budgets.pricing.quote import Quote
from mmtok.budgets.pricing.quoting import make_quote
from mmtok.errors import PriceError

if TYPE_CHECKING:  # the body readers load when a body is priced: a photo's quote never needs them
    from mmtok.request import Measured, Policy, Request

# service_tier values as bodies write them -> mmtok's price option (OpenAI renamed priority "fast" on 2026-07-30;
# Gemini's older pages spell SERVICE_TIER_PRIORITY). auto, default, standard_only and scale bill standard rates.
SERVICE_TIERS = {"flex": "flex", "priority": "priority", "fast": "priority", "service_tier_flex": "flex",
                 "service_tier_priority": "priority"}  # fmt: skip
API_PROVIDERS = {"openai": "openai", "anthropic": "anthropic", "gemini": "google"}


def price_request(
    body: Request | bytes | str | dict[str, Any],
    model: str | None = None,
    *,
    prices: PriceSheets = (),
    at: dt.date | str | None = None,
    batch: bool = False,
    tier: str | None = None,
    output_tokens: int | None = None,
    output_audio: bool = False,
    cached_input_tokens: int = 0,
    cache_write_tokens: int = 0,
    policy: Policy | None = None,
    source: str = "<body>",
) -> Quote:
    """Price an API request body (JSON text, a parsed dict, or a :class:`mmtok.request.Request`) on ``model``
    (default: the model the body names). ``output_tokens``: the reply's size; None takes the body's output budget
    as an upper bound. ``policy``: what reading the body's media may do (URLs, local paths, size caps). Other
    arguments as :func:`mmtok.price`."""
    from mmtok.request import Request, measuring, parse_body

    request = body if isinstance(body, Request) else parse_body(body, source=source)
    options = Options.of(
        at=at,
        batch=batch,
        tier=tier,
        output_tokens=output_tokens or 0,
        output_audio=output_audio,
        cached_input_tokens=cached_input_tokens,
        cache_write_tokens=cache_write_tokens,
    )
    target = resolve(model_for(request, model), prices)
    with measuring(request.parts, policy) as measured:
        return quote_request(request, measured, target, options, output_given=output_tokens is not None)


def model_for(request: Request, model: str | None) -> str:
    """The model to price on: the one asked, else the body's own."""
    name = model or request.model
    if not name:
        raise PriceError(
            f"{request.source}: the body names no model (a Gemini body carries it in the URL): give one (-m MODEL)"
        )
    return name


def quote_request(
    request: Request, measured: Sequence[Measured], model: Model, options: Options, *, output_given: bool = False
) -> Quote:
    """The quote of a request whose parts are measured, on one model, with the body's own settings applied. A body
    with a value the provider refuses raises :class:`mmtok.request.InvalidBody` (one line naming each field); an
    output nothing bounds is left out of the total, which is then incomplete."""
    api = request.api.split("-")[0]
    if request.invalid:
        from mmtok.request import InvalidBody

        raise InvalidBody(request.source, request.invalid, PROVIDER_NAMES.get(api, "the provider"))
    same_provider = provider_of(model) == API_PROVIDERS[api]
    options, warnings, missing = body_options(request, model, options, output_given, same_provider)
    attachments = [_attachment(m, request, model, same_provider) for m in measured]
    warnings += [f"{m.name}: {note}" for m in measured for note in m.notes]
    return make_quote(model, [*attachments, *overheads(request, model)], options, request.source, request.size_bytes,
                      warnings, missing)  # fmt: skip


def body_options(
    request: Request, model: Model, options: Options, output_given: bool, same_provider: bool = True
) -> tuple[Options, list[str], list[str]]:
    """``options`` with what the body sets and the user did not: the service tier and the output's bound (the
    body's limit or the model's maximum, times the replies asked, at the rate of the modalities asked); the
    warnings, and what is left out of the quote (an output nothing bounds)."""
    warnings: list[str] = []
    missing: list[str] = []
    changes: dict[str, Any] = {}
    option = SERVICE_TIERS.get((request.service_tier or "").lower())
    if option and options.option == "standard":
        try:
            rate_card(model, options.at, option)
            changes["option"] = option
        except PriceError:
            warnings.append(
                f"the body asks service_tier={request.service_tier}, but no {option} rates are known for "
                f"{model.asked}: priced at standard rates"
            )
    if not output_given:
        bound = None
        try:
            bound = output_bound(request, model, same_provider)
        except UnboundedOutput as e:
            missing.append(f"output: {e}")
        if bound is not None:
            changes |= {"output_tokens": bound.tokens, "output_bound": bound.working, "output_label": bound.label}
            if same_provider:  # the body's own modalities; another provider's model replies in text
                changes["output_modalities"] = bound.modalities
    elif same_provider and request.output.modalities:
        changes["output_modalities"] = request.output.modalities
    return changed(options, changes), warnings, missing


def _attachment(measured: Measured, request: Request, model: Model, same_provider: bool) -> Attachment:
    if measured.error:
        return Attachment(measured.name, Uncountable(measured.error))
    if measured.part.where == "tools":  # the definitions as compact JSON: each provider renders them its own way
        from mmtok.budgets.pricing.text import count_text

        count = count_text(measured.media.text, model.text_rule)
        working = f"{count.working} (the definitions as JSON; the provider renders them its own way)"
        cache = measured.part.cache if same_provider else ""
        return Attachment(measured.name, Given("text", count.but(working, "estimate")), cache=cache)
    detail = (measured.part.detail or request.media_resolution) if same_provider else None
    cache = measured.part.cache if same_provider else ""  # cache marks are Anthropic's
    return Attachment(measured.name, measured.media, detail, measured.part.clip if same_provider else None, cache)
