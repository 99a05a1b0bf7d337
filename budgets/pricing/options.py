"""How a request is billed: detail, date, batch / flex / priority, output and cached tokens."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from dataclasses import dataclass
from typing import Any

from mmtok.budgets.pricing.money import OPTIONS
from mmtok.errors import PriceError

DETAIL_LEVELS = ("low", "medium", "high", "ultra_high", "original", "auto")


# ------------------------------------------------------------------------------------------------------- money
@dataclass(frozen=True)
class Options:
    """How the request is billed: see :func:`price`."""

    detail: str | None = None
    at: dt.date | None = None
    option: str = "standard"
    output_tokens: int = 0
    output_audio: bool = False
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    text_tokens: int = 0  # more text input tokens, counted by the caller (a prompt of known size)
    output_bound: str = ""  # where output_tokens is a bound, not a count: its working ("at most 3 x 100 ...")
    output_label: str = ""  # the bound's label where it is not an upper bound ("estimate")
    output_modalities: tuple[str, ...] = ()  # what the body asks the reply to hold: text | audio | image

    def __post_init__(self) -> None:
        for name in ("output_tokens", "cached_input_tokens", "cache_write_tokens", "text_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise PriceError(f"{name} must be a non-negative integer, got {value!r}")
        if self.at is not None and not isinstance(self.at, dt.date):
            raise PriceError(f"at must be a date like 2026-07-24, got {self.at!r}")
        if self.detail is not None and self.detail not in DETAIL_LEVELS:
            raise PriceError(f"detail must be one of {', '.join(DETAIL_LEVELS)}, got {self.detail!r}")
        if self.option not in OPTIONS:
            raise PriceError(f"unknown price option {self.option!r}; use {', '.join(OPTIONS)}")

    @classmethod
    def of(
        cls, *, at: dt.date | str | None = None, batch: bool = False, tier: str | None = None, **fields: Any
    ) -> Options:
        """Options from the user's words: a date as text, ``batch`` / ``tier`` as the one price option they are."""
        if isinstance(at, str):
            try:
                at = dt.date.fromisoformat(at)
            except ValueError:
                raise PriceError(f"at must be a date like 2026-07-24, got {at!r}") from None
        if batch and tier:
            raise PriceError("batch and a service tier are different price options: choose one")
        if tier is not None and tier not in ("flex", "priority"):
            raise PriceError(f"tier must be flex or priority, got {tier!r}")
        return cls(at=at, option="batch" if batch else (tier or "standard"), **fields)


def request_options(
    detail: Any, at: Any, batch: Any, tier: Any, output: Any, audio: Any, cached: Any, written: Any, text: Any
) -> Options:
    """``Options.of`` for ``price``'s arguments, made once per distinct set (a folder prices with the same ones)."""
    try:
        return _options_cached(detail, at, batch, tier, output, audio, cached, written, text)
    except TypeError:  # an unhashable argument: Options.of says what is wrong with it
        return _options_of(detail, at, batch, tier, output, audio, cached, written, text)


def _options_of(
    detail: Any, at: Any, batch: Any, tier: Any, output: Any, audio: Any, cached: Any, written: Any, text: Any
) -> Options:
    return Options.of(
        detail=detail,
        at=at,
        batch=batch,
        tier=tier,
        output_tokens=output,
        output_audio=audio,
        cached_input_tokens=cached,
        cache_write_tokens=written,
        text_tokens=text,
    )


_options_cached = functools.lru_cache(maxsize=256, typed=True)(_options_of)  # typed: 1 is not True


def changed(options: Options, changes: dict[str, Any]) -> Options:
    """``options`` with ``changes`` (``dataclasses.replace``'s result), made once per distinct pair: a batch file's
    lines and a proxy's calls repeat a few bodies' settings, and each replace runs every check again."""
    if not changes:
        return options
    try:
        return _changed(options, tuple(sorted(changes.items())))
    except TypeError:  # an unhashable value: made afresh
        return dataclasses.replace(options, **changes)


@functools.lru_cache(maxsize=1024, typed=True)
def _changed(options: Options, changes: tuple[tuple[str, Any], ...]) -> Options:
    return dataclasses.replace(options, **dict(changes))
