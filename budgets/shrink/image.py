"""Shrinking an image for one model: candidates at the rule's breakpoints, measured, the cheapest that meets the bars.

Candidates are ordered by tokens and searched (``search.py``) with the image's measures kept in its job (``job.py``),
so several models and bar sets share the work. With ``slice``, an image no single rendition serves (not even the
original as the model sees it) is cut into pieces the model sees whole (``slices.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mmtok.budgets.pricing import Model, image_token_count
from mmtok.budgets.pricing.formats import NAMES, animation_refused, taken_formats
from mmtok.budgets.pricing.limits import image_refused
from mmtok.budgets.pricing.models import provider_of
from mmtok.budgets.shrink import candidates as C
from mmtok.budgets.shrink import pictures as P
from mmtok.budgets.shrink.bars import Bar
from mmtok.budgets.shrink.job import ImageJob
from mmtok.budgets.shrink.result import Plan
from mmtok.budgets.shrink.search import LadderSearch, measure

if TYPE_CHECKING:
    from mmtok.budgets.shrink.search import Measured

__all__ = ["ESTIMATED_VIEW_NOTE", "ImageJob", "plan_image"]
ESTIMATED_VIEW_NOTE = "publishes no internal image size: measured at an estimated view"


def _size(w: int, h: int) -> str:
    return f"{w}x{h}"


def plan_image(
    job: ImageJob,
    model: Model,
    bars: list[Bar],
    *,
    lossless: bool = False,
    detail: str | None = None,
    crop: bool = True,
    slice_: bool = False,
    prices: tuple = (),
) -> Plan:
    """The cheapest rendition of ``job``'s image for ``model`` that meets ``bars`` (or, with ``lossless``, the
    same tokens in fewer bytes), written in a format the model's provider takes (``budgets/formats.toml``). An
    original in a format it does not take (or an animated GIF, where it takes still ones only) is converted (the
    same size, first frame) where it would otherwise be kept. ``slice_``: where nothing meets the bars, not even
    the original as the model sees it, pieces that do (they cost more than the one image)."""
    taken = taken_formats(model, "image")
    written = job.decoded.output_format(taken)
    if lossless:
        plan = _plan_lossless(job, model, detail, prices, written, taken)
    else:
        plan = _plan_cheaper(job, model, bars, detail, crop, prices, written, slice_)
    animated_gif = job.decoded.source_format == "gif" and job.decoded.frames > 1
    refused = image_refused(provider_of(model), job.width, job.height, job.media.size_bytes)
    if plan.status == "kept" and refused:  # never keep an original the provider refuses: send the model's own view
        fitted = _plan_lossless(job, model, detail, prices, written, taken)
        plan = fitted if fitted.status != "kept" else plan
        plan.notes.append(f"the original is refused by the provider: {refused}")
    if plan.status == "kept" and (not job.decoded.format_taken(taken) or (animated_gif and animation_refused(model))):
        return _converted(job, model, plan, written, taken, bars if not lossless else [], detail, prices)
    return plan


def _plan_cheaper(
    job: ImageJob,
    model: Model,
    bars: list[Bar],
    detail: str | None,
    crop: bool,
    prices: tuple,
    written: tuple[str, str],
    slice_: bool,
) -> Plan:
    original = image_token_count(job.width, job.height, model.asked, detail, prices).tokens
    reference = C.view(model, job.width, job.height, detail)
    box, border = (job.crop if crop else None) or (None, None)
    base = (box[2] - box[0], box[3] - box[1]) if box else (job.width, job.height)
    ladder = _ladder(model, base, box is not None, original, detail, prices)
    notes = list(job.decoded.notes)
    if not reference.published:
        notes.append(
            f"{model.asked} {ESTIMATED_VIEW_NOTE} ({C.ESTIMATED_PX_PER_TOKEN:.0f} px per token, "
            f"{reference.width}x{reference.height} for the original)"
        )
    search = LadderSearch(job, ladder, reference, box, border, bars, written[0])
    found = search.cheapest_meeting() if ladder else None
    if found is not None:
        chosen = search.results[found]
        return _shrunk(job, model, ladder[found], box, base, chosen, search.tried, notes, written)
    if not ladder:
        why = f"no rendition costs fewer than {original:,} tokens on {model.asked}"
    else:
        best = search.tried[-1] if search.tried else {}
        why = (
            f"no cheaper rendition meets {', '.join(str(b) for b in bars)} (the largest, {best.get('size')} at "
            f"{best.get('tokens'):,} tokens: {_summary(best)})"
        )
    if slice_ or _small_text(job, model, detail, bars):
        from mmtok.budgets.shrink.slices import plan_slices

        sliced = plan_slices(job, model, bars, detail, prices, written, why, search.tried, notes, slice_, crop)
        if sliced is not None:
            return sliced
    return Plan("kept", f"kept: {why}", tried=search.tried, notes=notes)


def _small_text(job: ImageJob, model: Model, detail: str | None, bars: list[Bar]) -> bool:
    """The original has text the model's view shrinks below what OCR reads (said, with the remedy, when kept)."""
    from mmtok.budgets.shrink.slices import text_shrunk

    return any(bar.metric == "ocr" for bar in bars) and text_shrunk(job, model, detail) is not None


def _ladder(
    model: Model, base: tuple[int, int], cropped: bool, original: int, detail: str | None, prices: tuple
) -> list[C.Rendition]:
    """The renditions that cost fewer tokens than the original, cheapest first: the rule's breakpoints, and the
    cropped image as it is when a border was cut."""
    ladder = [r for r in C.candidates(model, *base, detail, prices) if r.tokens < original]
    if cropped:
        as_cropped = C.lossless(model, *base, detail, prices) or as_is(model, base, detail, prices)
        if as_cropped.tokens < original and all(r.tokens != as_cropped.tokens for r in ladder):
            ladder.append(as_cropped)
        ladder.sort(key=lambda r: r.tokens)
    return ladder


def _shrunk(
    job: ImageJob,
    model: Model,
    chosen: C.Rendition,
    box: Any,
    base: tuple[int, int],
    measured: Measured,
    tried: list[dict[str, Any]],
    notes: list[str],
    written: tuple[str, str],
) -> Plan:
    """The plan that writes ``chosen`` as ``written`` (Pillow format, suffix): what was done, the bytes (None when
    the source can be copied as it is)."""
    fmt, suffix = written
    steps = [_size(job.width, job.height)]
    if box is not None:
        steps.append(f"crop {base[0]}x{base[1]} (uniform border)")
    if chosen.size != base:
        steps.append(_size(*chosen.size))
    level = f", {_detail_name(model)} {chosen.detail}" if chosen.detail else ""
    same_pixels = box is None and chosen.size == (job.width, job.height)
    data = None if same_pixels and _copyable(job, fmt) else P.encode(job.pixels(box, chosen.size), fmt)
    change = format_change(job, suffix) if data is not None else ""
    if change:
        notes.append(f"written as {fmt} ({job.decoded.source_format.upper()} in)")
    return Plan(
        "shrunk",
        " -> ".join(steps) + level + change,
        data,
        suffix if data is not None else job.path.suffix,
        chosen.detail,
        dict(measured.values),
        tried,
        notes,
        list(job.decoded.warnings),
        dict(measured.reasons),
    )


def format_change(job: ImageJob, suffix: str) -> str:
    """``", as WebP (PNG in)"`` where the written format is not the source's; "" where it is."""
    name = P.written_name(suffix)
    if name == job.decoded.source_format:
        return ""
    return f", as {NAMES[name]} ({NAMES.get(job.decoded.source_format, job.decoded.source_format.upper())} in)"


def as_is(model: Model, size: tuple[int, int], detail: str | None, prices: tuple) -> C.Rendition:
    """The image at ``size`` sent as it is: its tokens and the model's view of it."""
    count = image_token_count(*size, model.asked, detail, prices)
    return C.Rendition(*size, detail, count.tokens, count.working, C.view(model, *size, detail))


def _plan_lossless(
    job: ImageJob,
    model: Model,
    detail: str | None,
    prices: tuple,
    written: tuple[str, str],
    taken: frozenset[str] | None,
) -> Plan:
    """The same tokens in fewer bytes: the model's own view of the image (or the image itself where the view is
    the image or is not published), with no metadata. Pixel-exact sources are written exactly (PNG or lossless
    WebP). A lossy source keeps its pixels where it is not resized (a JPEG's metadata cut without re-encoding);
    resized, it is written exactly where that is smaller than the source, else re-encoded at quality 90 and said so
    (status ``re-encoded``, with its SSIM at the view)."""
    fmt, suffix = written
    webp = taken is None or "webp" in taken
    notes = list(job.decoded.notes)
    width, height = job.width, job.height
    rendition = C.lossless(model, width, height, detail, prices)
    reference = C.view(model, width, height, detail)
    exact = True
    if rendition is not None:
        pixels = job.pixels(None, rendition.size)
        found = _exact_bytes(pixels, taken)
        if found is not None and (job.decoded.exact or len(found[0]) < (job.media.size_bytes or 0)):
            data, suffix = found
        else:  # a lossy source whose exact view is larger than it: re-encoded, and said so
            data, suffix, exact = P.encode(pixels, fmt), suffix, False
        action = f"{_size(width, height)} -> {_size(*rendition.size)} (the model's own view), metadata dropped"
    else:
        why = "already within the model's view" if reference.published else "no internal size is published"
        data, suffix = _same_pixels(job, fmt, suffix, webp)
        action = f"{_size(width, height)}, not resized ({why}), metadata dropped"
    if data is None or len(data) >= (job.media.size_bytes or 0):
        return Plan("kept", "kept: no smaller file shows the model the same image", notes=notes)
    change = format_change(job, suffix)
    if change:
        notes.append(f"written as {P.written_name(suffix).upper()} ({job.decoded.source_format.upper()} in)")
    measures: dict[str, float | None] = {}
    reasons: dict[str, str] = {}
    if reference.published:
        seen = P.resized(P.decode_bytes(data), reference.size)
        value, reason = job.ssim(job.original_view(reference.size), seen)
        measures["ssim"] = value
        if reason:
            reasons["ssim"] = reason
    status = "lossless"
    if not exact:
        status = "re-encoded"
        ssim = f", ssim {measures['ssim']:.3f} at the view" if measures.get("ssim") is not None else ""
        why = "lossy source" if not job.decoded.exact else f"{model.asked} takes no exact format"
        action += f", re-encoded ({why}): {NAMES[P.written_name(suffix)]} quality {P.JPEG_QUALITY}{ssim}"
    return Plan(status, action + change, data, suffix, detail, measures, [], notes, list(job.decoded.warnings), reasons)


def _exact_bytes(pixels: Any, taken: frozenset[str] | None) -> tuple[bytes, str] | None:
    """The pixels as the smallest exact file the provider takes (PNG or lossless WebP); None if it takes neither."""
    png, webp = taken is None or "png" in taken, taken is None or "webp" in taken
    if png:
        return P.encode_smallest(pixels, "PNG", webp)
    if webp:
        return P.encode_lossless_webp(pixels), ".webp"
    return None


def _converted(
    job: ImageJob,
    model: Model,
    kept: Plan,
    written: tuple[str, str],
    taken: frozenset[str] | None,
    bars: list[Bar],
    detail: str | None,
    prices: tuple,
) -> Plan:
    """``kept``, but for a provider that does not take the original's format: its pixels (upright, first frame,
    no metadata) at the same size in one it takes. Exact sources as the smallest exact file; lossy ones as JPEG at
    quality 90, measured as any rendition is (``search.measure``: SSIM, recog, then OCR), unless it misses a bar
    (or there are no bars: ``--lossless``) and the provider takes PNG, which is exact."""
    webp = taken is None or "webp" in taken
    data, suffix = P.encode_smallest(job.decoded.pixels, written[0], webp)
    measures: dict[str, float | None] = {}
    reasons: dict[str, str] = {}
    if written[0] == "JPEG":
        same = as_is(model, (job.width, job.height), detail, prices)
        measured = measure(job, same, same.view, None, None, bars, "JPEG") if bars else None
        if measured is not None:
            measures, reasons = dict(measured.values), dict(measured.reasons)
        if (measured is None or not measured.ok) and "png" in (taken or ()):
            data, suffix = P.encode_smallest(job.decoded.pixels, "PNG", webp)
            measures, reasons = {}, {}
    name, source = NAMES[P.written_name(suffix)], NAMES.get(job.decoded.source_format, job.decoded.source_format)
    if job.decoded.format_taken(taken):  # the format is taken, its animation is not
        source = f"an animated {source}"
    action = f"converted to {name} at the same size: {model.asked} does not take {source} ({kept.action})"
    warnings = list(job.decoded.warnings)
    return Plan("converted", action, data, suffix, None, measures, kept.tried, kept.notes, warnings, reasons)


def _copyable(job: ImageJob, fmt: str) -> bool:
    """The original file is itself a valid output written as ``fmt``: upright already, one frame, its format."""
    return (
        not job.decoded.warnings
        and not any(n.startswith("EXIF orientation") for n in job.decoded.notes)
        and fmt.lower() == job.decoded.source_format
    )


def _same_pixels(job: ImageJob, fmt: str, suffix: str, webp: bool) -> tuple[bytes | None, str]:
    """The image at its own size with no metadata, its pixels unchanged: JPEG segments cut without re-encoding where
    it is upright; a pixel-exact source written exactly at its smallest; None for other lossy sources (re-encoding
    them would change their pixels)."""
    if fmt == "JPEG" and _copyable(job, fmt):
        return P.strip_jpeg_metadata(job.path.read_bytes()), suffix
    if job.decoded.exact or fmt == "PNG":
        return P.encode_smallest(job.decoded.pixels, "PNG", webp)
    return None, suffix


def _detail_name(model: Model) -> str:
    formula = model.formulas.get("image", {}).get("formula", "")
    return "media_resolution" if formula in ("fixed-level", "gemini-2.5") else "detail"


def _summary(tried: dict[str, Any]) -> str:
    reasons = tried.get("reasons", {})
    parts = []
    for metric in ("ssim", "recog", "ocr"):
        if metric not in tried:
            continue
        value = tried[metric]
        if value is not None:
            parts.append(f"{metric} {value:.3f}")
        elif metric in reasons and not reasons[metric].startswith(("not measured", "no text found")):
            parts.append(f"{metric} {reasons[metric]}")
    return ", ".join(parts) or "not measured"
