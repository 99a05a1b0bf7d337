"""Token formulas of provider and open models, each from its published rule (sources in ``families.toml``).

Every function returns a :class:`TokenCount`: the integer count, the working in words (what was resized to what,
how many tiles or patches), and a label saying how far the number can be trusted:

- ``exact``: the provider's published rule, which reproduces every worked example it publishes;
- ``documented``: the published rule, where counts measured elsewhere disagree (both are cited in ``families.toml``);
- ``upper bound``: the provider publishes a maximum (Gemini 3 ``media_resolution`` budgets, OpenAI ``auto``);
- ``estimate``: no exact rule is published;
- ``lower bound``: the count leaves out something the provider bills (the OCR text Gemini 2.5 reads from a scanned
  PDF page), so the bill is at least this.

No torch, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mmtok.errors import PriceError

LABELS = ("exact", "documented", "upper bound", "estimate", "lower bound")  # best to worst


@dataclass(frozen=True, slots=True)
class TokenCount:
    tokens: int
    working: str  # how the count was obtained, for people
    label: str = "exact"  # one of LABELS
    view: tuple[int, int] | None = None  # images: the size the rule counts at (after its resize), where published

    @property
    def exact(self) -> bool:
        return self.label == "exact"

    def but(self, working: str | None = None, label: str | None = None) -> TokenCount:
        """This count with another working or label (``dataclasses.replace``'s result, at a fifth of its cost: it
        runs for most quotes)."""
        return TokenCount(
            self.tokens, self.working if working is None else working, self.label if label is None else label, self.view
        )


def weakest(labels: list[str] | tuple[str, ...]) -> str:
    """The least certain of ``labels`` (a total built from an estimate is an estimate)."""
    return max(labels, key=LABELS.index, default="exact")


def _check_size(width: int, height: int) -> None:
    if width <= 0 or height <= 0:
        raise PriceError(f"image size must be positive, got {width}x{height}")


def _fit(width: int, height: int, box: int) -> tuple[int, int]:
    """Scale down (never up) so both sides fit in ``box`` px, keeping the aspect ratio."""
    if width <= box and height <= box:
        return width, height
    scale = box / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


# ------------------------------------------------------------------------------------------------------ OpenAI
def openai_tile(
    width: int, height: int, base_tokens: int, tile_tokens: int, detail: str = "auto", short_side: int = 768
) -> TokenCount:
    """GPT-4o / GPT-4.1 / GPT-5 / GPT-5.1 / o1 / o3 tile rule (developers.openai.com images-vision guide).

    low: ``base_tokens``. high: fit in 2048 x 2048 (never enlarged), scale the shortest side down to ``short_side``
    (768; 512 for GPT Image input images) rounding the other side down, count 512-px tiles, ``base + tile x tiles``.
    ``auto`` lets OpenAI choose per image: billed here as high, so the count is an upper bound.
    """
    _check_size(width, height)
    if detail == "low":  # "a low-res 512px x 512px version of the image"
        return TokenCount(base_tokens, f"detail=low: {base_tokens} base tokens", view=_fit(width, height, 512))
    if detail not in ("high", "auto"):
        raise PriceError(f"detail must be low, high or auto for this model, got {detail!r}")
    w1, h1 = _fit(width, height, 2048)
    w2, h2 = w1, h1
    if min(w1, h1) > short_side:
        scale = short_side / min(w1, h1)
        w2, h2 = (short_side, math.floor(h1 * scale)) if w1 <= h1 else (math.floor(w1 * scale), short_side)
    tiles_w, tiles_h = math.ceil(w2 / 512), math.ceil(h2 / 512)
    tiles = tiles_w * tiles_h
    tokens = base_tokens + tile_tokens * tiles
    steps = [f"{width}x{height}"]
    if (w1, h1) != (width, height):
        steps.append(f"fit 2048: {w1}x{h1}")
    if (w2, h2) != (w1, h1):
        steps.append(f"short side {short_side}: {w2}x{h2}")
    note = " (detail=auto billed as high)" if detail == "auto" else ""
    working = (
        f"{' -> '.join(steps)} -> {tiles_w}x{tiles_h} tiles of 512 px -> "
        f"{base_tokens} + {tile_tokens} x {tiles} = {tokens}{note}"
    )
    return TokenCount(tokens, working, "upper bound" if detail == "auto" else "exact", (w2, h2))


OPENAI_MAX_PATCHES = 30_000  # "If this count exceeds 30,000 patches, the API rejects the request."


def openai_patch(
    width: int,
    height: int,
    multiplier: float,
    patch_budget: int | None = 1536,
    max_dim: int = 2048,
    patch_px: int = 32,
) -> TokenCount:
    """OpenAI's 32-px patch rule (gpt-4.1-mini/nano, o4-mini, gpt-5-mini/nano, gpt-5.2 and later).

    Fit in ``max_dim`` (never enlarged); if the patches exceed ``patch_budget``, shrink by
    ``s = sqrt(32^2 x budget / (w x h))``, then by ``min(floor(w s / 32) / (w s / 32), floor(h s / 32) / (h s / 32))``
    so a side is a whole number of patches, rounding the final size down; more than 30,000 patches is refused, as
    the API does; ``ceil(patches x multiplier)`` tokens.
    """
    _check_size(width, height)
    w, h = _fit(width, height, max_dim)
    steps = [f"{width}x{height}"] + ([f"fit {max_dim}: {w}x{h}"] if (w, h) != (width, height) else [])
    patches = math.ceil(w / patch_px) * math.ceil(h / patch_px)
    if patch_budget is not None and patches > patch_budget:
        shrink = math.sqrt(patch_px**2 * patch_budget / (w * h))
        w_patches, h_patches = w * shrink / patch_px, h * shrink / patch_px
        shrink *= min(math.floor(w_patches) / w_patches, math.floor(h_patches) / h_patches)
        w, h = max(1, math.floor(w * shrink)), max(1, math.floor(h * shrink))
        steps.append(f"{patches} patches > {patch_budget}: scaled to {w}x{h}")
        patches = math.ceil(w / patch_px) * math.ceil(h / patch_px)
    if patches > OPENAI_MAX_PATCHES:
        raise PriceError(f"{width}x{height} needs {patches:,} patches; OpenAI rejects images over 30,000 patches")
    tokens = math.ceil(patches * multiplier - 1e-9)
    grid = f"{math.ceil(w / patch_px)}x{math.ceil(h / patch_px)} = {patches} patches"
    return TokenCount(tokens, f"{' -> '.join(steps)} -> {grid} x {multiplier} = {tokens}", view=(w, h))


# --------------------------------------------------------------------------------------------------- Anthropic
def anthropic_resize(width: int, height: int, max_edge: int, max_tokens: int, patch_px: int = 28) -> tuple[int, int]:
    """The largest aspect-preserving size within both of a Claude model's limits: every side, padded up to a
    multiple of 28, at most ``max_edge``, and at most ``max_tokens`` 28-px patches. Anthropic's reference
    implementation: a binary search over the long edge, the short edge rounded half to even."""

    def fits(w: int, h: int) -> bool:
        cols, rows = math.ceil(w / patch_px), math.ceil(h / patch_px)
        return cols * patch_px <= max_edge and rows * patch_px <= max_edge and cols * rows <= max_tokens

    if fits(width, height):
        return width, height
    if height > width:
        h, w = anthropic_resize(height, width, max_edge, max_tokens, patch_px)
        return w, h
    aspect = width / height
    low, high = 1, width - 1  # the largest long edge L in [1, width) that fits
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid, max(round(mid / aspect), 1)):
            low = mid
        else:
            high = mid - 1
    return low, max(round(low / aspect), 1)


def anthropic_patches(width: int, height: int, max_edge: int = 1568, max_tokens: int = 1568) -> TokenCount:
    """Claude: ``ceil(w / 28) x ceil(h / 28)`` visual tokens after the model's resize (standard models: 1568 px and
    1568 tokens; Opus 4.7 and later: 2576 px and 4784 tokens). Padding to a multiple of 28 adds no token."""
    _check_size(width, height)
    w, h = anthropic_resize(width, height, max_edge, max_tokens)
    cols, rows = math.ceil(w / 28), math.ceil(h / 28)
    resized = f" -> fit {max_edge} px / {max_tokens} tokens: {w}x{h}" if (w, h) != (width, height) else ""
    working = f"{width}x{height}{resized} -> {cols}x{rows} patches of 28 px = {cols * rows}"
    return TokenCount(cols * rows, working, view=(w, h))


# ------------------------------------------------------------------------------------------------------ Google
GEMINI_MAX_PX = 3072  # "larger images are scaled down and padded to fit a maximum resolution of 3072 x 3072"


def gemini_tiles(width: int, height: int, tokens_per_tile: int = 258, small_px: int = 384) -> TokenCount:
    """Gemini 2.0 and earlier (ai.google.dev tokens guide): 258 tokens when both sides are at most 384 px; larger
    images are "tiled into 768x768 pixel tiles, each counting as 258 tokens", after being "scaled down and padded to
    fit a maximum resolution of 3072 x 3072" (firebase.google.com/docs/vertex-ai/input-file-requirements, read
    2026-12-05): at most 16 tiles. Vertex AI's wording (tiles of min(w, h) / 1.5, clamped to 256-768 px) gives more
    tiles for some sizes, and one 1980x1380 image was billed ~1,950 tokens on 2.0 Flash where countTokens said 258
    (discuss.ai.google.dev/t/70143), so the count is labelled documented."""
    _check_size(width, height)
    if width <= small_px and height <= small_px:
        working = f"{width}x{height} <= {small_px} px: {tokens_per_tile}"
        return TokenCount(tokens_per_tile, working, "documented", (width, height))
    w, h = _fit(width, height, GEMINI_MAX_PX)
    fitted = f" -> fit {GEMINI_MAX_PX}: {w}x{h}" if (w, h) != (width, height) else ""
    tiles_w, tiles_h = math.ceil(w / 768), math.ceil(h / 768)
    tokens = tiles_w * tiles_h * tokens_per_tile
    working = f"{width}x{height}{fitted} -> {tiles_w}x{tiles_h} tiles of 768 px x {tokens_per_tile} = {tokens}"
    return TokenCount(tokens, working, "documented", (w, h))


GEMINI_25_READ = "2026-12-05"


def gemini_25_default(width: int, height: int, level: str, billed: int = 258, bound: int = 2304) -> TokenCount:
    """Gemini 2.5 at the default (and ``high``) ``media_resolution``, where the pages and the bills disagree.

    ai.google.dev's media-resolution page (read 2026-12-05) gives images "256 + Pan & Scan" at these levels, with pan
    & scan "~2,048" at most: at most ``bound`` = 256 + 2,048 = 2,304 tokens. Its tokens page's 768-px tile
    rule gives 258 per tile (24 tiles, 6,192 tokens, for a 4000x3000 photo), and Vertex AI's reference calls ``high``
    "zoomed reframing with 256 tokens". Bills show 258 an image at every size tried (docs/proxy.md, the calibration
    run): the count is the bills' 258, labelled an estimate, with the page's bound in the working, never a count
    many times above every known bill."""
    _check_size(width, height)
    tiles = math.ceil(width / 768) * math.ceil(height / 768) * billed
    working = (
        f"media_resolution={level}: {billed} an image, as bills show at every size (the page's bound: 256 + pan & "
        f"scan up to ~2,048 = {bound:,}; the tokens page's 768-px tiles would give "
        f"{tiles:,}, which no bill shows; ai.google.dev/gemini-api/docs/media-resolution, read {GEMINI_25_READ})"
    )
    return TokenCount(billed, working, "estimate", (width, height))


def fixed_level(level: str, table: dict[str, int], label: str, what: str = "media_resolution") -> TokenCount:
    """A fixed token budget per image (or frame) at each level (Gemini ``media_resolution``)."""
    if level not in table:
        raise PriceError(f"{what} must be one of {', '.join(table)} for this model, got {level!r}")
    return TokenCount(table[level], f"{what}={level}: {table[level]} tokens", label)


# ------------------------------------------------------------------------------------------------------ Mistral
def mistral_patches(width: int, height: int, patch_px: int, max_px: int) -> TokenCount:
    """mistral-common's ``ImageEncoder``: fit in ``max_px`` (rounded), ``ceil(side / patch)`` patches per side, one
    [IMG] token per patch plus one [IMG_BREAK]/[IMG_END] per row. Mistral's docs give only ``(X x Y) / patch^2``
    approximately and do not say whether the row tokens are billed: an estimate of the API's count."""
    _check_size(width, height)
    ratio = max(width / max_px, height / max_px)
    w, h = (round(width / ratio), round(height / ratio)) if ratio > 1 else (width, height)
    cols, rows = (w - 1) // patch_px + 1, (h - 1) // patch_px + 1
    tokens = cols * rows + rows
    resized = f" -> fit {max_px}: {w}x{h}" if (w, h) != (width, height) else ""
    return TokenCount(
        tokens,
        f"{width}x{height}{resized} -> {cols}x{rows} patches of {patch_px} px + {rows} row tokens = {tokens}",
        "estimate",
        (w, h),
    )


# ---------------------------------------------------------------------------------------------------- generic
def tiles(width: int, height: int, tile_px: int, tile_tokens: int, base_tokens: int, fit_px: int) -> TokenCount:
    """A labelled estimate for providers that publish no rule: fit in ``fit_px``, ``base + tile x tiles`` of
    ``tile_px``. Calibrate the parameters against your own bills in a price sheet."""
    _check_size(width, height)
    w, h = _fit(width, height, fit_px)
    tw, th = math.ceil(w / tile_px), math.ceil(h / tile_px)
    tokens = base_tokens + tile_tokens * tw * th
    resized = f" -> fit {fit_px}: {w}x{h}" if (w, h) != (width, height) else ""
    return TokenCount(
        tokens,
        f"{width}x{height}{resized} -> {tw}x{th} tiles of {tile_px} px -> {base_tokens} + {tile_tokens} x {tw * th} "
        f"= {tokens} (no published rule)",
        "estimate",
        (w, h),
    )


# ------------------------------------------------------------------------------------------------ open models
def qwen2_vl_smart_resize(
    width: int, height: int, factor: int = 28, min_pixels: int = 56 * 56, max_pixels: int = 14 * 14 * 4 * 16384
) -> tuple[int, int]:
    """Qwen2-VL / Qwen2.5-VL ``smart_resize``: sides to multiples of 28 with the pixel count in range."""
    _check_size(width, height)
    if max(width, height) / min(width, height) > 200:
        raise PriceError(f"{width}x{height}: Qwen2-VL rejects aspect ratios above 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return w_bar, h_bar


def qwen2_vl_image(
    width: int, height: int, min_pixels: int = 56 * 56, max_pixels: int = 14 * 14 * 4 * 16384, factor: int = 28
) -> TokenCount:
    """One token per ``factor`` px square after ``smart_resize``: 28 for Qwen2/2.5-VL (14-px patches merged 2 x 2),
    32 for Qwen3-VL (16-px patches merged 2 x 2)."""
    w, h = qwen2_vl_smart_resize(width, height, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
    tokens = (w // factor) * (h // factor)
    working = f"{width}x{height} -> smart_resize {w}x{h} -> {w // factor}x{h // factor} = {tokens}"
    return TokenCount(tokens, working, view=(w, h))


def qwen2_vl_video(
    duration_s: float,
    frame_count: int,
    width: int,
    height: int,
    fps: float = 2.0,
    min_frames: int = 4,
    max_frames: int = 768,
    min_pixels: int = 128 * 28 * 28,
    max_pixels: int = 768 * 28 * 28,
    total_pixels: int = int(128000 * 28 * 28 * 0.9),
) -> TokenCount:
    """qwen_vl_utils (Qwen2.5-VL) defaults: ``duration x 2 fps`` frames, clamped to [4, min(768, frames in the
    file)] and floored to an even count; each frame resized with the pixel budget
    ``max(min(768 x 28^2, total_pixels / frames x 2), 1.05 x 128 x 28^2)``; two frames per temporal patch, so
    ``frames / 2 x (h / 28) x (w / 28)`` tokens."""
    if duration_s <= 0 or frame_count <= 0:
        raise PriceError(f"video needs a positive duration and frame count, got {duration_s} s, {frame_count}")
    cap = min(max_frames, frame_count)
    frames = min(min(max(duration_s * fps, min_frames), cap), frame_count)
    frames = max(2, int(frames // 2) * 2)
    frame_budget = max(min(max_pixels, total_pixels / frames * 2), int(min_pixels * 1.05))
    w, h = qwen2_vl_smart_resize(width, height, min_pixels=min_pixels, max_pixels=int(frame_budget))
    tokens = frames // 2 * (w // 28) * (h // 28)
    return TokenCount(
        tokens,
        f"{duration_s:.2f} s at {fps:g} fps -> {frames} frames; {width}x{height} -> "
        f"{w}x{h}; {frames // 2} x {w // 28} x {h // 28} = {tokens}",
    )


LLAVA_NEXT_PINPOINTS = ((336, 672), (672, 336), (672, 672), (1008, 336), (336, 1008))  # (height, width)


def llava_next(
    width: int,
    height: int,
    pinpoints: tuple[tuple[int, int], ...] = LLAVA_NEXT_PINPOINTS,
    crop_px: int = 336,
    patch_px: int = 14,
) -> TokenCount:
    """LLaVA-NeXT (1.6) anyres, as in HF transformers' ``LlavaNextProcessor``: base 24 x 24 grid + the best-fit
    grid's patches with padding removed + one newline token per row."""
    _check_size(width, height)
    best, best_effective, best_waste = pinpoints[0], 0, math.inf
    for pin_h, pin_w in pinpoints:
        scale = min(pin_w / width, pin_h / height)
        effective = min(int(width * scale) * int(height * scale), width * height)
        waste = pin_w * pin_h - effective
        if effective > best_effective or (effective == best_effective and waste < best_waste):
            best, best_effective, best_waste = (pin_h, pin_w), effective, waste
    side = crop_px // patch_px
    cur_h, cur_w = side * (best[0] // crop_px), side * (best[1] // crop_px)
    if width / height > cur_w / cur_h:
        new_h = int(round(height * (cur_w / width), 7))
        cur_h -= 2 * ((cur_h - new_h) // 2)
    else:
        new_w = int(round(width * (cur_h / height), 7))
        cur_w -= 2 * ((cur_w - new_w) // 2)
    tokens = side * side + cur_h * cur_w + cur_h
    return TokenCount(
        tokens,
        f"{width}x{height} -> grid {best[1]}x{best[0]} px -> base {side * side} + "
        f"{cur_h}x{cur_w} unpadded + {cur_h} newlines = {tokens}",
    )


def fixed(tokens: int, what: str, label: str = "exact") -> TokenCount:
    return TokenCount(tokens, f"{what}: {tokens}", label)


def per_second(duration_s: float, tokens_per_second: float, what: str, label: str = "exact") -> TokenCount:
    """``ceil(duration x rate)`` tokens for time-based media."""
    if duration_s < 0:
        raise PriceError(f"duration must not be negative, got {duration_s}")
    tokens = math.ceil(duration_s * tokens_per_second - 1e-9)
    return TokenCount(tokens, f"{what}: ceil({duration_s:.3f} s x {tokens_per_second:g}/s) = {tokens}", label)


def patch_grid(width: int, height: int, patch_px: int) -> TokenCount:
    """One token per ``patch_px`` square covering the image (mmtok's semantic-granularity scheme)."""
    _check_size(width, height)
    tw, th = math.ceil(width / patch_px), math.ceil(height / patch_px)
    return TokenCount(
        tw * th, f"{width}x{height} -> {tw}x{th} patches of {patch_px} px = {tw * th}", view=(width, height)
    )
