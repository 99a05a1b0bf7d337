"""Tokens of each part of a request by the model's rules: images, audio, video, text, token sequences."""

from __future__ import annotations

import math
import sys
from typing import Any, NamedTuple

from mmtok.budgets.pricing import formulas as F
from mmtok.budgets.pricing.models import Model, PriceSheets, closest_names, resolve
from mmtok.budgets.pricing.options import DETAIL_LEVELS
from mmtok.errors import PriceError
from mmtok.media import Audio, Image, Text, Video


# ------------------------------------------------------------------------------------------------------ tokens
def _relabel(count: F.TokenCount, floor: str) -> F.TokenCount:
    label = F.weakest([count.label, floor])
    return count if label == count.label else count.but(label=label)


def _image_count(model: Model, width: int, height: int, detail: str | None) -> F.TokenCount:
    params = model.formulas.get("image")
    if params is None and model.family is None and model.entry is None and model.row is None:
        # a name nothing here knows (no catalog entry, sheet row or family rule): most likely a typo
        closest = closest_names(model.name, model.prices)
        raise PriceError(f"unknown model {model.asked!r} (no catalog entry, sheet row or token rule){closest}")
    if params is None or not model.accepts("image"):
        raise PriceError(f"{model.asked} does not take images")
    formula, floor = params["formula"], params.get("label", "exact")
    if formula == "openai-tile":
        count = F.openai_tile(
            width, height, params["base_tokens"], params["tile_tokens"], detail or "auto", params.get("short_side", 768)
        )
    elif formula == "openai-patch":
        count = _openai_patch(model, params, width, height, detail)
    elif formula == "anthropic-patches":
        count = F.anthropic_patches(width, height, params["max_edge"], params["max_tokens"])
    elif formula == "gemini-tiles":
        count = F.gemini_tiles(width, height, params.get("tokens_per_tile", 258))
    elif formula == "gemini-2.5":
        level = detail or params.get("default_level", "unspecified")
        if level in params["levels"]:
            F._check_size(width, height)
            count = F.fixed_level(level, params["levels"], "documented")
        elif level in ("unspecified", "high", "auto"):
            count = F.gemini_25_default(width, height, level, params.get("tokens", 258), params.get("max_tokens", 2304))
        else:
            raise PriceError(f"media_resolution must be low, medium or high on {model.asked}, got {level!r}")
    elif formula == "fixed-level":
        F._check_size(width, height)
        count = F.fixed_level(detail or params["default_level"], params["levels"], "exact")
    elif formula == "mistral-patches":
        count = F.mistral_patches(width, height, params["patch_px"], params["max_px"])
    elif formula == "tiles":
        count = F.tiles(
            width, height, params["tile_px"], params["tile_tokens"], params["base_tokens"], params["fit_px"]
        )
    elif formula == "qwen2-vl":
        count = F.qwen2_vl_image(
            width, height, params.get("min_pixels", 3136), params.get("max_pixels", 12845056), params.get("factor", 28)
        )
    elif formula == "llava-next":
        count = F.llava_next(width, height)
    elif formula == "fixed":
        F._check_size(width, height)
        count = F.fixed(params["tokens"], f"{model.family.name if model.family else model.name} fixed")
    elif formula == "patch-grid":
        count = F.patch_grid(width, height, params["patch_px"])
    else:
        raise PriceError(f"{model.asked}: unknown image formula {formula!r}")
    return _relabel(count, floor)


def _openai_patch(model: Model, params: dict[str, Any], width: int, height: int, detail: str | None) -> F.TokenCount:
    levels = params["levels"]
    level = params["auto"] if detail in (None, "auto") else detail
    if level not in levels:
        raise PriceError(f"detail={detail} is not available on {model.asked} (levels: {', '.join(levels)}, auto)")
    sizing = levels[level]
    count = F.openai_patch(width, height, params["multiplier"], sizing.get("patch_budget"), sizing["max_dim"])
    return count.but(f"detail={level}: {count.working}")


def _audio_count(model: Model, duration_s: float, what: str = "audio", by_duration: bool = False) -> F.TokenCount:
    """The audio's tokens by the model's rule; with no rule but a price per second (``by_duration``), no tokens:
    the bill is the duration's."""
    params = model.formulas.get("audio")
    if params is None and by_duration and model.accepts("audio"):
        return F.TokenCount(0, f"{what}: {duration_s:.3f} s, billed by duration (no token rule)", "exact")
    if params is None or not model.accepts("audio"):
        raise PriceError(f"{model.asked} does not take audio")
    return F.per_second(duration_s, params["tokens_per_second"], what, params.get("label", "exact"))


def _video_counts(
    model: Model, video: Video, detail: str | None, clip: Any = None
) -> tuple[list[tuple[str, F.TokenCount]], str]:
    """(modality, count) parts of a video: its frames and, where the model bills it apart, its sound; and a note
    when the sound track is not sent. ``clip`` (a :class:`mmtok.request.VideoClip`): the part of it sent, and at
    what frame rate."""
    params = model.formulas.get("video")
    if params is None or not model.accepts("video"):
        raise PriceError(f"{model.asked} does not take video")
    formula, floor = params["formula"], params.get("label", "exact")
    duration = clip.seconds(video.duration_s) if clip else video.duration_s
    fps = (clip.fps if clip and clip.fps else None) or params.get("fps", 1.0)
    sent = f" ({clip.describe()})" if clip else ""
    parts: list[tuple[str, F.TokenCount]] = []
    if formula == "per-second":
        parts.append(("video", F.per_second(duration, params["tokens_per_second"], "video")))
    elif formula == "frames":
        level = detail or params["default_level"]
        per_frame = F.fixed_level(level, params["levels"], floor).tokens
        frames = math.ceil(duration * fps - 1e-9)
        working = f"{frames} frames at {fps:g} fps x {per_frame} (media_resolution={level}){sent}"
        parts.append(("video", F.TokenCount(frames * per_frame, f"{working} = {frames * per_frame}", floor)))
    elif formula == "qwen2-vl-video":
        parts.append(("video", F.qwen2_vl_video(duration, video.frame_count, video.width, video.height, fps)))
    elif formula == "frames-patch-grid":
        frames = math.ceil(duration * fps - 1e-9)
        grid = F.patch_grid(video.width, video.height, params["patch_px"])
        parts.append(("video", F.TokenCount(frames * grid.tokens, f"{frames} frames x ({grid.working})")))
    else:
        raise PriceError(f"{model.asked}: unknown video formula {formula!r}")
    parts = [(m, _relabel(c, floor)) for m, c in parts]
    if video.audio is None:
        return parts, ""
    sound = clip.seconds(video.audio.duration_s) if clip else video.audio.duration_s
    if "audio_tokens_per_second" in params:
        rate = params["audio_tokens_per_second"]
        parts.append(("audio", F.per_second(sound, rate, "sound track", "documented")))
    elif model.accepts("audio") and "audio" in model.formulas:
        parts.append(("audio", _audio_count(model, sound, "sound track")))
    else:
        return parts, f"{model.asked} takes no audio: the sound track is not sent"
    return parts, ""


class Attachment(NamedTuple):
    """One part of a request as pricing takes it: a name for people, the item, its own detail (an image's
    ``detail`` or a part's Gemini ``media_resolution``; None: the request's), for a video the clip sent, and whether
    a body's cache mark writes it to the prompt cache."""

    name: str
    item: Any  # Image | Audio | Video | Text | TokenSequence | Given
    detail: str | None = None
    clip: Any = None  # mmtok.request.VideoClip
    cache: str = ""  # written to the prompt cache by a body's cache_control, for this long ("5m", "1h")


class Given(NamedTuple):
    """Tokens counted elsewhere (a per-message overhead, a body's own count): priced as they are."""

    modality: str
    count: F.TokenCount


class Uncountable(PriceError):
    """A part whose tokens cannot be counted (a provider file id, a URL not read): as an attachment, it is left
    out of the quote with its reason, which makes the quote incomplete."""


def count_parts(
    model: Model, item: Any, detail: str | None, by_duration: bool = False, clip: Any = None
) -> tuple[list[tuple[str, F.TokenCount, float]], str]:
    """(modality, count, quantity) parts of one attachment; quantity is images or seconds, for per-item rates
    (``by_duration``: the model bills audio per second)."""
    if isinstance(item, Given):
        return [(item.modality, item.count, 0.0)], ""
    if isinstance(item, Uncountable):
        raise item
    if _is_token_sequence(item):
        if not (model.family and model.family.name == "mmtok-semantic"):
            raise PriceError(f"token sequences are priced on mmtok's own models (mmtok-*), not {model.asked}")
        if len(item) == 0:
            raise PriceError("an empty token sequence: nothing to price")
        what = f"{len(item)} {item.modality} tokens from {item.tokenizer or 'a tokenizer'}"
        return [(item.modality, F.TokenCount(len(item), what), 1.0)], ""
    if isinstance(item, Image):
        count = _image_count(model, item.width, item.height, detail)
        return [("image", count, 1.0)], small_text_note(model, item.width, item.height, detail)
    if isinstance(item, Audio):
        count = _audio_count(model, item.duration_s, by_duration=by_duration)
        return [("audio", count, item.duration_s)], _implausible_length(item)
    if isinstance(item, Video):
        parts, note = _video_counts(model, item, detail, clip)
        note = "; ".join(n for n in (note, _implausible_length(item)) if n)
        sound = item.audio.duration_s if item.audio else 0.0
        seconds = {"video": clip.seconds(item.duration_s), "audio": clip.seconds(sound)} if clip else {
            "video": item.duration_s, "audio": sound}  # fmt: skip
        return [(m, c, seconds[m]) for m, c in parts], note
    if isinstance(item, Text):
        from mmtok.budgets.pricing.text import count_text  # tiktoken loads only when there is text to count

        if not item.text.strip():
            raise PriceError("empty text (or only white space): nothing to price")

        return [("text", count_text(item.text, model.text_rule), 1.0)], ""
    if getattr(item, "kind", None) == "document":
        from mmtok.budgets.pricing.documents import document_parts  # PDFium's rules load only when there is a PDF

        return document_parts(model, item, detail)
    raise PriceError(f"cannot price a {type(item).__name__}")


TEXT_PX = 16  # ordinary text in a page or a screenshot (the CSS default font size)
LEGIBLE_PX = 8  # below this a vision model no longer reads text reliably
LONG_SIDE_RATIO = 2  # a page or a screenshot strip: one side at least twice the other


def small_text_note(model: Model, width: int, height: int, detail: str | None) -> str:
    """A note, from the geometry alone, when the model's view of a long page scales it so far that text of ordinary
    size is lost (a 1280x8000 screenshot seen at 328x2048 by gpt-4o: 16-px text becomes 4 px), with the remedy. The
    view is shrink's (``text_scale``), estimated where the provider publishes a token budget, not a size."""
    if max(width, height) < LONG_SIDE_RATIO * min(width, height):
        return ""
    from mmtok.budgets.shrink.candidates import text_scale  # only for long pages: shrink's geometry, not a copy

    seen = text_scale(model, width, height, detail)
    if seen.text_px(TEXT_PX) >= LEGIBLE_PX:
        return ""
    view = f"{seen.view.width}x{seen.view.height}" + ("" if seen.view.published else " (estimated)")
    return (
        f"{model.asked} sees this {width}x{height} image at {view}, {seen.scale:.2f}x: {TEXT_PX}-px text becomes "
        f"~{seen.text_px(TEXT_PX):.1f} px and is lost; send it in pieces the model sees whole "
        f"(mmtok shrink --slice -m {model.asked})"
    )


MIN_PLAUSIBLE_BITS_PER_SECOND = 8  # below any real codec's rate, even FLAC of silence: the header is not the data


def _implausible_length(media: Any) -> str:
    """A note when a file is far too small for the duration its header declares (priced from the header)."""
    size, seconds = getattr(media, "size_bytes", None), media.duration_s
    if not size or seconds <= 0 or size * 8 / seconds >= MIN_PLAUSIBLE_BITS_PER_SECOND:
        return ""
    return (
        f"its header declares {seconds:,.0f} s in {size:,} bytes ({size * 8 / seconds:.3g} bit/s): priced as "
        "declared, but the data cannot hold that; decode it (mmtok tokenize) to check"
    )


def _is_token_sequence(item: Any) -> bool:
    """A TokenSequence, or a token file's header (``mmtok.token_files.TokenHeader``: its sizes without its tensors),
    without importing torch: a module never imported cannot have made ``item``."""
    tokens, files = sys.modules.get("mmtok.tokens"), sys.modules.get("mmtok.token_files")
    return (tokens is not None and isinstance(item, tokens.TokenSequence)) or (
        files is not None and isinstance(item, files.TokenHeader)
    )


# ------------------------------------------------------------------------------------------------- image tokens
def image_token_count(
    width: int, height: int, model: str, detail: str | None = None, prices: PriceSheets = ()
) -> F.TokenCount:
    """Tokens of a ``width`` x ``height`` image (as displayed) on ``model``, with the working and its label."""
    if detail is not None and detail not in DETAIL_LEVELS:
        raise PriceError(f"detail must be one of {', '.join(DETAIL_LEVELS)}, got {detail!r}")
    return _image_count(resolve(model, prices), int(width), int(height), detail)


def model_image_count(model: Model, width: int, height: int, detail: str | None = None) -> F.TokenCount:
    """``image_token_count`` for a model already resolved."""
    return _image_count(model, int(width), int(height), detail)


def image_tokens(width: int, height: int, model: str, detail: str | None = None, prices: PriceSheets = ()) -> int:
    """Tokens of a ``width`` x ``height`` image on ``model`` (``detail``: OpenAI low / high / original / auto, or a
    Gemini media_resolution level)."""
    return image_token_count(width, height, model, detail, prices).tokens
