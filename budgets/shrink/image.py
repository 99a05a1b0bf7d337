"""Shrinking an image for one model: candidates at the rule's breakpoints, measured, the cheapest that meets the bars.

Candidates are ordered by tokens; the search bisects that order, measuring a candidate only when it is visited
(SSIM first, OCR only if SSIM passed), on the assumption that a larger rendition keeps at least as much as a
smaller one. The chosen rendition has always been measured against every bar. A job decodes its image once and
keeps its readings, so several models and bar sets share the work.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmtok.budgets.formats import NAMES, animation_refused, taken_formats
from mmtok.budgets.pricing import Model, image_token_count
from mmtok.budgets.shrink import candidates as C
from mmtok.budgets.shrink import pictures as P
from mmtok.budgets.shrink.bars import Bar
from mmtok.budgets.shrink.result import Plan

if TYPE_CHECKING:
    import PIL.Image

    from mmtok.media import Image


class ImageJob:
    """One decoded image and the measurements made on it, shared by every model it is shrunk for."""

    def __init__(self, path: Path, media: Image) -> None:
        self.path = Path(path)
        self.media = media
        self.decoded = P.decode(path, media.format)
        self.width, self.height = self.decoded.size
        self._views: dict[tuple[int, int], PIL.Image.Image] = {}
        self._readings: dict[tuple, str] = {}
        self._renders: dict[tuple, PIL.Image.Image] = {}
        self._ocr_outcomes: dict[Any, list[tuple[float, float]]] = {}

    @functools.cached_property
    def crop(self) -> tuple[tuple[int, int, int, int], tuple[int, int, int]] | None:
        """The uniform border's inner box and colour (None: no border worth cutting)."""
        return P.content_box(self.decoded.rgb)

    def original_view(self, size: tuple[int, int]) -> PIL.Image.Image:
        if size not in self._views:
            self._views[size] = P.resized(self.decoded.rgb, size)
        return self._views[size]

    def reading(self, key: tuple, image: PIL.Image.Image) -> str:
        from mmtok.budgets.shrink.ocr import read_text

        if key not in self._readings:
            self._readings[key] = read_text(image)
        return self._readings[key]

    def ocr_agreement(self, box: tuple[int, int, int, int] | None, rendition: C.Rendition, fmt: str) -> float:
        """Agreement of RapidOCR reading the rendition (written as ``fmt``) at the model's view of it with reading
        the original file's pixels (one reading per input, shared by every model); recorded against the view's
        scale."""
        from mmtok.budgets.shrink.ocr import agreement

        truth = self.reading(("original",), self.decoded.rgb)
        if not truth.strip():
            return 1.0  # the original has no text to keep (nothing was read in it)
        image = P.resized(self.rendered(box, rendition.size, fmt), rendition.view.size)
        value = agreement(truth, self.reading(_reading_key(box, rendition, fmt), image))
        self._ocr_outcomes.setdefault((box, fmt), []).append((self.scale(box, rendition), value))
        return value

    def scale(self, box: tuple[int, int, int, int] | None, rendition: C.Rendition) -> float:
        """How much of the (cropped) original's resolution the model sees of ``rendition``."""
        base = box[2] - box[0] if box else self.width
        return rendition.view.width / base

    def read_already(self, box: tuple[int, int, int, int] | None, rendition: C.Rendition, fmt: str) -> bool:
        return _reading_key(box, rendition, fmt) in self._readings

    def predicted_to_fail(
        self, box: tuple[int, int, int, int] | None, rendition: C.Rendition, bar: Bar, fmt: str
    ) -> bool:
        """A reading at a larger or equal scale (for any model writing ``fmt``) already missed ``bar``: a smaller
        one is not read. Only failures are inferred; a rendition that is chosen has always been read."""
        if self.read_already(box, rendition, fmt) or not self.reading(("original",), self.decoded.rgb).strip():
            return False
        scale = self.scale(box, rendition)
        return any(s >= scale - 1e-9 and not bar.met(v) for s, v in self._ocr_outcomes.get((box, fmt), []))

    def smallest_passing_scale(self, box: tuple[int, int, int, int] | None, bar: Bar, fmt: str) -> float | None:
        """The smallest scale at which any model's rendition in ``fmt`` met ``bar``: where the next search starts."""
        passed = [s for s, v in self._ocr_outcomes.get((box, fmt), []) if bar.met(v)]
        return min(passed, default=None)

    def pixels(self, box: tuple[int, int, int, int] | None, size: tuple[int, int]) -> PIL.Image.Image:
        """The output's pixels (alpha kept): cropped to ``box``, resized to ``size``."""
        source = self.decoded.pixels if box is None else self.decoded.pixels.crop(box)
        return P.resized(source, size)

    def rendered(self, box: tuple[int, int, int, int] | None, size: tuple[int, int], fmt: str) -> PIL.Image.Image:
        """What the output file, written as ``fmt`` (a Pillow format), decodes to (RGB over white): lossy formats
        are encoded and decoded back, so the measures see the compression too."""
        key = (box, size, fmt)
        if key not in self._renders:
            pixels = self.pixels(box, size)
            if fmt == "PNG":
                self._renders[key] = pixels if pixels.mode == "RGB" else P.over_white(pixels)
            else:
                self._renders[key] = P.decode_bytes(P.encode(pixels, fmt))
        return self._renders[key]


def _reading_key(box: tuple[int, int, int, int] | None, rendition: C.Rendition, fmt: str) -> tuple:
    return ("rendition", box, rendition.size, rendition.view.size, fmt)


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
    prices: tuple = (),
) -> Plan:
    """The cheapest rendition of ``job``'s image for ``model`` that meets ``bars`` (or, with ``lossless``, the
    same tokens in fewer bytes), written in a format the model's provider takes (``budgets/formats.toml``). An
    original in a format it does not take (or an animated GIF, where it takes still ones only) is converted (the
    same size, first frame) where it would otherwise be kept."""
    taken = taken_formats(model, "image")
    written = job.decoded.output_format(taken)
    if lossless:
        plan = _plan_lossless(job, model, detail, prices, written, taken)
    else:
        plan = _plan_cheaper(job, model, bars, detail, crop, prices, written)
    animated_gif = job.decoded.source_format == "gif" and job.decoded.frames > 1
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
) -> Plan:
    original = image_token_count(job.width, job.height, model.asked, detail, prices).tokens
    reference = C.view(model, job.width, job.height, detail)
    box, border = (job.crop if crop else None) or (None, None)
    base = (box[2] - box[0], box[3] - box[1]) if box else (job.width, job.height)
    ladder = _ladder(model, base, box is not None, original, detail, prices)
    notes = list(job.decoded.notes)
    if not reference.published:
        notes.append(
            f"{model.asked} publishes no internal image size: measured at an estimated view "
            f"({C.ESTIMATED_PX_PER_TOKEN:.0f} px per token, {reference.width}x{reference.height} for the original)"
        )
    if not ladder:
        return Plan(
            "kept",
            f"kept: no rendition costs fewer than {original:,} tokens on {model.asked}",
            notes=notes,
        )
    search = _LadderSearch(job, ladder, reference, box, border, bars, written[0])
    found = search.cheapest_meeting()
    if found is None:
        bars_text = ", ".join(str(b) for b in bars)
        best = search.tried[-1] if search.tried else {}
        return Plan(
            "kept",
            f"kept: no cheaper rendition meets {bars_text} (the largest, {best.get('size')} at "
            f"{best.get('tokens'):,} tokens: {_summary(best)})",
            tried=search.tried,
            notes=notes,
        )
    measures = dict(search.results[found][1])
    return _shrunk(job, model, ladder[found], box, base, measures, search.tried, notes, written)


def _ladder(
    model: Model, base: tuple[int, int], cropped: bool, original: int, detail: str | None, prices: tuple
) -> list[C.Rendition]:
    """The renditions that cost fewer tokens than the original, cheapest first: the rule's breakpoints, and the
    cropped image as it is when a border was cut."""
    ladder = [r for r in C.candidates(model, *base, detail, prices) if r.tokens < original]
    if cropped:
        as_cropped = C.lossless(model, *base, detail, prices) or _as_is(model, base, detail, prices)
        if as_cropped.tokens < original and all(r.tokens != as_cropped.tokens for r in ladder):
            ladder.append(as_cropped)
        ladder.sort(key=lambda r: r.tokens)
    return ladder


class _LadderSearch:
    """Bisection over a ladder ordered by tokens, for the cheapest rendition that meets every bar; each rung is
    measured once, and one the OCR bar is predicted to fail (by a larger scale that failed) is not measured."""

    def __init__(
        self,
        job: ImageJob,
        ladder: list[C.Rendition],
        reference: Any,
        box: Any,
        border: Any,
        bars: list[Bar],
        fmt: str,
    ):
        self.job, self.ladder, self.reference, self.box, self.border, self.bars = (
            job,
            ladder,
            reference,
            box,
            border,
            bars,
        )
        self.fmt = fmt  # the Pillow format the rendition is written as
        self.ocr_bar = next((bar for bar in bars if bar.metric == "ocr"), None)
        self.tried: list[dict[str, Any]] = []
        self.results: dict[int, tuple[bool, dict[str, float | None]]] = {}

    def _record(self, i: int, ok: bool, measures: dict[str, Any], shown: dict[str, Any]) -> None:
        self.results[i] = (ok, measures)
        rung = self.ladder[i]
        self.tried.append(
            {"size": _size(*rung.size), "detail": rung.detail, "tokens": rung.tokens, **shown, "meets": ok}
        )

    def meets(self, i: int) -> bool:
        ocr_bar = self.ocr_bar
        if (
            i not in self.results
            and ocr_bar is not None
            and self.job.predicted_to_fail(self.box, self.ladder[i], ocr_bar, self.fmt)
        ):
            self._record(i, False, {}, {"ocr": "below the bar at a larger scale"})
        if i not in self.results:
            measures = _measure(self.job, self.ladder[i], self.reference, self.box, self.border, self.bars, self.fmt)
            ok = all(measures.get(bar.metric) is not None and bar.met(measures[bar.metric]) for bar in self.bars)
            self._record(i, ok, measures, {k: _round(v) for k, v in measures.items()})
        return self.results[i][0]

    def cheapest_meeting(self) -> int | None:
        """The index of the cheapest rung that meets the bars (None: none does)."""
        low, high = 0, len(self.ladder)  # the answer is in [low, high]; high == len: none found yet
        bar = self.ocr_bar
        start = self.job.smallest_passing_scale(self.box, bar, self.fmt) if bar is not None else None
        while low < high:
            mid = (low + high) // 2
            if start is not None:  # another model's search found where the text stops being read: probe above it
                above = [i for i in range(low, high) if self.job.scale(self.box, self.ladder[i]) >= start - 1e-9]
                mid, start = (above[0] if above else mid), None
            if self.meets(mid):
                high = mid
            else:
                low = mid + 1
        return None if high == len(self.ladder) else high


def _shrunk(
    job: ImageJob,
    model: Model,
    chosen: C.Rendition,
    box: Any,
    base: tuple[int, int],
    measures: dict[str, Any],
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
    if job.decoded.source_format != fmt.lower() and data is not None:
        notes.append(f"written as {fmt} ({job.decoded.source_format.upper()} in)")
    return Plan(
        "shrunk",
        " -> ".join(steps) + level,
        data,
        suffix if data is not None else job.path.suffix,
        chosen.detail,
        measures,
        tried,
        notes,
        list(job.decoded.warnings),
    )


def _as_is(model: Model, size: tuple[int, int], detail: str | None, prices: tuple) -> C.Rendition:
    count = image_token_count(*size, model.asked, detail, prices)
    return C.Rendition(*size, detail, count.tokens, count.working, C.view(model, *size, detail))


def _measure(
    job: ImageJob,
    rendition: C.Rendition,
    reference: C.View,
    box: tuple[int, int, int, int] | None,
    border: tuple[int, int, int] | None,
    bars: list[Bar],
    fmt: str,
) -> dict[str, float | None]:
    """The rendition's measures, written as ``fmt``: SSIM at the model's view, then (if SSIM passed) OCR agreement
    with the original."""
    wanted = {bar.metric: bar for bar in bars}
    image = job.rendered(box, rendition.size, fmt)
    out: dict[str, float | None] = {}
    if "ssim" in wanted:
        seen = P.to_view(image, rendition.view.size, reference.size, (job.width, job.height), box, border)
        out["ssim"] = P.ssim(job.original_view(reference.size), seen)
        if not wanted["ssim"].met(out["ssim"]):
            if "ocr" in wanted:
                out["ocr"] = None  # not read: the SSIM bar already failed
            return out
    if "ocr" in wanted:
        out["ocr"] = job.ocr_agreement(box, rendition, fmt)
    return out


def _plan_lossless(
    job: ImageJob,
    model: Model,
    detail: str | None,
    prices: tuple,
    written: tuple[str, str],
    taken: frozenset[str] | None,
) -> Plan:
    """The model's own view of the image, with no metadata; or, where the view is the image itself or is not
    published, the same pixels with no metadata."""
    fmt, suffix = written
    webp = taken is None or "webp" in taken
    notes = list(job.decoded.notes)
    width, height = job.width, job.height
    rendition = C.lossless(model, width, height, detail, prices)
    reference = C.view(model, width, height, detail)
    if rendition is not None:
        data, suffix = P.encode_smallest(job.pixels(None, rendition.size), fmt, webp)
        action = f"{_size(width, height)} -> {_size(*rendition.size)} (the model's own view), metadata dropped"
    else:
        why = "already within the model's view" if reference.published else "no internal size is published"
        data, suffix = _same_pixels(job, fmt, suffix, webp)
        action = f"{_size(width, height)}, not resized ({why}), metadata dropped"
    if data is None or len(data) >= (job.media.size_bytes or 0):
        return Plan(
            "kept",
            "kept: no smaller file shows the model the same image",
            notes=notes,
        )
    measures: dict[str, float | None] = {}
    if reference.published:
        seen = P.decode_bytes(data)
        measures["ssim"] = P.ssim(job.original_view(reference.size), P.resized(seen, reference.size))
    name = P.written_name(suffix)
    if job.decoded.source_format != name:
        notes.append(f"written as {name.upper()} ({job.decoded.source_format.upper()} in)")
    return Plan("lossless", action, data, suffix, detail, measures, [], notes, list(job.decoded.warnings))


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
    quality 90, measured as any rendition is (``_measure``: SSIM, then OCR), unless it misses a bar (or there are
    no bars: ``--lossless``) and the provider takes PNG, which is exact."""
    webp = taken is None or "webp" in taken
    data, suffix = P.encode_smallest(job.decoded.pixels, written[0], webp)
    measures: dict[str, float | None] = {}
    if written[0] == "JPEG":
        same = _as_is(model, (job.width, job.height), detail, prices)
        measures = _measure(job, same, same.view, None, None, bars, "JPEG") if bars else {}
        met = bool(bars) and all(measures.get(b.metric) is not None and b.met(measures[b.metric]) for b in bars)
        if not met and "png" in (taken or ()):
            data, suffix = P.encode_smallest(job.decoded.pixels, "PNG", webp)
            measures = {}
    name, source = NAMES[P.written_name(suffix)], NAMES.get(job.decoded.source_format, job.decoded.source_format)
    if job.decoded.format_taken(taken):  # the format is taken, its animation is not
        source = f"an animated {source}"
    action = f"converted to {name} at the same size: {model.asked} does not take {source} ({kept.action})"
    return Plan("converted", action, data, suffix, None, measures, kept.tried, kept.notes, list(job.decoded.warnings))


def _copyable(job: ImageJob, fmt: str) -> bool:
    """The original file is itself a valid output written as ``fmt``: upright already, one frame, its format."""
    return (
        not job.decoded.warnings
        and not any(n.startswith("EXIF orientation") for n in job.decoded.notes)
        and fmt.lower() == job.decoded.source_format
    )


def _same_pixels(job: ImageJob, fmt: str, suffix: str, webp: bool) -> tuple[bytes | None, str]:
    """The image at its own size with no metadata: JPEG segments cut without re-encoding where it is upright,
    otherwise re-encoded (pixel-exact sources losslessly, at their smallest)."""
    if fmt == "JPEG" and _copyable(job, fmt):
        return P.strip_jpeg_metadata(job.path.read_bytes()), suffix
    return P.encode_smallest(job.decoded.pixels, fmt, webp)


def _detail_name(model: Model) -> str:
    formula = model.formulas.get("image", {}).get("formula", "")
    return "media_resolution" if formula in ("fixed-level", "gemini-2.5") else "detail"


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)


def _summary(tried: dict[str, Any]) -> str:
    parts = [
        f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
        for k, v in tried.items()
        if k in ("ssim", "ocr") and v is not None
    ]
    return ", ".join(parts) or "not measured"
