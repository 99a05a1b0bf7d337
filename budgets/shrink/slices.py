"""Tall and wide images: pieces the model sees whole, where no single image meets the bars.

A 1280x8000 full-page screenshot is seen by gpt-4o at 328x2048, so its 18-px text is ~4.6 px: no rendition of the
one image keeps it readable, and the original as sent does not either. With ``--slice`` such an image is cut across
its long side into overlapping pieces, each sized to the model's own limit (``candidates.largest_unscaled``: the
size at which its rule stops downscaling), at a scale chosen like any rendition: the cheapest that meets the bars.
Each piece is measured against its part of the original at full resolution (SSIM and recog per piece, the worst
piece counting; OCR on the original's lines that lie in the piece, all pieces' characters together), and priced;
the pieces are sent as several images, in order, and cost more than the one image: the action says how much.

Pieces overlap by two lines of the original's text (or ``MIN_OVERLAP_PX``), so a line cut at one piece's edge is
whole in the next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mmtok.budgets.pricing import Model, image_token_count
from mmtok.budgets.shrink import candidates as C
from mmtok.budgets.shrink import pictures as P
from mmtok.budgets.shrink.bars import Bar
from mmtok.budgets.shrink.result import Plan
from mmtok.budgets.shrink.search import START_LINE_PX, LadderSearch, Measured, in_order, measure

if TYPE_CHECKING:
    from mmtok.budgets.shrink.job import ImageJob

SCALE_STEP = 1.15  # successive slicings differ by this factor in scale (about 30% in tokens)
MIN_OVERLAP_PX = 16
OVERLAP_LINES = 2
Region = tuple[int, int, int, int]


@dataclass(frozen=True)
class Slicing:
    """The image cut into ``regions`` (of the original), each written at ``size`` and sent at ``detail``."""

    scale: float
    regions: tuple[Region, ...]
    size: tuple[int, int]  # each piece's pixels
    overlap_px: int  # in the pieces' pixels
    detail: str | None
    tokens: int  # all pieces together

    @property
    def width(self) -> int:
        return self.size[0]

    @property
    def height(self) -> int:
        return self.size[1]


def text_shrunk(job: ImageJob, model: Model, detail: str | None) -> str | None:
    """A sentence saying how small the model's view makes the original's text, where its median line falls under
    ``START_LINE_PX`` (None: no text, or text the view keeps readable)."""
    if not job.text_found:
        return None
    seen = C.text_scale(model, job.width, job.height, detail)
    line = job.median_line_px
    if seen.text_px(line) >= START_LINE_PX:
        return None
    return (
        f"{model.asked} sees this {job.width}x{job.height} image at {seen.view.width}x{seen.view.height} "
        f"({seen.scale:.2f}x): its text (lines of {line:.0f} px) at ~{seen.text_px(line):.1f} px"
    )


def plan_slices(
    job: ImageJob,
    model: Model,
    bars: list[Bar],
    detail: str | None,
    prices: tuple,
    written: tuple[str, str],
    why: str,
    tried: list[dict[str, Any]],
    notes: list[str],
    enabled: bool,
    crop: bool = True,
) -> Plan | None:
    """Where no cheaper rendition met the bars: without ``enabled``, a kept plan that says how small the view makes
    the text and points to ``--slice``; with it, the cheapest slicing that meets the bars, when the original as the
    model sees it does not; ``crop``: the pieces cover the page inside its uniform margins. None: nothing to add
    (keep the original as the caller would)."""
    shrunk_text = text_shrunk(job, model, detail)
    if not enabled:
        if shrunk_text is None:
            return None
        hint = "--slice cuts it into pieces the model sees whole"
        return Plan("kept", f"kept: {why}; {shrunk_text}: {hint}", tried=tried, notes=notes)
    from mmtok.budgets.shrink.image import as_is

    fmt, suffix = written
    whole = as_is(model, (job.width, job.height), detail, prices)
    as_sent = _as_sent(job, whole, bars, fmt)
    tried = [*tried, {"size": f"{job.width}x{job.height} as sent", "detail": detail, "tokens": whole.tokens,
                      **as_sent.shown(), "meets": as_sent.ok}]  # fmt: skip
    if as_sent.ok or whole.view.size == (job.width, job.height):
        return None  # the original as sent meets the bars, or the model sees it whole: slicing adds nothing
    region = sliced_region(job, crop)
    slicings = slicings_for(job, model, detail, prices, region)
    search = _SliceSearch(job, slicings, bars, fmt)
    found = search.cheapest_meeting() if slicings else None
    tried += search.tried
    if found is None:
        what = "no slicing meets the bars either" if slicings else "the model cannot see any slice of it whole"
        return Plan("kept", f"kept: {why}; {what}", tried=tried, notes=notes)
    chosen, measured = slicings[found], search.results[found]
    pieces = [P.encode(job.pixels(region, chosen.size), fmt) for region in chosen.regions]
    shown = ", ".join(f"{k} {v:.3f}" for k, v in as_sent.values.items() if v is not None)
    cut = region != (0, 0, job.width, job.height)
    cropped = f"crop {region[2] - region[0]}x{region[3] - region[1]} (uniform margins), " if cut else ""
    action = (
        f"{cropped}sliced into {len(pieces)} pieces of {chosen.width}x{chosen.height} ({chosen.scale:.2f}x, "
        f"overlapping {chosen.overlap_px} px): {chosen.tokens:,} tokens against {whole.tokens:,} for the one image, "
        f"which {model.asked} sees at {whole.view.width}x{whole.view.height}{' (' + shown + ')' if shown else ''}"
    )
    notes = [*notes, shrunk_text] if shrunk_text else notes
    warnings = list(job.decoded.warnings)
    values, reasons = dict(measured.values), dict(measured.reasons)
    return Plan("sliced", action, None, suffix, detail, values, tried, notes, warnings, reasons, pieces)


def sliced_region(job: ImageJob, crop: bool) -> Region:
    """The part of the page the pieces cover: inside its uniform margins, with a margin of 1% of its short side
    kept (so that a page's white column beside its text does not make each piece wider), or the whole page."""
    if crop and job.bounds is not None:
        margin = max(2, round(0.01 * min(job.width, job.height)))
        found = P.content_box(job.decoded.rgb, job.bounds, margin)
        if found is not None:
            return found[0]
    return (0, 0, job.width, job.height)


def _as_sent(job: ImageJob, whole: Any, bars: list[Bar], fmt: str) -> Measured:
    """The original as the model sees it, against the bars; not read where the OCR bar is known to fail there (its
    lines under what OCR reads at the view's scale)."""
    ocr = next((bar for bar in bars if bar.metric == "ocr"), None)
    known = job.known_failure(None, whole, ocr, fmt) if ocr is not None else None
    if known is None:
        return measure(job, whole, whole.view, None, None, bars, fmt)
    others = {bar.metric: "not measured: the ocr bar is known to fail" for bar in bars if bar.metric != "ocr"}
    return Measured({bar.metric: None for bar in bars}, {**others, "ocr": known}, ok=False)


def slicings_for(
    job: ImageJob, model: Model, detail: str | None, prices: tuple, region: Region | None = None
) -> list[Slicing]:
    """Slicings of ``region`` (default: the whole image) at scales from just above the model's view of the region
    as one image up to full resolution, one per token count, cheapest first; a scale at which the region's width
    (height, if wide) is itself downscaled, or at which one piece holds the whole region (a single rendition), is
    left out."""
    region = region or (0, 0, job.width, job.height)
    width, height = region[2] - region[0], region[3] - region[1]
    tall = height >= width
    start = C.text_scale(model, width, height, detail).scale  # the model's view of the region as one image
    scales, s = [], 1.0
    while s > start * 1.02:
        scales.append(s)
        s /= SCALE_STEP
    best: dict[int, Slicing] = {}
    for scale in scales:
        slicing = _slicing(job, model, detail, prices, scale, region, tall)
        if slicing is not None and (slicing.tokens not in best or slicing.scale > best[slicing.tokens].scale):
            best[slicing.tokens] = slicing
    return sorted(best.values(), key=lambda sl: sl.tokens)


def _slicing(
    job: ImageJob, model: Model, detail: str | None, prices: tuple, scale: float, region: Region, tall: bool
) -> Slicing | None:
    left, top, right, bottom = region
    across, along = (right - left, bottom - top) if tall else (bottom - top, right - left)
    width_px, length_px = max(1, round(across * scale)), max(1, round(along * scale))
    piece_px = C.largest_unscaled(model, width_px, length_px, detail, tall)
    if piece_px == 0 or piece_px >= length_px:
        return None
    line = job.median_line_px if job.text_found else 0.0
    overlap = min(piece_px // 3, max(MIN_OVERLAP_PX, round(OVERLAP_LINES * line * scale)))
    count = math.ceil((length_px - overlap) / (piece_px - overlap))
    piece_px = math.ceil((length_px + (count - 1) * overlap) / count)  # equal pieces, overlapping at least as asked
    regions = []
    for i in range(count):
        first = round(i * (length_px - piece_px) / (count - 1))
        low, high = round(first / scale), min(along, round((first + piece_px) / scale))
        regions.append((left, top + low, right, top + high) if tall else (left + low, top, left + high, bottom))
    size = (width_px, piece_px) if tall else (piece_px, width_px)
    tokens = image_token_count(*size, model.asked, detail, prices).tokens * count
    return Slicing(scale, tuple(regions), size, overlap, detail, tokens)


class _SliceSearch(LadderSearch):
    """The ladder search over slicings: each measured piece by piece against its part of the original."""

    def __init__(self, job: ImageJob, slicings: list[Slicing], bars: list[Bar], fmt: str):
        super().__init__(job, slicings, None, None, None, bars, fmt)  # type: ignore[arg-type]

    def describe(self, i: int) -> dict[str, Any]:
        sl = self.ladder[i]
        return {"size": f"{len(sl.regions)} x {sl.width}x{sl.height}", "detail": sl.detail, "tokens": sl.tokens}

    def known_failure(self, i: int) -> str | None:
        return None

    def scale(self, i: int) -> float:
        return self.ladder[i].scale

    def start(self) -> tuple[int | None, bool]:
        if self.ocr_bar is None or not self.job.text_found:
            return None, False
        line = self.job.median_line_px
        first = next((i for i, sl in enumerate(self.ladder) if sl.scale * line >= START_LINE_PX), len(self.ladder) - 1)
        return first, False

    def measure(self, i: int) -> Measured:
        return measure_slicing(self.job, self.ladder[i], self.bars, self.fmt)


def measure_slicing(job: ImageJob, slicing: Slicing, bars: list[Bar], fmt: str) -> Measured:
    """SSIM and recog of each piece against its part of the original at full resolution (the worst piece), then
    OCR of the original's lines in each piece (all pieces' characters together); cheapest first, stopping at the
    first bar missed."""

    def one(bar: Bar) -> tuple[float | None, str | None]:
        return _ocr(job, slicing, fmt, bar) if bar.metric == "ocr" else _worst_piece(job, slicing, fmt, bar.metric)

    return in_order(bars, one)


def _worst_piece(job: ImageJob, slicing: Slicing, fmt: str, metric: str) -> tuple[float | None, str | None]:
    worst: float | None = 1.0
    for region in slicing.regions:
        part = job.decoded.rgb.crop(region)
        seen = P.resized(job.rendered(region, slicing.size, fmt), part.size)
        value, reason = job.ssim(part, seen) if metric == "ssim" else job.recog(("part", region), part, seen)
        if value is None:
            return None, reason
        worst = min(worst, value)
    return worst, None


def _ocr(job: ImageJob, slicing: Slicing, fmt: str, bar: Bar) -> tuple[float | None, str | None]:
    """Each piece read at its own view against the original's lines that lie wholly in its part; the worst piece
    counts (a piece whose part holds no whole line is not read)."""
    if not job.text_found:
        from mmtok.budgets.shrink.job import NO_TEXT

        return None, NO_TEXT
    worst = 1.0
    for region in slicing.regions:
        value = job.read_part(region, slicing.size, fmt)
        if value is not None:
            worst = min(worst, value)
            if not bar.met(worst):
                return worst, None
    return worst, None
