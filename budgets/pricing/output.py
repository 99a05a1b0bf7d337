"""The upper bound of a request's output: the body's own limit, else the model's maximum, times the replies asked
for, with the thinking the provider bills beside it, at the rate of the modalities asked for.

Each provider's rule, read 2026-12-05 (the references' own words are in ``mmtok.request.settings``):

- **OpenAI**: ``max_completion_tokens`` / ``max_output_tokens`` are "an upper bound ... including visible output
  tokens and reasoning tokens" (developers.openai.com/api/reference/chat/create, /responses/create): reasoning is
  inside. ``n`` replies are each bounded by it and "billed ... across all choices". Audio output
  (``modalities: ["audio"]``) shares the limit with its transcript: every token is bounded at the audio rate.
  A limit above the model's maximum is refused ("max_tokens is too large ... This model supports at most 16384
  completion tokens").
- **Anthropic**: "Thinking tokens count toward your max_tokens limit" (platform.claude.com/docs/en/api/messages):
  inside. A limit above the model's maximum is refused ("max_tokens: 128001 > 64000, which is the maximum allowed
  number of output tokens for claude-opus-4-5-20251101", github.com/anthropics/claude-code#24451). With server
  tools the model may be called more than once, "so usage.output_tokens can exceed max_tokens": the output is then
  an estimate.
- **Gemini**: thoughts are billed as output ("response pricing is the sum of output tokens and thinking tokens",
  ai.google.dev/gemini-api/docs/thinking) and the page does not count them within ``maxOutputTokens``
  (googleapis/python-genai#2062 measured them within it on Gemini 3; the page is followed): a thinking budget is
  added to the limit; where thinking is on without a number (dynamic, a level), the reply is bounded by the model's
  output limit, which holds thoughts and answer alike. ``candidateCount`` replies are each bounded. A limit above
  the model's maximum is said, not refused (Google's answer to it is not documented for the Gemini API).

The model's maximum output comes from LiteLLM's map (``max_output_tokens``, in the model catalog), labelled so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mmtok.budgets.pricing.catalog import catalog
from mmtok.budgets.pricing.models import Model
from mmtok.errors import PriceError

if TYPE_CHECKING:
    from mmtok.request import Request

PROVIDER_NAMES = {"openai": "OpenAI", "anthropic": "Anthropic", "gemini": "Google"}


class UnboundedOutput(PriceError):
    """Neither the body nor the model catalog bounds the output: the quote is incomplete, never a zero."""


@dataclass(frozen=True)
class OutputBound:
    """The most a request's reply can bill, and why."""

    tokens: int
    working: str  # for people: what set each factor
    label: str  # upper bound | estimate
    modalities: tuple[str, ...]  # text | audio | image, as the body asks (): text


def output_bound(request: Request, model: Model, same_provider: bool) -> OutputBound | None:
    """The bound of ``request``'s output on ``model``; None for an Anthropic body without ``max_tokens``, which is a
    count_tokens body (Messages requires the field: such a body generates nothing). Raises :class:`InvalidBody` for
    a limit the provider refuses on this model, :class:`UnboundedOutput` where nothing bounds it."""
    ask, api = request.output, request.api.split("-")[0]
    if api == "anthropic" and not ask.limit_field:
        return None
    maximum = model.entry.max_output_tokens if model.entry is not None else None
    limit, notes = ask.limit, list(ask.notes)
    if limit is not None and maximum is not None and limit > maximum:
        limit = _over_maximum(request, model, maximum, same_provider, notes)
    per_reply, why = _per_reply(request, model, limit, maximum)
    thinking, why_thinking = _thinking(request, model, per_reply, maximum) if api == "gemini" else (0, "")
    per_reply += thinking
    tokens = per_reply * ask.candidates
    factors = f"{ask.candidates:,} x {per_reply:,} = " if ask.candidates > 1 else ""
    replies = f", {ask.candidates_field.rsplit('.', 1)[-1]}={ask.candidates}" if ask.candidates > 1 else ""
    working = f"at most {factors}{tokens:,} output tokens ({why}{why_thinking}{replies})"
    label = "upper bound"
    if ask.server_tools and api == "anthropic":
        label = "estimate"
        notes.append("server tools may call the model more than once, so the output can exceed max_tokens")
    if api == "openai" and model.entry is not None and model.entry.reasoning:
        working += "; reasoning tokens are within it"
    if notes:
        working += "; " + "; ".join(notes)
    return OutputBound(tokens, working, label, ask.modalities)


def _per_reply(request: Request, model: Model, limit: int | None, maximum: int | None) -> tuple[int, str]:
    if limit is not None:
        return limit, f"the body's {request.output.limit_field.rsplit('.', 1)[-1]}: {limit:,}"
    if maximum is None:
        raise UnboundedOutput(
            f"the body sets no output limit and no maximum output is known for {model.asked}: the output is not "
            "bounded (set max_tokens, or give --output-tokens)"
        )
    return maximum, f"no limit in the body: {model.asked}'s maximum output, LiteLLM map {catalog().litellm_version}"


def _over_maximum(request: Request, model: Model, maximum: int, same_provider: bool, notes: list[str]) -> int:
    """A limit above the model's maximum: refused on its own provider where the provider refuses it (OpenAI,
    Anthropic); said, and bounded at the limit, otherwise."""
    field = request.output.limit_field or "the output limit"
    api = request.api.split("-")[0]
    said = f"{request.output.limit:,} is above {model.asked}'s maximum output of {maximum:,} (LiteLLM map)"
    if same_provider and api in ("openai", "anthropic"):
        from mmtok.request import Invalid, InvalidBody  # a body's reader is loaded only where a body is priced

        raise InvalidBody(request.source, [Invalid(field, said)], PROVIDER_NAMES[api])
    if same_provider:
        notes.append(f"{field} {said}: Google may refuse it")
        return request.output.limit or maximum
    notes.append(f"{field} {said}: bounded at the model's maximum")
    return maximum


def _thinking(request: Request, model: Model, per_reply: int, maximum: int | None) -> tuple[int, str]:
    """Gemini: the thinking tokens to add to each reply's bound, and why."""
    ask = request.output
    if ask.thinking == "off" or model.entry is None or not model.entry.reasoning:
        return 0, ""
    if ask.thinking == "budget" and ask.thinking_budget is not None:
        added = ask.thinking_budget
        if maximum is not None:
            added = max(0, min(added, maximum - per_reply))
        return added, f" + a thinking budget of {ask.thinking_budget:,} (Google: the model may overflow it)"
    if maximum is None or per_reply >= maximum:
        return 0, ""
    how = {"level": "a thinking level", "dynamic": "dynamic thinking"}.get(ask.thinking, "thinking on by default")
    return maximum - per_reply, f" + {how}: thoughts up to the model's output limit of {maximum:,}"
