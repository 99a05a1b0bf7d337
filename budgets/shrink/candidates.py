"""Candidate renditions of an image for one model, at the breakpoints of that model's own token rule.

One function per formula family lists the sizes (and detail / ``media_resolution`` levels) at which the rule's
count changes: 512-px tiles after OpenAI's 768-px short side, 32-px patches under OpenAI's patch budgets, Claude's
28-px grid inside its edge and token limits, Gemini 2's 384-px flat size and 768-px tiles, Gemini 3's levels,
Mistral's and Qwen's patches, xAI's 448-px tiles. The parameters come from the model's rule in ``families.toml``
(``Model.formulas``); every candidate's tokens come from pricing itself (``image_token_count``), never from a copy
of the arithmetic.

Each family also says what the model sees: the size its rule resizes an image to before counting (the *view*).
Sending the view itself costs the same tokens and shows the model the same picture (``--lossless``), and quality is
measured there. Where a provider publishes no internal size (Gemini 3 and Gemini 2.5 levels, fixed-size models), the
view is an estimate: ``ESTIMATED_PX_PER_TOKEN`` px square per token, from Gemini 2's documented 258 tokens per
768-px tile, and it is never used to resize losslessly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from mmtok.budgets.pricing import Model, image_token_count

ESTIMATED_PX_PER_TOKEN = math.sqrt(768 * 768 / 258)  # ~47.8 px: Gemini 2's 768-px tile is 258 tokens
MIN_SIDE_PX = 16  # no candidate side below this
LADDER_STEP = 0.92  # successive candidates differ by at least 8% in tokens (the search measures only a few)


@dataclass(frozen=True)
class View:
    """What the model looks at: the size its rule resizes to, and whether that size is published or estimated."""

    width: int
    height: int
    published: bool  # False: an estimate (no internal size is published); never used for a lossless resize

    @property
    def size(self) -> tuple[int, int]:
        return self.width, self.height


@dataclass(frozen=True)
class Rendition:
    """A candidate: the image resized to ``width`` x ``height`` and sent with ``detail`` (None: the default)."""

    width: int
    height: int
    detail: str | None
    tokens: int
    working: str
    view: View  # what the model sees of this rendition

    @property
    def size(self) -> tuple[int, int]:
        return self.width, self.height


def _fit(width: int, height: int, box: float) -> tuple[int, int]:
    if width <= box and height <= box:
        return width, height
    scale = box / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def _estimated(width: int, height: int, tokens: int) -> View:
    """The largest size at the image's aspect whose area is ``tokens`` squares of ``ESTIMATED_PX_PER_TOKEN``."""
    scale = min(1.0, math.sqrt(tokens * ESTIMATED_PX_PER_TOKEN**2 / (width * height)))
    return View(max(1, round(width * scale)), max(1, round(height * scale)), False)


# ------------------------------------------------------------------------------------------------------ views
def level_view(width: int, height: int, params: dict, detail: str | None) -> View:
    """Gemini ``media_resolution`` levels: no internal size is published; estimated from the level's tokens."""
    levels = params["levels"]
    level = detail or params.get("default_level", "")
    if level in levels:
        return _estimated(width, height, levels[level])
    return View(width, height, True)  # Gemini 2.5 without a level: the 768-px tile rule, at the image's own size


def fixed_view(width: int, height: int, params: dict, detail: str | None) -> View:
    return _estimated(width, height, params.get("tokens", 256))


# Rules that publish no internal size: their view is estimated. Every other rule's view is the size its pricing
# formula counts at (``TokenCount.view``), so the geometry is written once, in budgets/formulas.py.
ESTIMATED_VIEWS: dict[str, Callable[[int, int, dict, str | None], View]] = {
    "gemini-2.5": level_view,
    "fixed-level": level_view,
    "fixed": fixed_view,
}


def image_rule(model: Model) -> dict:
    params = model.formulas.get("image")
    if params is None or not model.accepts("image"):
        from mmtok.errors import PriceError

        raise PriceError(f"{model.asked} does not take images")
    return params


def view(model: Model, width: int, height: int, detail: str | None) -> View:
    """What ``model`` looks at when sent a ``width`` x ``height`` image at ``detail``."""
    params = image_rule(model)
    estimate = ESTIMATED_VIEWS.get(params["formula"])
    if estimate is not None:
        return estimate(width, height, params, detail)
    counted = image_token_count(width, height, model.asked, detail, model.prices).view
    if counted is None:  # a rule whose internal size mmtok does not know (LLaVA-NeXT's anyres grid)
        return View(width, height, False)
    return View(*counted, True)


# ---------------------------------------------------------------------------------------------------- ladders
def _grid_sizes(width: int, height: int, unit: float) -> list[tuple[int, int]]:
    """Sizes at or below ``width`` x ``height`` (same aspect) where one side is a whole number of ``unit``-px cells:
    the points where a per-cell count steps down."""
    scales = {k * unit / width for k in range(1, math.ceil(width / unit))}
    scales |= {k * unit / height for k in range(1, math.ceil(height / unit))}
    sizes = {(width, height)}
    for s in scales:
        if s < 1:
            w, h = math.floor(width * s + 1e-9), math.floor(height * s + 1e-9)
            if min(w, h) >= MIN_SIDE_PX:
                sizes.add((w, h))
    return sorted(sizes, reverse=True)


Seen = Callable[[str | None], View]  # the model's view of the image at a detail level
Ladder = list[tuple[int, int, str | None]]


def openai_tile_ladder(width: int, height: int, params: dict, detail: str | None, seen: Seen) -> Ladder:
    """detail=high at each 512-px tile boundary below the 768-px view, and detail=low fitted to 512 px."""
    v = seen("high")
    return [(w, h, "high") for w, h in _grid_sizes(v.width, v.height, 512)] + [(*seen("low").size, "low")]


def openai_patch_ladder(width: int, height: int, params: dict, detail: str | None, seen: Seen) -> Ladder:
    """At every level the model offers, each 32-px patch boundary below that level's view."""
    out = []
    for level in params["levels"]:
        v = seen(level)
        out += [(w, h, level) for w, h in _grid_sizes(v.width, v.height, 32)]
    return out


def anthropic_ladder(width: int, height: int, params: dict, detail: str | None, seen: Seen) -> Ladder:
    """Each 28-px boundary below the size Claude resizes to (its edge and token limits)."""
    v = seen(detail)
    return [(w, h, detail) for w, h in _grid_sizes(v.width, v.height, 28)]


def gemini_tiles_ladder(width: int, height: int, params: dict, detail: str | None, seen: Seen) -> Ladder:
    """Each 768-px tile boundary, and the flat-rate size (both sides within 384 px)."""
    return [(w, h, detail) for w, h in _grid_sizes(width, height, 768)] + [(*_fit(width, height, 384), detail)]


def gemini_25_ladder(width: int, height: int, params: dict, detail: str | None, seen: Seen) -> Ladder:
    """The fixed levels (low, medium) at the image's size, and the tile rule's sizes without a level."""
    return [(width, height, level) for level in params["levels"]] + [
        (w, h, None) for w, h, _ in gemini_tiles_ladder(width, height, params, None, seen)
    ]


def fixed_level_ladder(width: int, height: int, params: dict, detail: str | None, seen: Seen) -> Ladder:
    """Gemini 3: the pixel size does not change the count; the ``media_resolution`` level is the knob."""
    return [(width, height, level) for level in params["levels"]]


def mistral_ladder(width: int, height: int, params: dict, detail: str | None, seen: Seen) -> Ladder:
    v = seen(detail)
    return [(w, h, detail) for w, h in _grid_sizes(v.width, v.height, params["patch_px"])]


def qwen_ladder(width: int, height: int, params: dict, detail: str | None, seen: Seen) -> Ladder:
    """Whole ``factor``-px cells (smart_resize rounds to them) below the resized size."""
    v = seen(detail)
    return [(w, h, detail) for w, h in _grid_sizes(v.width, v.height, params.get("factor", 28))]


def tiles_ladder(width: int, height: int, params: dict, detail: str | None, seen: Seen) -> Ladder:
    v = seen(detail)
    return [(w, h, detail) for w, h in _grid_sizes(v.width, v.height, params["tile_px"])]


def patch_grid_ladder(width: int, height: int, params: dict, detail: str | None, seen: Seen) -> Ladder:
    return [(w, h, detail) for w, h in _grid_sizes(width, height, params["patch_px"])]


def fixed_ladder(width: int, height: int, params: dict, detail: str | None, seen: Seen) -> Ladder:
    """One count at any size: no cheaper rendition exists."""
    return [(width, height, detail)]


LADDERS: dict[str, Callable[[int, int, dict, str | None, Seen], Ladder]] = {
    "openai-tile": openai_tile_ladder,
    "openai-patch": openai_patch_ladder,
    "anthropic-patches": anthropic_ladder,
    "gemini-tiles": gemini_tiles_ladder,
    "gemini-2.5": gemini_25_ladder,
    "fixed-level": fixed_level_ladder,
    "mistral-patches": mistral_ladder,
    "qwen2-vl": qwen_ladder,
    "tiles": tiles_ladder,
    "patch-grid": patch_grid_ladder,
    "fixed": fixed_ladder,
}


def candidates(model: Model, width: int, height: int, detail: str | None, prices: tuple = ()) -> list[Rendition]:
    """Renditions of a ``width`` x ``height`` image cheaper than sending it as it is (at ``detail``), cheapest
    first, one per token count (the largest size with that count) and thinned so successive counts differ by at
    least 8%; each priced by ``image_token_count``."""
    params = image_rule(model)
    ladder = LADDERS.get(params["formula"], fixed_ladder)
    original = image_token_count(width, height, model.asked, detail, prices).tokens
    best: dict[int, Rendition] = {}
    for w, h, level in ladder(width, height, params, detail, lambda d: view(model, width, height, d)):
        count = image_token_count(w, h, model.asked, level, prices)
        if count.tokens >= original:
            continue
        seen = best.get(count.tokens)
        if seen is None or w * h > seen.width * seen.height:
            best[count.tokens] = Rendition(w, h, level, count.tokens, count.working, view(model, w, h, level))
    thinned: list[Rendition] = []
    for rendition in sorted(best.values(), key=lambda r: -r.tokens):
        if not thinned or rendition.tokens <= thinned[-1].tokens * LADDER_STEP:
            thinned.append(rendition)
    cheapest = min(best.values(), key=lambda r: r.tokens, default=None)
    if cheapest is not None and cheapest not in thinned:
        thinned.append(cheapest)
    return sorted(thinned, key=lambda r: r.tokens)


def lossless(model: Model, width: int, height: int, detail: str | None, prices: tuple = ()) -> Rendition | None:
    """The model's own view of the image, when it is published, smaller than the image, and priced at exactly the
    image's tokens: the same picture and the same count in fewer pixels. None otherwise."""
    v = view(model, width, height, detail)
    if not v.published or v.width * v.height >= width * height:
        return None
    original = image_token_count(width, height, model.asked, detail, prices)
    count = image_token_count(v.width, v.height, model.asked, detail, prices)
    if count.tokens != original.tokens:
        return None
    return Rendition(v.width, v.height, detail, count.tokens, count.working, view(model, v.width, v.height, detail))


# ----------------------------------------------------------------------------------------------- tall and wide
@dataclass(frozen=True)
class TextScale:
    """How ``model`` shows an image's text: the view it resizes the image to, and the factor text is scaled by."""

    view: View
    scale: float  # the view's width over the image's (at most 1)

    def text_px(self, px: float) -> float:
        """How tall text of ``px`` pixels in the image is in the model's view."""
        return px * self.scale


def text_scale(model: Model, width: int, height: int, detail: str | None = None) -> TextScale:
    """The model's view of a ``width`` x ``height`` image and the scale its text is shown at: a 1280x8000 page on
    gpt-4o is seen at 328x2048, so 18-px text is ~4.6 px. Pure geometry from pricing's rules (no pixels read, no
    torch): pricing can warn with it before anything is sent."""
    seen = view(model, width, height, detail)
    return TextScale(seen, min(1.0, seen.width / width))


def largest_unscaled(model: Model, across: int, most: int, detail: str | None = None, tall: bool = True) -> int:
    """The longest piece (up to ``most`` px) ``across`` px wide (``tall``; else ``across`` px high) that ``model``
    sees without downscaling it, by its own rule (the size at which it stops downscaling); 0 when even a 1-px piece
    that wide is downscaled."""

    def unscaled(length: int) -> bool:
        size = (across, length) if tall else (length, across)
        return view(model, *size, detail).size == size

    if not unscaled(1):
        return 0
    low, high = 1, most  # unscaled(low) holds; find the largest such length
    while low < high:
        mid = (low + high + 1) // 2
        if unscaled(mid):
            low = mid
        else:
            high = mid - 1
    return low
