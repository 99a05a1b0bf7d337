"""One image being shrunk: decoded once, its text read once, and every measure made on it kept, so that every model
(and every set of bars the benchmark tries) shares the work.

What is kept: the decoded pixels and the original's views; each rendition as its file decodes (lossy formats encoded
and decoded back); the original's lines of text (found and read once) and each rendition's reading of them; the
network's look at each view; and, per crop and written format, the OCR agreement found at each scale of the view,
from which a smaller scale is known to fail once a larger one did. A rendition in whose view the original's median
line of text would be under ``MIN_READ_LINE_PX`` is known to fail too (at bars of 0.9 and over): in the benchmark,
none of the earlier path's 58 readings of lines under 7 px reached 0.98, while 10% of those at 7-8 px did
(``eval/results/bench_shrink.txt``, OCR readings by line height).
"""

from __future__ import annotations

import contextlib
import functools
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mmtok.budgets.shrink import candidates as C
from mmtok.budgets.shrink import ocr as O
from mmtok.budgets.shrink import pictures as P
from mmtok.budgets.shrink.bars import Bar

if TYPE_CHECKING:
    import PIL.Image

    from mmtok.media import Image

Box = tuple[int, int, int, int] | None  # a crop (left, top, right, bottom) of the original, or None
SSIM_WINDOW_PX = 11
MIN_READ_LINE_PX = 7.0  # lines shorter than this in a view are not read at bars of GEOMETRY_BAR and over
GEOMETRY_BAR = 0.9
LEGIBLE_LINE_PX = 7.5  # text this tall in a view is predicted read (the search starts there; see the bench)
CLASS_CHANGED = "missed: the classifier's top class changed"  # the recog bar's other condition
KEPT_RENDERS = 2  # renditions kept decoded (each its full size: ~8 MB for a 1762x1506 one)
PHOTO_COLOURS = 100  # a thumbnail with this many colours or more looks like a photo (looks_like_photo)
MIN_TEXT_CHARS = 4  # fewer characters read in the whole original is no text to keep (a photo's stray "6")
DETECT_MARGIN_PX = 32  # the detector is given this much of the border around the content it searches
INSIDE_BORDER = 0.9  # the detector searches inside a uniform border that leaves this much of the image or less
NO_TEXT = f"no text found ({O.DETECTOR}; fewer than {MIN_TEXT_CHARS} characters): the ocr bar does not apply"


class ImageJob:
    """One decoded image and the measurements made on it, shared by every model it is shrunk for; the original's
    analysis (border, lines, their readings, the network's looks) is kept between calls (``analysis.py``; ``kept``
    False: neither read nor written).
    ``reference``: the path before issue 39 (nothing kept between calls, each detector pass whole, the search from
    the 10-px rung), for the benchmark's side-by-side."""

    def __init__(self, path: Path, media: Image, reference: bool = False, kept: bool = True) -> None:
        from mmtok.budgets.shrink import analysis

        self.path = Path(path)
        self.media = media
        self.reference = reference
        self.decoded = P.decode(path, media.format)
        self.width, self.height = self.decoded.size
        kept = kept and not reference and analysis.enabled()
        self.analysis = analysis.load(self.path) if kept else analysis.Analysis(None)
        self._views: dict[tuple[int, int], PIL.Image.Image] = {}
        self._renders: dict[tuple, PIL.Image.Image] = {}
        self._readings: dict[tuple, float | None] = {}
        self._looks: dict[Any, Any] = {}
        self._ssim_kept: tuple[PIL.Image.Image, P.SsimReference] | None = None
        self._ahead: dict[tuple, Future[str]] = {}  # readings started beside the cheap measures (read_ahead)
        self._text_ahead: Future[bool] | None = None  # text_found, looked for on the reading thread
        self._ocr_outcomes: dict[Any, list[tuple[float, float]]] = {}  # (scale of the view, agreement)

    def save(self) -> None:
        """Keep what was learnt of the original for the next call (``analysis.py``), once a look for its text
        started ahead is done (its error, if any, is its measure's to say)."""
        if self._text_ahead is not None:
            with contextlib.suppress(Exception):
                self._text_ahead.result()
        self.analysis.save()

    @functools.cached_property
    def bounds(self) -> P.Bounds | None:
        """The tight box around what differs from a uniform border, and its colour (None: no uniform border)."""
        if self.analysis.bounds is None:
            found = P.content_bounds(self.decoded.rgb)
            self.analysis.bounds, self.analysis.changed = (found if found is not None else False), True
        return self.analysis.bounds or None

    @functools.cached_property
    def crop(self) -> P.Bounds | None:
        """The uniform border's inner box, with a margin, and colour (None: no border worth cutting)."""
        return P.content_box(self.decoded.rgb, self.bounds)

    # ------------------------------------------------------------------------------------------------- pixels
    def original_view(self, size: tuple[int, int]) -> PIL.Image.Image:
        if size not in self._views:
            self._views[size] = P.resized(self.decoded.rgb, size)
        return self._views[size]

    def pixels(self, box: Box, size: tuple[int, int]) -> PIL.Image.Image:
        """The output's pixels (alpha kept): cropped to ``box``, resized to ``size``."""
        source = self.decoded.pixels if box is None else self.decoded.pixels.crop(box)
        return P.resized(source, size)

    def rendered(self, box: Box, size: tuple[int, int], fmt: str) -> PIL.Image.Image:
        """What the output file, written as ``fmt`` (a Pillow format), decodes to (RGB over white): lossy formats
        are encoded and decoded back, so the measures see the compression too."""
        key = (box, size, fmt)
        if key not in self._renders:
            if len(self._renders) >= KEPT_RENDERS:  # the oldest goes: a search measures a rendition, then moves on
                del self._renders[next(iter(self._renders))]
            pixels = self.pixels(box, size)
            if fmt == "PNG":
                self._renders[key] = pixels if pixels.mode == "RGB" else P.over_white(pixels)
            else:
                self._renders[key] = P.decode_bytes(P.encode(pixels, fmt))
        return self._renders[key]

    def scale(self, box: Box, rendition: C.Rendition) -> float:
        """How much of the (cropped) original's resolution the model sees of ``rendition``."""
        base = box[2] - box[0] if box else self.width
        return rendition.view.width / base

    # ---------------------------------------------------------------------------------------- ssim and recog
    def ssim(self, original: PIL.Image.Image, seen: PIL.Image.Image) -> tuple[float | None, str | None]:
        """SSIM of ``seen`` (a rendition laid over the original as the model sees it) against ``original``.
        Identical pixels are 1.0 at any size; different images under 11 px a side cannot be measured."""
        if min(original.size) < SSIM_WINDOW_PX:
            if np.array_equal(np.asarray(original), np.asarray(seen)):
                return 1.0, None
            return None, (
                f"cannot be measured: the view is {original.width}x{original.height}, under SSIM's "
                f"{SSIM_WINDOW_PX}-px window"
            )
        return self._ssim_reference(original).against(seen), None

    def _ssim_reference(self, original: PIL.Image.Image) -> P.SsimReference:
        """SSIM's share of ``original``: kept for a view of the original (the last one asked: a model's search
        measures each rung against one view), made for the call alone for anything else (a slice's part)."""
        if original is not self._views.get(original.size):
            return P.SsimReference(original, kept=False)
        if self._ssim_kept is None or self._ssim_kept[0] is not original:
            self._ssim_kept = None  # the last one goes first: two views at once would hold both
            self._ssim_kept = (original, P.SsimReference(original))
        return self._ssim_kept[1]

    def recog(self, key: Any, original: PIL.Image.Image, seen: PIL.Image.Image) -> tuple[float | None, str | None]:
        """The recog bar's similarity of ``seen`` to ``original`` (``recognition.py``), and why it misses the bar
        whatever its value where the classifier's top class is not the original's (``class_changed``); the network's
        look at the original is kept under ``key``."""
        from mmtok.budgets.shrink import recognition as R

        if np.array_equal(np.asarray(original), np.asarray(seen)):
            return 1.0, None
        size = R.eval_size(*original.size)
        if key not in self._looks:
            self._looks[key] = self._kept_look(key, original, size)
        look = R.look(seen, size)
        return R.similarity(self._looks[key], look), class_changed(self._looks[key], look)

    def _kept_look(self, key: Any, original: PIL.Image.Image, size: tuple[int, int]) -> Any:
        """The network's look at the original's view ``key`` (``("view", size)``: kept between calls)."""
        from mmtok.budgets.shrink import recognition as R

        name = f"{key[1][0]}x{key[1][1]}" if key[0] == "view" else None
        if name is not None and name in self.analysis.looks:
            return R.Look(*self.analysis.looks[name])
        look = R.look(original, size)
        if name is not None:
            self.analysis.looks[name], self.analysis.changed = (look.features, look.probabilities), True
        return look

    # ---------------------------------------------------------------------------------------------------- ocr
    @functools.cached_property
    def lines(self) -> list[O.Line]:
        """Where the original's lines of text are (found once, read only when a measure needs them)."""
        if self.analysis.lines is None:
            found = self._detected()
            self.analysis.lines = np.array([line.corners for line in found], np.float32).reshape(-1, 4, 2)
            self.analysis.changed = True
        return [O.Line(corners) for corners in self.analysis.lines]

    def _detected(self) -> list[O.Line]:
        """The original's lines as the detector finds them: where a uniform border takes a tenth of the image or more
        (a page's white margins), inside it, with ``DETECT_MARGIN_PX`` of it around the content, since no text is
        in a uniform colour (a document page's search took 0.06-0.09 s there where the whole page took 0.54-0.66
        s, the same lines found). In a photo (``looks_like_photo``), whose search runs beside this look
        (``text_found_ahead``), the detector's bands are half as large, so that the two together stay under the
        memory one of them took (a photo's lines are the same whether or not its search ran beside). The path
        before issue 39 searches the whole image."""
        rgb, bounds = self.decoded.rgb, None if self.reference else self.bounds
        most = O.BESIDE_DETECT_PIXELS if not self.reference and self.looks_like_photo else O.MAX_DETECT_PIXELS
        if bounds is not None:
            (left, top, right, bottom), _ = bounds
            m = DETECT_MARGIN_PX
            box = (max(0, left - m), max(0, top - m), min(self.width, right + m), min(self.height, bottom + m))
            if (box[2] - box[0]) * (box[3] - box[1]) <= INSIDE_BORDER * self.width * self.height:
                return [O.Line(line.moved(box[0], box[1])) for line in O.detect(rgb.crop(box), most=most)]
        return O.detect(rgb, banded=not self.reference, most=most)

    @functools.cached_property
    def _bgr(self) -> np.ndarray:
        """The original as the recogniser reads it, made once: the original's lines are read a few at a time."""
        return O._bgr(self.decoded.rgb)

    def truth(self, indices: list[int]) -> list[str | None]:
        """The original's readings of lines ``indices`` (None: read with a score under ``MIN_SCORE``, not text)."""
        known = self.analysis.truth
        missing = [i for i in indices if i not in known]
        if missing:
            readings = O.recognise(self._bgr, [self.lines[i].corners for i in missing])
            known.update(zip(missing, readings, strict=True))
            self.analysis.changed = True
        return [known[i][0] if known[i][1] >= O.MIN_SCORE else None for i in indices]

    @functools.cached_property
    def truth_text(self) -> str:
        """The original's text, line by line in reading order."""
        return "\n".join(t for t in self.truth(list(range(len(self.lines)))) if t)

    def truth_within(self, region: tuple[int, int, int, int]) -> str:
        """The original's text in ``region``: its lines that lie wholly inside it, in reading order."""
        inside = [i for i, line in enumerate(self.lines) if _holds(region, line.corners)]
        return "\n".join(t for t in self.truth(inside) if t)

    @property
    def text_found(self) -> bool:
        """The original's lines read with a score >= ``MIN_SCORE`` hold ``MIN_TEXT_CHARS`` characters or more (the
        tallest are read first; the path before issue 39: any one such line). A stray character a photo's texture
        is read as (a "6" at 0.85) is not text to keep: held to it, every smaller rendition reads 0.000. Where the
        look was started ahead (:meth:`look_ahead`), its answer, waited for."""
        if self._text_ahead is not None:
            return self._text_ahead.result()
        return self._text_found_now

    @functools.cached_property
    def _text_found_now(self) -> bool:
        by_height = sorted(range(len(self.lines)), key=lambda i: -self.lines[i].height)
        if self.reference:
            return any(self.truth([i])[0] for i in by_height)
        chars = 0
        for i in by_height:
            chars += len("".join((self.truth([i])[0] or "").split()))
            if chars >= MIN_TEXT_CHARS:
                return True
        return False

    def look_ahead(self) -> None:
        """Look for the original's text on the reading thread (``_reader``) from now on, while the calling thread
        prices the model and builds its ladder: the lines found and, where there is text, every line read (what a
        search asks first: its prediction and the OCR bar's truth). :attr:`text_found` waits for it. Measured while
        this was written on the hook (a 2-core machine): the detector started 0.1 s earlier, as soon as RapidOCR
        was built, and the page's lines were read while the price data was. Not where the original's lines are
        known (a kept analysis) or for the path before issue 39."""
        if not self.reference and self.analysis.lines is None:
            self.text_found_ahead()

    def _look(self) -> bool:
        found = self._text_found_now
        if found:
            _ = self.text_lines  # every line read now, on this thread
        return found

    @property
    def text_unlooked(self) -> bool:
        """Whether the original's text is still being looked for (not found earlier in this call or a kept one)."""
        if "_text_found_now" in self.__dict__:
            return False
        if self._text_ahead is not None:
            return not self._text_ahead.done()
        return self.analysis.lines is None

    def text_found_ahead(self) -> Future[bool]:
        """:attr:`text_found`, looked for on the reading thread (``_reader``), once."""
        if self._text_ahead is None:
            self._text_ahead = _reader().submit(self._look)
        return self._text_ahead

    @functools.cached_property
    def looks_like_photo(self) -> bool:
        """Whether the image looks like a photo: a 64x64 thumbnail holds ``PHOTO_COLOURS`` colours or more (16 levels
        a channel). Screenshots, diagrams and pages are a few flat colours and their text's edges (3-34 in the
        benchmarks' 218 of them), photos many (171-380 for the samples and the speed bench's photos, one with a
        wide sky among them). It decides what runs beside the look for text (``LadderSearch``) and the size of the
        look's detector bands (``_detected``), the same for an image whichever runs."""
        import PIL.Image

        small = np.asarray(self.decoded.rgb.resize((64, 64), PIL.Image.Resampling.NEAREST)) // 16
        colours = small[..., 0].astype(np.int32) * 256 + small[..., 1] * 16 + small[..., 2]
        return len(np.unique(colours)) >= PHOTO_COLOURS

    @functools.cached_property
    def text_lines(self) -> list[tuple[float, int]]:
        """(height in px, characters) of each line of the original read as text."""
        readings = self.truth(list(range(len(self.lines))))
        return [(ln.height, len("".join(t.split()))) for ln, t in zip(self.lines, readings, strict=True) if t]

    @functools.cached_property
    def text_px(self) -> float:
        """The height of the original's text, by its characters: half of them are in lines at least this tall."""
        lines = sorted(self.text_lines)
        half, seen = sum(chars for _, chars in lines) / 2, 0
        for height, chars in reversed(lines):
            seen += chars
            if seen >= half:
                return height
        return 0.0

    def legible(self, scale: float) -> bool:
        """Whether the original's text is predicted to be read in a view at ``scale``: its height (``text_px``)
        there is at least ``LEGIBLE_LINE_PX`` (a prediction only: what is chosen is read)."""
        return self.text_px * scale >= LEGIBLE_LINE_PX

    @property
    def median_line_px(self) -> float:
        """The median height of the lines the detector found in the original (0 where it found none)."""
        heights = sorted(line.height for line in self.lines)
        return heights[len(heights) // 2] if heights else 0.0

    def read_part(self, region: tuple[int, int, int, int], size: tuple[int, int], fmt: str) -> float | None:
        """OCR agreement of the original's ``region`` written at ``size`` as ``fmt`` (a slice's piece, seen whole)
        with the original's lines wholly inside it; None where none is."""
        key = ("part", region, size, fmt)
        if key not in self._readings:
            truth = self.truth_within(region)
            reading = O.read(self.rendered(region, size, fmt), banded=not self.reference) if truth else ""
            self._readings[key] = O.agreement(truth, reading) if truth else None
        return self._readings[key]

    def ocr(self, box: Box, rendition: C.Rendition, fmt: str, bar: Bar) -> tuple[float | None, str | None]:
        """OCR agreement of the rendition (written as ``fmt``, read at the model's view of it) with the original's
        text; None with the reason where the original has no text to keep."""
        if not self.text_found:
            return None, NO_TEXT
        key = (box, rendition.size, rendition.view.size, fmt)
        if key not in self._readings:
            ahead = self._ahead.pop(key, None)
            if ahead is not None:
                reading = ahead.result()
            else:
                image = P.resized(self.rendered(box, rendition.size, fmt), rendition.view.size)
                reading = O.read(image, banded=not self.reference)
            self._readings[key] = O.agreement(self.truth_text, reading)
            self._ocr_outcomes.setdefault((box, fmt), []).append((self.scale(box, rendition), self._readings[key]))
        return self._readings[key], None

    def read_ahead(self, box: Box, rendition: C.Rendition, fmt: str) -> None:
        """Start reading ``rendition`` for the OCR bar on a thread of its own (``_reader``) while SSIM and the recog
        network measure it on this one: where the original has text, the rungs a search measures nearly always meet
        the cheap bars, and reading is most of a measure. :meth:`ocr` takes the reading; :meth:`settle` waits for
        one no bar asked for (a cheap bar missed first) and drops it, so that what is known is what the measures
        in order found, as without this. The path before issue 39 reads in turn."""
        key = (box, rendition.size, rendition.view.size, fmt)
        if self.reference or key in self._readings or key in self._ahead or not self.text_found:
            return
        image = self.rendered(box, rendition.size, fmt)
        self._ahead[key] = _reader().submit(lambda: O.read(P.resized(image, rendition.view.size)))

    def settle(self) -> None:
        """Wait for the readings started ahead that no measure took, and drop them (their errors with them)."""
        while self._ahead:
            _, ahead = self._ahead.popitem()
            with contextlib.suppress(Exception):  # a reading no bar asked for decides nothing
                ahead.result()

    def known_failure(self, box: Box, rendition: C.Rendition, bar: Bar, fmt: str) -> str | None:
        """Why ``rendition`` is known to miss the OCR bar without reading it: a reading at a larger or equal scale
        (for any model writing ``fmt``) already missed it, or (at bars of ``GEOMETRY_BAR`` and over) the original's
        lines would be under ``MIN_READ_LINE_PX`` tall in its view. None: not known (read it). Only failures are
        inferred; a rendition that is chosen has always been read."""
        if (box, rendition.size, rendition.view.size, fmt) in self._readings or not self.text_found:
            return None
        scale = self.scale(box, rendition)
        for s, value in self._ocr_outcomes.get((box, fmt), []):
            if s >= scale - 1e-9 and not bar.met(value):
                return f"not read: ocr {value:.3f} at a larger scale ({s:.2f}x of the original) already missed the bar"
        line_px = self.median_line_px * scale
        if bar.value >= GEOMETRY_BAR and line_px < MIN_READ_LINE_PX:
            return (
                f"not read: the original's lines ({self.median_line_px:.0f} px) would be {line_px:.1f} px tall in "
                f"this view, under the {MIN_READ_LINE_PX:g} px OCR reads at this bar"
            )
        return None

    def smallest_passing_scale(self, box: Box, bar: Bar, fmt: str) -> float | None:
        """The smallest scale at which any model's rendition in ``fmt`` met ``bar``: where the next search starts."""
        passed = [s for s, v in self._ocr_outcomes.get((box, fmt), []) if bar.met(v)]
        return min(passed, default=None)


@functools.cache
def _reader() -> ThreadPoolExecutor:
    """The thread a rendition is read on beside the cheap measures (``ImageJob.read_ahead``), and the original's text
    looked for while a model is priced or a photo's search runs (``ImageJob.text_found_ahead``): one, as the
    readings ahead start only once the text is found."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="mmtok-read-ahead")


def class_changed(original: Any, seen: Any) -> str | None:
    """Why a rendition misses the recog bar whatever its similarity: the classifier's top class of it is not the
    original's (None: the same class). At recog>=0.91 alone, the shrink benchmark's renditions kept the top class
    for only 76.5% (gpt-5.4) and 77.8% (Claude) of its photos, some at a similarity of 0.99
    (``eval/results/bench_shrink.txt`` before this condition)."""
    if seen.top1 == original.top1:
        return None
    return f"{CLASS_CHANGED} (ImageNet class {original.top1} -> {seen.top1})"


def _holds(region: tuple[int, int, int, int], corners: np.ndarray) -> bool:
    """``corners`` lie wholly inside ``region`` (left, top, right, bottom)."""
    return bool(
        corners[:, 0].min() >= region[0]
        and corners[:, 1].min() >= region[1]
        and corners[:, 0].max() <= region[2]
        and corners[:, 1].max() <= region[3]
    )
