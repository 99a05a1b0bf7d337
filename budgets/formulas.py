"""Token formulas of provider and open models, each from its published rule (sources in ``families.toml``).

Every function returns a :class:`TokenCount`: the integer count, the working in words (what was resized to what,
how many tiles or patches), and whether the rule is exact or a documented estimate. No torch, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mmtok.errors import PriceError


@dataclass(frozen=True, slots=True)
class TokenCount:
    tokens: int
    working: str  # how the count was obtained, for people
    exact: bool = True  # False: a documented estimate (the provider publishes no exact rule)


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
def openai_tile(width: int, height: int, base_tokens: int, tile_tokens: int, detail: str = "high") -> TokenCount:
    """GPT-4o / GPT-4.1 / GPT-5 / o1 / o3 tile rule.

    low: ``base_tokens``. high: fit in 2048 x 2048, scale the shortest side down to 768, count 512-px tiles,
    ``base + tile x tiles``. "auto" is billed here as high, the upper bound (OpenAI picks per image).
    """
    _check_size(width, height)
    if detail == "low":
        return TokenCount(base_tokens, f"detail=low: {base_tokens} base tokens")
    if detail not in ("high", "auto"):
        raise PriceError(f"detail must be low, high or auto, got {detail!r}")
    w1, h1 = _fit(width, height, 2048)
    w2, h2 = w1, h1
    if min(w1, h1) > 768:
        scale = 768 / min(w1, h1)
        w2, h2 = round(w1 * scale), round(h1 * scale)
    tiles_w, tiles_h = math.ceil(w2 / 512), math.ceil(h2 / 512)
    tiles = tiles_w * tiles_h
    tokens = base_tokens + tile_tokens * tiles
    steps = [f"{width}x{height}"]
    if (w1, h1) != (width, height):
        steps.append(f"fit 2048: {w1}x{h1}")
    if (w2, h2) != (w1, h1):
        steps.append(f"short side 768: {w2}x{h2}")
    note = " (auto billed as high)" if detail == "auto" else ""
    working = (
        f"{' -> '.join(steps)} -> {tiles_w}x{tiles_h} tiles of 512 px -> "
        f"{base_tokens} + {tile_tokens} x {tiles} = {tokens}{note}"
    )
    return TokenCount(tokens, working)


def openai_patch(width: int, height: int, multiplier: float, patch_px: int = 32, max_patches: int = 1536) -> TokenCount:
    """GPT-4.1-mini/nano, GPT-5-mini/nano, o4-mini patch rule: 32-px patches, at most 1536, x model multiplier.

    Above the cap the image is shrunk by ``sqrt(cap x 32^2 / (w x h))`` and then so that the width (or height)
    is a whole number of patches, as OpenAI's worked example does (1800 x 2400 -> 1056 x 1408 -> 1452 patches).
    The product with the multiplier is rounded up.
    """
    _check_size(width, height)
    raw = math.ceil(width / patch_px) * math.ceil(height / patch_px)
    if raw <= max_patches:
        patches = raw
        working = f"{width}x{height} -> {math.ceil(width / patch_px)}x{math.ceil(height / patch_px)} patches = {raw}"
    else:
        shrink = math.sqrt(patch_px**2 * max_patches / (width * height))
        w_patches, h_patches = width * shrink / patch_px, height * shrink / patch_px
        shrink *= min(math.floor(w_patches) / w_patches, math.floor(h_patches) / h_patches)
        new_w, new_h = int(width * shrink), int(height * shrink)
        patches = min(max_patches, math.ceil(new_w / patch_px) * math.ceil(new_h / patch_px))
        working = (
            f"{width}x{height} needs {raw} patches > {max_patches}: scaled to {new_w}x{new_h} -> "
            f"{math.ceil(new_w / patch_px)}x{math.ceil(new_h / patch_px)} = {patches} patches"
        )
    tokens = math.ceil(patches * multiplier - 1e-9)
    return TokenCount(tokens, f"{working} x {multiplier} = {tokens}")


# --------------------------------------------------------------------------------------------------- Anthropic
def anthropic_area(
    width: int, height: int, max_long_edge: int = 1568, max_tokens: int = 1600, pixels_per_token: int = 750
) -> TokenCount:
    """Claude: ``tokens = ceil(w x h / 750)`` after downscaling to a long edge of 1568 px and ~1,600 tokens.

    Anthropic states the cap as "~1,600 tokens" and its size table as approximate, so counts near the cap are an
    estimate; below it the published rule is exact (200x200 -> 54, 1000x1000 -> 1334, 1092x1092 -> 1590).
    """
    _check_size(width, height)
    scale = min(1.0, max_long_edge / max(width, height), math.sqrt(max_tokens * pixels_per_token / (width * height)))
    w, h = (width, height) if scale >= 1.0 else (max(1, int(width * scale)), max(1, int(height * scale)))
    tokens = math.ceil(w * h / pixels_per_token)
    resized = f" -> scaled to {w}x{h}" if (w, h) != (width, height) else ""
    return TokenCount(
        tokens, f"{width}x{height}{resized} -> ceil({w} x {h} / {pixels_per_token}) = {tokens}", exact=scale >= 1.0
    )


# ------------------------------------------------------------------------------------------------------ Google
def gemini_tiles(width: int, height: int, tokens_per_tile: int = 258, small_px: int = 384) -> TokenCount:
    """Gemini 2.x: 258 tokens when both sides <= 384 px; else tiles of side min(w, h) / 1.5 clamped to
    [256, 768] px, ``ceil(w / tile) x ceil(h / tile)`` tiles of 258 tokens each."""
    _check_size(width, height)
    if width <= small_px and height <= small_px:
        return TokenCount(tokens_per_tile, f"{width}x{height} <= {small_px} px: {tokens_per_tile}")
    tile = max(256.0, min(768.0, min(width, height) / 1.5))
    tiles_w, tiles_h = math.ceil(width / tile), math.ceil(height / tile)
    tokens = tiles_w * tiles_h * tokens_per_tile
    return TokenCount(
        tokens, f"{width}x{height} -> tile {tile:.0f} px -> {tiles_w}x{tiles_h} tiles x {tokens_per_tile} = {tokens}"
    )


GEMINI3_IMAGE_TOKENS = {"low": 280, "medium": 560, "high": 1120, "ultra_high": 2240}
GEMINI3_FRAME_TOKENS = {"low": 70, "medium": 70, "high": 280, "ultra_high": 280}


def gemini_media_resolution(level: str, table: dict[str, int] = GEMINI3_IMAGE_TOKENS) -> TokenCount:
    """Gemini 3 ``media_resolution``: a fixed token budget per image (or video frame) at each level."""
    if level not in table:
        raise PriceError(f"media_resolution must be one of {', '.join(table)}, got {level!r}")
    return TokenCount(table[level], f"media_resolution={level}: {table[level]} tokens")


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
    width: int, height: int, min_pixels: int = 56 * 56, max_pixels: int = 14 * 14 * 4 * 16384
) -> TokenCount:
    """One token per 28 x 28 px after ``smart_resize`` (14-px patches merged 2 x 2)."""
    w, h = qwen2_vl_smart_resize(width, height, min_pixels=min_pixels, max_pixels=max_pixels)
    tokens = (w // 28) * (h // 28)
    return TokenCount(tokens, f"{width}x{height} -> smart_resize {w}x{h} -> {w // 28}x{h // 28} = {tokens}")


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


def fixed(tokens: int, what: str) -> TokenCount:
    return TokenCount(tokens, f"{what}: {tokens}")


def per_second(duration_s: float, tokens_per_second: float, what: str, exact: bool = True) -> TokenCount:
    """``ceil(duration x rate)`` tokens for time-based media."""
    if duration_s < 0:
        raise PriceError(f"duration must not be negative, got {duration_s}")
    tokens = math.ceil(duration_s * tokens_per_second - 1e-9)
    return TokenCount(tokens, f"{what}: ceil({duration_s:.3f} s x {tokens_per_second:g}/s) = {tokens}", exact)


def patch_grid(width: int, height: int, patch_px: int) -> TokenCount:
    """One token per ``patch_px`` square covering the image (mmtok's semantic-granularity scheme)."""
    _check_size(width, height)
    tw, th = math.ceil(width / patch_px), math.ceil(height / patch_px)
    return TokenCount(tw * th, f"{width}x{height} -> {tw}x{th} patches of {patch_px} px = {tw * th}")
