"""Offline OCR for the ``ocr`` bar: RapidOCR (PP-OCRv4 detection and recognition ONNX models inside the
``rapidocr-onnxruntime`` wheel, run by onnxruntime), and the character agreement of two readings.

The original is read once per input: its lines are found (:func:`detect`; a tall page in tiles, at its own
resolution) and each is recognised alone (:func:`recognise`), lazily, so that "is there any text" and "how tall is it"
cost a few lines, not the page. A rendition is read as a model would have to read it, from its own pixels at the
model's view: the detector finds its lines there and each is recognised (:func:`read`). Reusing the original's boxes
instead would save the detection at the view, a third of a reading at most, but it reads lines the detector misses
or cuts into at that size, and passed smaller renditions: tried on 4 of the benchmark's pages while this was
written, it changed 11 of their 16 decisions. The time goes to recognition, which is cut by recognising each line
alone on one thread (a batch pads every line to its widest; two threads contend on a busy 2-core machine); the
benchmark (``python -m mmtok.eval.bench.shrink``) measures it against the earlier path side by side.

Agreement is ``1 - Levenshtein(reference, reading) / len(reference)`` (clamped at 0) on the text with whitespace
removed: OCR engines disagree on spaces between words at different sizes long before the characters change, and a
model reading the image does not depend on them. Case and punctuation count. Lines are aligned two ways and the
better is kept (see :func:`agreement`). Where the original has no line read with a score >= ``MIN_SCORE``, the bar
does not apply: "no text found" is the result.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import PIL.Image

MIN_SCORE = 0.75  # lines read with less confidence are not counted (photos give stray 0.5-0.6 letters)
MAX_SIDE_PX = 2000  # RapidOCR detects on images shrunk to this long side (its max_side_len)
TILE_LINE_PX = 12  # lines shorter than this once RapidOCR has shrunk the image: searched again in tiles
TILE_SHRINK = 2.0  # a tall or wide image RapidOCR would shrink more than this is searched in tiles
TILE_OVERLAP_PX = 200  # tiles overlap by this: a line up to this tall is whole in one tile
MAX_DETECT_PIXELS = 1_000_000  # one detector pass at most: its feature maps take ~185 bytes a pixel
BESIDE_DETECT_PIXELS = 500_000  # one pass at most in a photo, whose search runs beside its look (job.py)
BAND_OVERLAP_PX = 128  # bands of rows overlap by this (in the image the detector reads: lines are shorter)
# A rendition's view is read whole up to this: bands move a few boxes, and a reading near the bar by 0.005 (a 768x844
# view of a diagram: 0.984 whole, 0.979 in bands), so a view is read as the path before issue 39 read it wherever
# memory allows (a 1.6-MP pass added 450 MB to a process of 260; Claude reading a dense diagram's 1-1.7 MP views
# peaked 640-700 MB with 1-MP bands, 500 MB with these)
VIEW_DETECT_PIXELS = 700_000
MIN_LINE_PX = 2  # a box under this height or width is not read (nothing to cut out)
TRAILING_BLANK = 1.2  # each line is recognised with this much room: its own width and 20% of blank after it
DETECTOR = (
    "RapidOCR PP-OCRv4 detection (DB, box threshold 0.5) at the image's own size (up to 2,000 px a side; larger "
    "images shrunk to that, or searched in 2,000-px tiles where that leaves lines under 12 px or shrinks a tall or "
    "wide image over 2x), lines kept where recognition scores >= 0.75"
)
DETECTION_MODEL = "ch_PP-OCRv4_det_infer.onnx"  # in the rapidocr-onnxruntime wheel's models folder
RECOGNITION_MODEL = "ch_PP-OCRv4_rec_infer.onnx"
_lock = threading.Lock()


@dataclass(frozen=True)
class Line:
    """One line of text the detector found: its corners (clockwise from top-left, in the read image's pixels)."""

    corners: np.ndarray  # (4, 2) float32

    @property
    def height(self) -> float:
        return float(np.linalg.norm(self.corners[0] - self.corners[3]))

    def moved(self, dx: float, dy: float, sx: float = 1.0, sy: float = 1.0) -> np.ndarray:
        """The corners shifted by (dx, dy), then scaled by (sx, sy)."""
        return ((self.corners + np.array([dx, dy], np.float32)) * np.array([sx, sy], np.float32)).astype(np.float32)


_loading = threading.Lock()  # one thread builds the engine; another asking for it meanwhile waits for that one


def ocr_engine(reference: bool = False) -> Any:
    """RapidOCR's engine (``_engine``), built once even when ``loading.py``'s thread and the search ask at once."""
    with _loading:
        return _engine(reference)


@functools.cache
def _engine(reference: bool = False) -> Any:
    """RapidOCR's engine, each model loaded once (``_sessions_of_our_own``). Its detector runs on every core; its
    recogniser reads one line per call on one thread, several lines at once on :func:`_pool`'s threads (work too
    small to share within a call: two intra-op threads contending on a busy 2-core machine took 2.6 s for 16 lines
    where one took 0.9 s). Neither spins waiting for work (onnxruntime's default), which on a busy machine takes the
    cores other work needs. ``reference``: RapidOCR's own settings, as the document path reads pages with them."""
    from mmtok.extras import require

    RapidOCR = require("rapidocr_onnxruntime", "the ocr bar (RapidOCR)").RapidOCR
    import cv2

    cv2.setNumThreads(1)  # as pictures._cv2: the measures run side by side already
    # limit_type "max": the detector reads the pixels as given (shrunk to 2,000 px at most), instead of enlarging
    # every image to a 736-px short side, which would read text smaller than any model is shown.
    if reference:
        return RapidOCR(det_limit_type="max")
    with _sessions_of_our_own():
        engine = RapidOCR(det_limit_type="max")
    _arena_handed_back(engine.text_det.infer.session)
    made = engine.text_det.get_preprocess
    engine.text_det.get_preprocess = lambda longest: _TablePreProcess(made(longest))
    return engine


class _TablePreProcess:
    """RapidOCR's detector input made by a lookup table: the same numbers, a tenth of the time. Its own
    ``DetPreProcess`` normalises each pixel in float64 (``(x / 255 - mean) / std``, the mean an array of doubles)
    and copies the result three times (0.031 s for a 2000x480 band, against 0.003 s here); a pixel's value depends
    only on its byte and channel, so the table of the 256 bytes it gives each channel, looked up with OpenCV, is
    its output exactly (tests/test_shrink_loading.py)."""

    def __init__(self, own: Any) -> None:
        self.own = own

    def __call__(self, image: np.ndarray) -> np.ndarray | None:
        import cv2

        resized = self.own.resize(image)  # to multiples of 32, as RapidOCR does
        if resized is None:
            return None
        table = _normalising_table(self.own)
        return np.ascontiguousarray(cv2.LUT(resized, table).transpose(2, 0, 1))[None]


def _normalising_table(own: Any) -> np.ndarray:
    """(1, 256, 3) float32: what ``own.normalize`` gives each byte in each channel, cast as RapidOCR casts it."""
    key = (tuple(own.mean.tolist()), tuple(own.std.tolist()), own.scale)
    if key not in _tables:
        every_byte = np.repeat(np.arange(256, dtype=np.uint8)[:, None, None], 3, axis=2)  # (256, 1, 3)
        _tables[key] = np.asarray(own.normalize(every_byte), np.float32).reshape(1, 256, 3)
    return _tables[key]


_tables: dict[tuple, np.ndarray] = {}


def _threads() -> int:
    """The cores this process may run on (its affinity), at most 8."""
    import os

    try:
        return max(1, min(8, len(os.sched_getaffinity(0))))
    except AttributeError:  # macOS, Windows
        return max(1, min(8, os.cpu_count() or 1))


@contextlib.contextmanager
def _sessions_of_our_own() -> Iterator[None]:
    """While RapidOCR builds its sessions (each model loaded once), their options are ours: the detector on every
    core, the recogniser on one thread (RapidOCR's own per-model thread arguments do not reach its sessions: its
    global -1 overwrites them), no thread spinning while it waits for work, and for the detector a memory arena
    (``_arena_handed_back``). The angle classifier, which these reads never use (``use_cls=False``), is built only
    if called (``_BuiltWhenCalled``)."""
    from rapidocr_onnxruntime import main
    from rapidocr_onnxruntime.utils.infer_engine import OrtInferSession

    made = OrtInferSession.__dict__["_init_sess_opts"]
    classifier = main.TextClassifier

    def options(config: dict[str, Any]) -> Any:
        chosen = made.__func__(config)
        detector = str(config.get("model_path", "")).endswith(DETECTION_MODEL)
        chosen.intra_op_num_threads = _threads() if detector else 1
        chosen.inter_op_num_threads = 1
        chosen.add_session_config_entry("session.intra_op.allow_spinning", "0")
        chosen.enable_cpu_mem_arena = detector  # see _arena_handed_back
        return chosen

    OrtInferSession._init_sess_opts = staticmethod(options)
    main.TextClassifier = lambda config: _BuiltWhenCalled(classifier, config)
    try:
        yield
    finally:
        OrtInferSession._init_sess_opts = made
        main.TextClassifier = classifier


class _BuiltWhenCalled:
    """A part of RapidOCR made on its first call: its angle classifier, whose session would otherwise be built in
    every process that reads (0.016 s) and never run."""

    def __init__(self, make: Any, config: dict[str, Any]) -> None:
        self._make, self._config, self._part = make, config, None

    def __call__(self, *args: Any) -> Any:
        if self._part is None:
            self._part = self._make(self._config)
        return self._part(*args)


def _arena_handed_back(session: Any) -> None:
    """Run an onnxruntime session out of its memory arena, handed back to the system at the end of each run
    (``memory.enable_memory_arena_shrinkage``). Without an arena each tensor of a run is an allocation of its own,
    which glibc maps afresh and the kernel zeroes page by page; with one, a run's tensors reuse the arena's memory,
    and between runs the process holds about what it would without (~10 MB more). Measured while this was written:
    two detector passes of ~0.5 MP peaked at 168 MB where they took 356 MB without; the hook on 3 of the speed
    bench's inputs (5 runs each, a busy 2-core machine) took 0.1-0.4 s less, peaked 60 MB lower, and gave the same
    answers. An arena kept between runs was faster still, but held its largest run's memory. The recogniser has
    none: two of its runs at once on a long line's input (a 1080x9000 page's lines, ~3,500 px wide once 48 px tall)
    grew a shared arena by powers of two, and ``--slice`` of that page peaked at 720-840 MB where it took 519-525
    without."""
    import onnxruntime

    options = onnxruntime.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    session.run = functools.partial(session.run, run_options=options)


@functools.cache
def _libc() -> Any:
    """glibc, where this process has it (None elsewhere: macOS, musl, Windows)."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def _release() -> None:
    """Hand the memory a detector pass or a page of readings just freed back to the system: glibc keeps freed blocks
    for the process, and the detector's feature maps are hundreds of MB, made and freed each pass (without this, a
    screenshot shrunk for three models peaked ~150 MB higher)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


M_ARENA_MAX = -8  # mallopt's parameter, from glibc's malloc.h


def share_malloc_arenas(arenas: int = 2) -> None:
    """Have the threads this process starts from now on share ``arenas`` glibc malloc arenas: a shrink runs a reading
    thread, the recogniser's threads and the detector's side by side, and with an arena each, memory one thread freed
    was held for it while another allocated afresh. Measured while this was written (the hook on the speed bench's
    screen_04 and diagram_02, 3 runs each, a 2-core machine): peaks 569 and 545 MB, 549 and 527 with two arenas, the
    same times. A process setting (the hook's, whose process is its own), not a library default. Nothing where glibc
    is not the C library."""
    libc = _libc()
    if libc is not None:
        libc.mallopt(M_ARENA_MAX, arenas)


@functools.cache
def _pool() -> Any:
    """Threads that recognise lines side by side (onnxruntime and OpenCV let go of the GIL while they work)."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(max_workers=_threads(), thread_name_prefix="mmtok-ocr")


def _bgr(image: PIL.Image.Image) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(image.convert("RGB"))[:, :, ::-1])  # RapidOCR takes OpenCV's BGR order


def detect(image: PIL.Image.Image, banded: bool = True, most: int = MAX_DETECT_PIXELS) -> list[Line]:
    """The lines of text RapidOCR's detector finds in an RGB image (corners only, nothing read yet), in reading
    order. RapidOCR shrinks an image to 2,000 px on its long side to look for text: a tall or wide image (one side
    at least twice the other) it would shrink more than ``TILE_SHRINK`` times is searched in overlapping tiles at
    its own resolution instead (a full-page screenshot's text would be shrunk out of sight), and so is any image
    where the lines it finds are under ``TILE_LINE_PX`` once shrunk (a long view). A pass over ``most`` pixels is
    made in bands of rows (``_detect``); ``banded`` False: each pass whole, however large (the path before issue 39,
    kept for the benchmark's side-by-side)."""
    try:
        return _found(image, most if banded else None)
    finally:
        _release()


def _found(image: PIL.Image.Image, most: int | None) -> list[Line]:
    width, height = image.size
    shrunk = max(width, height) / MAX_SIDE_PX
    long_and_narrow = max(width, height) >= 2 * min(width, height) and shrunk > TILE_SHRINK
    if not long_and_narrow:
        lines = _in_reading_order(_detect(_bgr(image), most))
        if shrunk <= 1 or not lines or sorted(ln.height for ln in lines)[len(lines) // 2] / shrunk >= TILE_LINE_PX:
            return lines
    tiled: list[tuple[np.ndarray, float]] = []  # (corners, room: its centre's distance to its tile's cut edges)
    for (left, top, right, bottom), core in _tiles(width, height):
        for line in _detect(_bgr(image.crop((left, top, right, bottom))), most):
            corners = line.moved(left, top)
            cx, cy = corners.mean(axis=0)
            if core[0] <= cx < core[2] and core[1] <= cy < core[3]:  # a line in an overlap is counted once
                edges = (cx - left, cy - top, right - cx, bottom - cy)
                cut = (left > 0, top > 0, right < width, bottom < height)
                tiled.append((corners, min((e for e, c in zip(edges, cut, strict=True) if c), default=np.inf)))
    return _in_reading_order([Line(corners) for corners in _one_each(tiled)])


def _detect(array: np.ndarray, most: int | None = MAX_DETECT_PIXELS) -> list[Line]:
    """The lines RapidOCR's detector finds in a BGR array, which it reads shrunk to ``MAX_SIDE_PX`` on its long
    side; where that is over ``most`` pixels, band by band of rows (overlapping by ``BAND_OVERLAP_PX``, each line
    kept in the band its centre is closest to), so that one pass's feature maps stay bounded (they take ~185 bytes a
    pixel: a 2000x1250 pass peaked 460 MB over the process). Bands of 1 MP, not 0.5: a 2,000-px-wide band of 0.5 MP
    is 256 rows, half of them overlap, and the detector read twice the image (the speed bench's originals took 13%
    less CPU in 1-MP bands, screenshots 25%; the heaviest shrinks' peaks stayed under 520 MB)."""
    engine = ocr_engine()
    height, width = array.shape[:2]
    ratio = min(1.0, MAX_SIDE_PX / max(height, width))
    if most is None or round(height * ratio) * round(width * ratio) <= most:
        with _lock:  # one engine per process; its detector uses every core already
            boxes, _ = engine(array, use_cls=False, use_rec=False)
        return [Line(np.asarray(box, np.float32)) for box in boxes or []]
    from rapidocr_onnxruntime.utils.process_img import reduce_max_side

    resized, ratio_h, ratio_w = reduce_max_side(array, MAX_SIDE_PX) if ratio < 1 else (array, 1.0, 1.0)
    end = resized.shape[0]
    found: list[tuple[np.ndarray, float]] = []  # (corners, room: its centre's distance to its band's cut edges)
    for top, bottom, core_top, core_bottom in _bands(end, most // resized.shape[1]):
        with _lock:
            boxes, _ = engine.text_det(np.ascontiguousarray(resized[top:bottom]))
        for box in boxes if boxes is not None else ():
            corners = np.asarray(box, np.float32) + np.array([0, top], np.float32)
            centre = float(corners[:, 1].mean())
            if core_top <= centre < core_bottom:
                room = min(centre - top if top > 0 else np.inf, bottom - centre if bottom < end else np.inf)
                found.append((corners * np.array([ratio_w, ratio_h], np.float32), room))
    return [Line(corners) for corners in _one_each(found)]


def _bands(height: int, most: int) -> list[tuple[int, int, float, float]]:
    """Bands of rows (``_spans``) covering ``height``, as few as bands of at most ``most`` rows take, each as short as
    that count allows (multiples of 32, as the detector reads them): a 1,250-row image in bands of at most 480 rows is
    4 bands of 416, not 3 of 480 and a fourth of 480 that is mostly overlap (1,664 rows read, not 1,920)."""
    rows = max(2 * BAND_OVERLAP_PX, most // 32 * 32)
    count = len(_spans(height, rows, BAND_OVERLAP_PX))
    even = -(-(height + (count - 1) * BAND_OVERLAP_PX) // count)  # ceil
    return _spans(height, max(2 * BAND_OVERLAP_PX, -(-even // 32) * 32), BAND_OVERLAP_PX)


def _one_each(found: list[tuple[np.ndarray, float]]) -> list[np.ndarray]:
    """The boxes ``found`` (corners, room) less those that are a line found twice: a line across the cut between two
    bands (or tiles) is found by both, each placing its centre on its own side of the cut when their boxes differ by
    a pixel (a screenshot's line was read twice, and no view could then reach 0.98). Of two boxes sharing more than
    half of the smaller one's area, the one with more room around it in its band (more context seen) is kept."""
    kept: list[np.ndarray] = []
    lows, highs = np.zeros((len(found), 2), np.float32), np.zeros((len(found), 2), np.float32)
    for corners, _ in sorted(found, key=lambda f: -f[1]):
        low, high = corners.min(axis=0), corners.max(axis=0)
        n = len(kept)
        shared = np.clip(np.minimum(highs[:n], high) - np.maximum(lows[:n], low), 0, None).prod(axis=1)
        smaller = np.minimum((highs[:n] - lows[:n]).prod(axis=1), (high - low).prod())
        if n and (shared > 0.5 * smaller).any():
            continue
        lows[n], highs[n] = low, high
        kept.append(corners)
    return kept


def _spans(length: int, most: int, overlap: int) -> list[tuple[int, int, float, float]]:
    """(start, end, core start, core end) of pieces of at most ``most`` covering ``length``, overlapping by
    ``overlap`` or more; the middle of each overlap splits two cores, so every point is in exactly one core."""
    if length <= most:
        return [(0, length, 0.0, float(length))]
    starts = [*range(0, length - most, most - overlap), length - most]
    ends = [start + most for start in starts]
    cuts = [0.0, *((ends[k] + starts[k + 1]) / 2 for k in range(len(starts) - 1)), float(length)]
    return [(starts[k], ends[k], cuts[k], cuts[k + 1]) for k in range(len(starts))]


def _tiles(width: int, height: int) -> list[tuple[tuple[int, int, int, int], tuple[float, float, float, float]]]:
    """Tiles of at most ``MAX_SIDE_PX`` a side overlapping by ``TILE_OVERLAP_PX`` or more, each with its core: the
    part of it closer to it than to its neighbours, so that every point of the image is in exactly one core."""
    return [
        ((x0, y0, x1, y1), (cx0, cy0, cx1, cy1))
        for y0, y1, cy0, cy1 in _spans(height, MAX_SIDE_PX, TILE_OVERLAP_PX)
        for x0, x1, cx0, cx1 in _spans(width, MAX_SIDE_PX, TILE_OVERLAP_PX)
    ]


def _in_reading_order(lines: list[Line]) -> list[Line]:
    """Top to bottom in rows of about one median line height, left to right within a row."""
    if not lines:
        return []
    height = max(1.0, sorted(line.height for line in lines)[len(lines) // 2])
    return sorted(lines, key=lambda line: (round(float(line.corners[:, 1].min()) / height), line.corners[0, 0]))


def recognise(image: PIL.Image.Image | np.ndarray, boxes: Sequence[np.ndarray]) -> list[tuple[str, float]]:
    """(text, score) of each box (corners in ``image``'s pixels) cut out of ``image`` and recognised alone, with
    ``TRAILING_BLANK`` of blank after it: a batch pads every line to its widest, costing the short ones time, but a
    line that fills the recogniser's whole input is read worse (a 593x19 line: 0.84 alone, 0.94 with 20% blank).
    Lines are recognised side by side on :func:`_pool`'s threads, widest first; each reading is the same as alone.
    ``image`` may be :func:`_bgr`'s array of it, made once by a caller that reads a few lines at a time."""
    if not boxes:
        return []
    engine = ocr_engine()
    array = image if isinstance(image, np.ndarray) else _bgr(image)
    widest_first = sorted(range(len(boxes)), key=lambda i: -_columns(boxes[i]))
    readings = _pool().map(lambda i: _recognise_line(engine, array, boxes[i]), widest_first)
    read = dict(zip(widest_first, readings, strict=True))
    _release()
    return [read[i] for i in range(len(boxes))]


def _columns(corners: np.ndarray) -> float:
    """How long a line takes to recognise, relatively: its width over its height (its columns once 48 px tall).
    The widest lines start first, so that the threads finish together instead of one waiting on a long last line."""
    tall = float(np.linalg.norm(corners[0] - corners[3]))
    return float(np.linalg.norm(corners[0] - corners[1])) / max(tall, 1.0)


def _recognise_line(engine: Any, array: np.ndarray, corners: np.ndarray) -> tuple[str, float]:
    recogniser = engine.text_rec
    width_px = recogniser.rec_image_shape[2]  # 320: the narrowest input, as RapidOCR pads
    height_px = recogniser.rec_image_shape[1]  # 48
    clipped = np.clip(corners, 0, [array.shape[1] - 1, array.shape[0] - 1]).astype(np.float32)
    tall = float(np.linalg.norm(clipped[0] - clipped[3]))
    wide = float(np.linalg.norm(clipped[0] - clipped[1]))
    if tall < MIN_LINE_PX or wide < MIN_LINE_PX:
        return "", 0.0
    (crop,) = engine.get_crop_img_list(array, [clipped])
    ratio = crop.shape[1] / crop.shape[0]
    padded = max(ratio * TRAILING_BLANK, width_px / height_px)
    batch = recogniser.resize_norm_img(crop, padded)[None].astype(np.float32)  # (1, 3, 48, W)
    predictions = recogniser.session(batch)[0]  # (1, W / 8, classes)
    ((text, score),) = recogniser.postprocess_op(predictions, False, wh_ratio_list=[ratio], max_wh_ratio=padded)
    return text, float(score)


def read(image: PIL.Image.Image, banded: bool = True) -> str:
    """The text in an RGB image as the ``ocr`` bar reads a rendition: the lines the detector finds at this size (in
    bands only over ``VIEW_DETECT_PIXELS``), each recognised alone, those with a score >= ``MIN_SCORE``, top to
    bottom."""
    lines = detect(image, banded, VIEW_DETECT_PIXELS)
    readings = recognise(image, [line.corners for line in lines])
    return "\n".join(text for text, score in readings if score >= MIN_SCORE)


def read_text(image: PIL.Image.Image) -> str:
    """The text RapidOCR reads in an RGB image, lines top to bottom (detection and recognition of the whole image,
    in batches of 6 lines, with RapidOCR's own thread settings): how a PDF page's text layer is checked against what
    its page shows (``document.py``)."""
    engine = ocr_engine(reference=True)
    with _lock:
        result, _ = engine(_bgr(image), use_cls=False)
    kept = [(Line(np.asarray(box, np.float32)), text) for box, text, score in result or [] if score >= MIN_SCORE]
    order = {id(line): text for line, text in kept}
    return "\n".join(order[id(line)] for line in _in_reading_order([line for line, _ in kept]))


def agreement(reference: str, reading: str) -> float:
    """Character agreement of ``reading`` with ``reference`` (1.0: the same characters), whitespace ignored.

    Two alignments of the same readings are scored and the better one is kept, so that neither the order in which
    lines are listed nor how a line is cut into boxes counts as a misread: the texts joined in reading order, and
    each reference line matched to its closest unmatched line of the reading (longest first)."""
    from rapidfuzz.distance import Levenshtein

    ref = "".join(reference.split())
    if not ref:
        return 1.0
    joined = 1.0 - Levenshtein.distance(ref, "".join(reading.split())) / len(ref)
    pool = ["".join(line.split()) for line in reading.splitlines() if line.strip()]
    errors = 0
    for line in sorted(("".join(r.split()) for r in reference.splitlines() if r.strip()), key=len, reverse=True):
        if not pool:
            errors += len(line)
            continue
        distances = [Levenshtein.distance(line, other) for other in pool]
        best = min(range(len(pool)), key=distances.__getitem__)
        errors += min(distances[best], len(line))
        pool.pop(best)
    return max(0.0, joined, 1.0 - errors / len(ref))
