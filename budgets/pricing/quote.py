"""A quote: one request on one model, a line per part with its tokens, cost, working, rate and label."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from mmtok.budgets.pricing import formulas as F
from mmtok.budgets.pricing.caching import CachePlan


@dataclass(frozen=True)
class Line:
    """One part of a request on one model: an attachment's modality, cached tokens, the output, a request fee."""

    item: str  # the attachment ("photo.jpg", "<text>"), or "cache" / "output" / "request"
    modality: str  # text | image | audio | video | cache_read | cache_write | output | output_audio | request
    tokens: int
    cost: Decimal
    working: str  # how the tokens were counted
    rate: str  # the rate applied, and why
    label: str = "exact"  # of the token count: exact | documented | upper bound | estimate | lower bound
    cache: str = ""  # written to the prompt cache at the write rate, for this long ("5m", "1h"); "" otherwise

    @property
    def exact(self) -> bool:
        return self.label == "exact"

    def to_dict(self) -> dict[str, Any]:
        return {
            "item": self.item,
            "modality": self.modality,
            "tokens": self.tokens,
            "cost": str(self.cost),
            "working": self.working,
            "rate": self.rate,
            "label": self.label,
            **({"cache": self.cache} if self.cache else {}),
        }


OUTPUT_KINDS = ("output", "output_audio", "output_image")


@dataclass(frozen=True)
class Quote:
    item: str  # what was priced, for people
    model: str  # as asked
    model_ref: str  # as the price source names it ("openai:gpt-5.2")
    provider: str
    family: str
    lines: tuple[Line, ...]
    money_source: str  # genai-prices | LiteLLM map <version> | a sheet's path
    source_url: str
    as_of: dt.date
    option: str = "standard"  # standard | batch | flex | priority
    tier: str = ""  # the long-context tier applied, in words ("" for the base rates)
    missing: tuple[str, ...] = ()  # attachments left out, with the reason
    warnings: tuple[str, ...] = ()
    currency: str = "USD"
    limits: tuple[str, ...] = ()  # provider limits the request breaks (it would be refused), each with its source
    cache: CachePlan | None = None  # the prompt cache: tokens written (or readable by a repeat) and their read price

    @property
    def input_lines(self) -> tuple[Line, ...]:
        return tuple(ln for ln in self.lines if ln.modality not in OUTPUT_KINDS)

    @property
    def input_tokens(self) -> int:
        return sum(ln.tokens for ln in self.input_lines)

    @property
    def output_tokens(self) -> int:
        return sum(ln.tokens for ln in self.lines if ln.modality in OUTPUT_KINDS)

    @property
    def input_cost(self) -> Decimal:
        return sum((ln.cost for ln in self.input_lines), Decimal(0))

    @property
    def output_cost(self) -> Decimal:
        return sum((ln.cost for ln in self.lines if ln.modality in OUTPUT_KINDS), Decimal(0))

    @property
    def total_cost(self) -> Decimal:
        return sum((ln.cost for ln in self.lines), Decimal(0))

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def label(self) -> str:
        return F.weakest([ln.label for ln in self.lines])

    @property
    def exact(self) -> bool:
        return self.label == "exact"

    @property
    def source(self) -> str:
        return f"{self.money_source} ({self.source_url})" if self.source_url else self.money_source

    def tokens(self, modality: str | None = None) -> int:
        """Tokens of one modality (``"image"``, ``"cache_read"``, ``"output"``...), or all input tokens."""
        if modality is None:
            return self.input_tokens
        return sum(ln.tokens for ln in self.lines if ln.modality == modality)

    def to_dict(self) -> dict[str, Any]:
        tokens: dict[str, int] = {}
        sums = {False: [0, Decimal(0)], True: [0, Decimal(0)]}  # input, output: tokens and cost, in one pass
        total = Decimal(0)
        for ln in self.lines:
            tokens[ln.modality] = tokens.get(ln.modality, 0) + ln.tokens
            part = sums[ln.modality in OUTPUT_KINDS]
            part[0] += ln.tokens
            part[1] += ln.cost
            total += ln.cost  # in line order, as total_cost adds them
        (input_tokens, input_cost), (output_tokens, output_cost) = sums[False], sums[True]
        return {
            "item": self.item,
            "model": self.model,
            "model_ref": self.model_ref,
            "provider": self.provider,
            "family": self.family,
            "tokens": tokens,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "input_cost": str(input_cost),
            "output_cost": str(output_cost),
            "total_cost": str(total),
            "currency": self.currency,
            "label": self.label,
            "complete": self.complete,
            "missing": list(self.missing),
            "warnings": list(self.warnings),
            "option": self.option,
            "tier": self.tier,
            "limits": list(self.limits),
            "cache": self.cache.to_dict() if self.cache else None,
            "lines": [ln.to_dict() for ln in self.lines],
            "money_source": self.money_source,
            "source_url": self.source_url,
            "as_of": self.as_of.isoformat(),
        }
