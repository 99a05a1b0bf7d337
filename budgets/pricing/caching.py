"""Prompt caching: what a request's cached prefix costs to write, and what the same tokens cost read back.

Each provider's rule, read 2026-12-05 (the stored copies the search tool holds):

- **Anthropic** (https://platform.claude.com/docs/en/build-with-claude/prompt-caching): ``cache_control`` on a block
  writes the prefix up to it (tools, then system, then messages) to the cache; a top-level ``cache_control`` marks the
  last cacheable block. "5-minute cache write 1.25x" the base input price, "1-hour cache write 2.0x", "cache hit or
  refresh 0.1x". A prefix shorter than the model's minimum is "processed without caching (no error)": 4,096 tokens on
  Opus 4.5, 4.6 and 4.7, Haiku 4.5 and Mythos; 2,048 on Haiku 3 and 3.5; 1,024 on the others (a second copy gives
  2,048 for Sonnet 4.6: the lower is taken, so the write is priced where in doubt). The written tokens are quoted at
  the write rate (the first call), and the read price is given beside them (a repeat within the lifetime).
- **OpenAI** (https://developers.openai.com/api/docs/guides/prompt-caching): caching is automatic for prompts of
  1,024 tokens or more; writes cost nothing extra, a repeat reads the prefix at the cached-input rate. The quote
  prices the first call (every token at the input rate) and gives the repeat's read price beside it.
- **Gemini** (https://ai.google.dev/gemini-api/docs/caching): implicit caching on Gemini 2.5 and later works as
  OpenAI's (no write cost, cached reads at the cache rate above the model's minimum); a ``cachedContent`` the body
  names holds tokens mmtok cannot see (``mmtok.request.gemini``): the quote is incomplete.

The ledger's billed cost reads the cache usage fields of the response (``budgets/ledger/usage.py``): this module is
only the quote's side.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from mmtok.budgets.pricing.money import MILLION

ANTHROPIC_PAGE = "https://platform.claude.com/docs/en/build-with-claude/prompt-caching"
OPENAI_PAGE = "https://developers.openai.com/api/docs/guides/prompt-caching"
GEMINI_PAGE = "https://ai.google.dev/gemini-api/docs/caching"
READ = "2026-12-05"
WRITE_MULTIPLIERS = {"5m": Decimal("1.25"), "1h": Decimal("2")}
READ_MULTIPLIER = Decimal("0.1")
ANTHROPIC_MINIMUMS = (  # (name patterns, the fewest tokens a cached prefix may hold)
    (("claude-opus-4-5*", "claude-opus-4-6*", "claude-opus-4-7*", "claude-haiku-4-5*", "claude-mythos*"), 4096),
    (("claude-3-haiku*", "claude-3-5-haiku*", "claude-haiku-3*"), 2048),
)
ANTHROPIC_DEFAULT_MINIMUM = 1024
AUTOMATIC_MINIMUM = 1024  # OpenAI's, and the least of Gemini's implicit-caching minimums
TTL_WORDS = {"5m": "5 minutes", "1h": "1 hour"}


@dataclass(frozen=True)
class CachePlan:
    """A request's prompt cache: the tokens written (or, for automatic caching, that a repeat may read), what they
    cost as the quote prices them, and what they cost read back from the cache."""

    kind: str  # written | automatic | not cached
    tokens: int
    cost: Decimal  # the tokens as this quote prices them (written, or at the input rate)
    read_cost: Decimal  # the same tokens read from the cache by a repeat
    said: str | tuple[str, Decimal]  # the working, or (provider, cached rate) of an automatic plan, worded on demand
    label: str = "upper bound"

    @property
    def working(self) -> str:
        """For people: what is written (or readable), the rates, and the page they come from."""
        if isinstance(self.said, str):
            return self.said
        provider, cached = self.said  # automatic caching: worded only when shown (most quotes never are)
        page = OPENAI_PAGE if provider == "openai" else GEMINI_PAGE
        who = "OpenAI" if provider == "openai" else "Gemini (implicit caching)"
        return (
            f"{who} caches prompts of {AUTOMATIC_MINIMUM:,} tokens or more by itself, at no extra cost ({page}, read "
            f"{READ}): a repeat reads up to these {self.tokens:,} input tokens at ${cached}/1M: ${_usd(self.read_cost)}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "tokens": self.tokens,
            "cost": str(self.cost),
            "read_cost": str(self.read_cost),
            "working": self.working,
            "label": self.label,
        }


def anthropic_minimum(name: str) -> int:
    """The fewest tokens Anthropic caches on the model ``name``."""
    for patterns, tokens in ANTHROPIC_MINIMUMS:
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            return tokens
    return ANTHROPIC_DEFAULT_MINIMUM


def write_rate(rates: dict[str, Decimal], ttl: str) -> tuple[Decimal, str]:
    """The per-million rate of a cache write of lifetime ``ttl``, and its source: the price data's own cache-write
    rate for 5 minutes where it has one, else the page's multiple of the input rate."""
    given = rates.get("cache_write")
    if ttl == "5m" and given is not None and given > rates["input"]:
        return given, "the price data's cache-write rate"
    rate = rates["input"] * WRITE_MULTIPLIERS[ttl]
    return rate, f"{WRITE_MULTIPLIERS[ttl]}x the input rate ({ANTHROPIC_PAGE}, read {READ})"


def read_rate(rates: dict[str, Decimal]) -> tuple[Decimal, str]:
    given = rates.get("cache_read")
    if given is not None and given < rates["input"]:
        return given, "the price data's cached-input rate"
    return rates["input"] * READ_MULTIPLIER, f"{READ_MULTIPLIER}x the input rate ({ANTHROPIC_PAGE}, read {READ})"


def written_plan(tokens_by_ttl: dict[str, int], rates: dict[str, Decimal]) -> CachePlan:
    """The plan of an Anthropic request whose marked prefix holds ``tokens_by_ttl`` tokens per lifetime."""
    cost = sum((n * write_rate(rates, ttl)[0] / MILLION for ttl, n in tokens_by_ttl.items()), Decimal(0))
    tokens = sum(tokens_by_ttl.values())
    rate, where = read_rate(rates)
    kept = {ttl: n for ttl, n in tokens_by_ttl.items() if n}
    lifetimes = " and ".join(f"{n:,} for {TTL_WORDS[ttl]}" for ttl, n in kept.items())
    lifetimes = f"for {TTL_WORDS[next(iter(kept))]}" if len(kept) == 1 else lifetimes
    working = (
        f"{tokens:,} tokens written to the prompt cache ({lifetimes}), priced at the write rate on this first call; "
        f"a repeat within the lifetime reads them at ${rate}/1M ({where}): ${_usd(tokens * rate / MILLION)}"
    )
    return CachePlan("written", tokens, cost, tokens * rate / MILLION, working)


def below_minimum(tokens: int, minimum: int, model: str) -> CachePlan:
    working = (
        f"the cached prefix holds {tokens:,} token{'s' if tokens != 1 else ''}, under {model}'s minimum of "
        f"{minimum:,}: Anthropic processes it "
        f"without caching ({ANTHROPIC_PAGE}, read {READ}); priced as plain input"
    )
    return CachePlan("not cached", tokens, Decimal(0), Decimal(0), working, "documented")


def automatic_plan(provider: str, input_tokens: int, rates: dict[str, Decimal]) -> CachePlan | None:
    """OpenAI's and Gemini's automatic caching: nothing extra on this call, the prompt's prefix read at the cached
    rate by a repeat. None below the minimum or without a cheaper cached rate."""
    cached = rates.get("cache_read")
    if input_tokens < AUTOMATIC_MINIMUM or cached is None or cached >= rates["input"]:
        return None
    read_cost = input_tokens * cached / MILLION
    return CachePlan("automatic", input_tokens, input_tokens * rates["input"] / MILLION, read_cost, (provider, cached))


def _usd(value: Decimal) -> str:
    return f"{value:.6f}" if value < 1 else f"{value:,.4f}"
