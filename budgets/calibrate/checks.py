"""What a calibration must show before it changes a rule: enough calls, sizes on both sides of the breakpoints, and
predictions of calls it did not see.

A fit that reproduces the calls it was fitted to proves little when it had as many knobs as calls: four Claude calls
billed under a capped rule were once "fitted" as 192 + 167 tokens per 768-px tile (four parameters, four calls), and
with that sheet a 32x24 image cost 359 tokens against a bill of 2. :mod:`mmtok.budgets.calibrate` therefore keeps
the documented rule unless the fitted one passes every check here:

- **calls**: at least :data:`CALLS_PER_PARAMETER` calls with images per parameter the search moves
  (:func:`parameters`; the per-call overhead counts as one when no text-only call measured it apart);
- **breakpoints**: the images fall on both sides of the fitted rule's breakpoints, and for a new rule family of
  the documented rule's too (:func:`regime`: resized or sent as is, the number of tiles, small or tiled), so the
  regimes the rules tell apart were seen;
- **held out**: leave-one-out (:func:`leave_one_out`: each call predicted by the rule fitted to the other calls, by
  the same search; at most :data:`MAX_HELD_OUT` calls, spread over a larger ledger) gives fewer tokens of error than
  the documented rule, no fewer exact calls, and more than one call predicted closer (one call's word does not
  change a rule); a new rule family must also beat the documented family refitted the same way.

When a check fails, :func:`sizes_to_send` names image sizes that would settle it: sizes whose regime no call has
shown yet, then other sizes until the calls are enough.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mmtok.budgets.pricing import formulas as F
from mmtok.errors import PriceError

T = TypeVar("T")
R = TypeVar("R")
ImageSpec = tuple[int, int, str | None]

CALLS_PER_PARAMETER = 3
MAX_HELD_OUT = 24  # calls left out one at a time; a larger ledger has that many chosen evenly
# Sizes to suggest: both sides of every shipped rule's breakpoints (Gemini's 384 px, OpenAI's 512-px tiles and patch
# budgets, Claude's 1,568 px and 1,568 patches, 2,048-px fits), square and not.
PROBE_SIZES: tuple[tuple[int, int], ...] = (
    (256, 256), (512, 512), (1024, 768), (1092, 1092), (1920, 1080), (800, 2400), (768, 768), (1024, 1024),
    (1536, 1024), (1568, 1568), (2000, 2000), (2048, 1536), (384, 384), (640, 480), (3000, 3000),
)  # fmt: skip
# The parameters each rule family's search moves (level rules: one per level seen; see :func:`parameters`).
SEARCHED = {
    "openai-tile": ("base_tokens", "tile_tokens"),
    "openai-patch": ("patch_budget", "multiplier"),
    "anthropic-patches": ("max_edge", "max_tokens"),
    "gemini-tiles": ("tokens_per_tile",),
    "fixed": ("tokens",),
    "tiles": ("tile_px", "fit_px", "base_tokens", "tile_tokens"),
}
LEVEL_RULES = ("fixed-level", "gemini-2.5")


def parameters(params: dict[str, Any], images: Iterable[ImageSpec], overhead_fitted: bool) -> tuple[str, ...]:
    """The parameters a fit of ``params``'s family moves: the family's own, or one per level the images were sent
    at, and ``overhead`` when the per-call overhead is fitted with the images."""
    formula = params["formula"]
    if formula in LEVEL_RULES:
        default = params.get("default_level", "high")
        levels = params.get("levels", {})
        found = tuple(sorted({f"levels.{d or default}" for _, _, d in images if (d or default) in levels}))
    else:
        found = SEARCHED.get(formula, ())
    return (*found, "overhead") if overhead_fitted and found else found


def regime(params: dict[str, Any], width: int, height: int, detail: str | None) -> str | None:
    """Which side of ``params``'s breakpoints an image falls on, in words; None for a rule without breakpoints (a
    flat count, a count per level)."""
    formula = params["formula"]
    if formula in ("fixed", "fixed-level"):
        return None
    if formula == "gemini-2.5":
        level = detail or params.get("default_level", "unspecified")
        return None if level in params.get("levels", {}) else _gemini_regime(width, height)
    if formula == "gemini-tiles":
        return _gemini_regime(width, height)
    if formula == "openai-tile":
        tiles = F.openai_tile(width, height, 0, 1, detail if detail in ("low", "high") else "high").tokens
        return f"{tiles} tile(s) of 512 px"
    if formula == "tiles":
        tiles = F.tiles(width, height, params["tile_px"], 1, 0, params["fit_px"]).tokens
        return f"{tiles} tile(s) of {params['tile_px']} px"
    return "resized" if _view(params, width, height, detail) != (width, height) else "as sent"


def _gemini_regime(width: int, height: int) -> str:
    if width <= 384 and height <= 384:
        return "at most 384 px"
    return f"{math.ceil(width / 768) * math.ceil(height / 768)} tile(s) of 768 px"


def _view(params: dict[str, Any], width: int, height: int, detail: str | None) -> tuple[int, int] | None:
    """The size a resizing rule counts an image at (None where it refuses the image)."""
    try:
        if params["formula"] == "anthropic-patches":
            return F.anthropic_resize(width, height, params["max_edge"], params["max_tokens"])
        if params["formula"] == "openai-patch":
            level = params["auto"] if detail in (None, "auto") else detail
            sizing = params["levels"].get(level) or params["levels"][params["auto"]]
            return F.openai_patch(width, height, 1.0, sizing.get("patch_budget"), sizing["max_dim"]).view
    except (PriceError, KeyError, ValueError, ZeroDivisionError):
        return None
    return (width, height)


def regimes(params: dict[str, Any], images: Iterable[ImageSpec]) -> set[str]:
    return {r for w, h, d in images if (r := regime(params, w, h, d)) is not None}


def spans(params: dict[str, Any], images: Sequence[ImageSpec]) -> bool:
    """The images fall on both sides of ``params``'s breakpoints (a rule without breakpoints always passes)."""
    if all(regime(params, w, h, d) is None for w, h, d in images):
        return True
    return len(regimes(params, images)) >= 2


# -------------------------------------------------------------------------------------------------- held out
@dataclass(frozen=True)
class HeldOut:
    """Leave-one-out: each call's error (billed minus predicted image tokens) under the rule fitted without it."""

    errors: tuple[int, ...]

    @property
    def exact(self) -> int:
        return sum(e == 0 for e in self.errors)

    @property
    def mean_abs_error(self) -> float:
        return sum(abs(e) for e in self.errors) / len(self.errors) if self.errors else 0.0

    def improved(self, other: HeldOut) -> int:
        """Calls predicted closer than ``other`` predicted them."""
        return sum(abs(a) < abs(b) for a, b in zip(self.errors, other.errors, strict=True))

    def beats(self, other: HeldOut) -> bool:
        """Less error than ``other`` on the same calls, no fewer of them exact, and more than one of them predicted
        closer: one call's word does not change a rule."""
        return self.mean_abs_error < other.mean_abs_error and self.exact >= other.exact and self.improved(other) > 1

    def to_dict(self) -> dict[str, Any]:
        return {"exact": self.exact, "calls": len(self.errors), "mean_abs_error": round(self.mean_abs_error, 3)}


def leave_one_out(
    items: Sequence[T], fit: Callable[[list[T]], R], error: Callable[[R, T], int], most: int = MAX_HELD_OUT
) -> HeldOut:
    """Fit on every call but one and measure the error on that one, for each call in turn (for at most ``most``
    calls, spread evenly over them: each fit is a full search)."""
    chosen = range(len(items)) if len(items) <= most else sorted({i * len(items) // most for i in range(most)})
    return HeldOut(tuple(error(fit([*items[:i], *items[i + 1 :]]), items[i]) for i in chosen))


# ---------------------------------------------------------------------------------------------------- verdict
@dataclass
class Verdict:
    """Whether a fitted rule may replace the documented one, and if not, why and what would settle it."""

    accepted: bool
    parameters: tuple[str, ...]
    calls_needed: int
    reasons: list[str] = field(default_factory=list)
    held_out: HeldOut | None = None  # the fitted rule's leave-one-out
    baseline: HeldOut | None = None  # what it had to beat: the documented rule (family), left out the same way

    def to_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "parameters": list(self.parameters),
            "calls_needed": self.calls_needed,
            "reasons": self.reasons,
            "held_out": None if self.held_out is None else self.held_out.to_dict(),
            "baseline_held_out": None if self.baseline is None else self.baseline.to_dict(),
        }


def preconditions(
    candidate: dict[str, Any], documented: dict[str, Any], images: Sequence[ImageSpec], calls: int, fitted: bool
) -> Verdict:
    """The checks that need no refitting: enough calls for the parameters, and sizes spanning both rules'
    breakpoints (a new family's and the documented rule's, whose regimes it claims to replace). ``fitted``: the
    overhead is fitted with the images. ``images``: every image of the calls."""
    names = parameters(candidate, images, fitted)
    needed = CALLS_PER_PARAMETER * len(names)
    verdict = Verdict(True, names, needed)
    if calls < needed:
        verdict.reasons.append(
            f"{calls} call(s) with images for {len(names)} parameter(s) ({', '.join(names)}): "
            f"{needed} needed ({CALLS_PER_PARAMETER} per parameter)"
        )
    new_family = candidate["formula"] != documented["formula"]
    for what, params in (("fitted", candidate), *((("documented", documented),) if new_family else ())):
        if not spans(params, images):
            seen = ", ".join(sorted(regimes(params, images))) or "none"
            verdict.reasons.append(f"every image falls on one side of the {what} rule's breakpoints ({seen})")
    verdict.accepted = not verdict.reasons
    return verdict


def held_out_check(verdict: Verdict, candidate: HeldOut, baselines: Sequence[tuple[str, HeldOut]]) -> Verdict:
    """``verdict`` with the leave-one-out comparison: the fitted rule must beat each baseline on the held-out
    calls."""
    verdict.held_out = candidate
    for name, baseline in baselines:
        verdict.baseline = baseline
        if not candidate.beats(baseline):
            verdict.reasons.append(
                f"on calls it did not see the fit is no better than the {name}: {candidate.exact}/"
                f"{len(candidate.errors)} exact, mean error {candidate.mean_abs_error:.1f} tokens against "
                f"{baseline.exact}/{len(baseline.errors)} and {baseline.mean_abs_error:.1f}, "
                f"{candidate.improved(baseline)} call(s) predicted closer"
            )
            break
    verdict.accepted = not verdict.reasons
    return verdict


def sizes_to_send(
    rules: Sequence[dict[str, Any]], images: Sequence[ImageSpec], calls: int, needed: int
) -> list[tuple[int, int]]:
    """Image sizes (one per call) that would settle a fit: first sizes that put images on the other side of a rule's
    breakpoints where every image so far fell on one side, then sizes showing a regime not seen yet, then any size
    not sent yet, until there are ``needed`` calls with images."""
    detail = images[0][2] if images else None
    seen = [regimes(rule, images) for rule in rules]
    sent = {(w, h) for w, h, _ in images}
    chosen: list[tuple[int, int]] = []

    def fresh(size: tuple[int, int], only_unspanned: bool) -> bool:
        for rule, found in zip(rules, seen, strict=True):
            r = regime(rule, *size, detail)
            if r is not None and r not in found and (len(found) < 2 or not only_unspanned):
                return True
        return False

    def take(size: tuple[int, int]) -> None:
        chosen.append(size)
        for rule, found in zip(rules, seen, strict=True):
            if (r := regime(rule, *size, detail)) is not None:
                found.add(r)

    for size in PROBE_SIZES:
        if fresh(size, only_unspanned=True):
            take(size)
    for pick in (lambda size: fresh(size, False), lambda size: True):
        for size in PROBE_SIZES:
            if calls + len(chosen) >= needed:
                return chosen
            if size not in chosen and size not in sent and pick(size):
                take(size)
    return chosen
