"""Offline OCR for the ``ocr`` bar: RapidOCR (PP-OCRv4 detection and recognition ONNX models inside the
``rapidocr-onnxruntime`` wheel, run by onnxruntime), and the character agreement of two readings.

Agreement is ``1 - Levenshtein(reference, reading) / len(reference)`` (clamped at 0) on the text with whitespace
removed: OCR engines disagree on spaces between words at different sizes long before the characters change, and a
model reading the image does not depend on them. Case and punctuation count. Lines are aligned two ways and the
better is kept (see :func:`agreement`). Where the original has no text to keep, the agreement is 1.0.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any

from mmtok.errors import EvalError

if TYPE_CHECKING:
    import PIL.Image

MIN_SCORE = 0.75  # lines read with less confidence are not counted (photos give stray 0.5-0.6 letters)
ENGINE = (
    "RapidOCR (rapidocr-onnxruntime, PP-OCRv4 det/rec, onnxruntime CPU; detection at the image's own size, never "
    "enlarged; lines with score >= 0.75)"
)
_lock = threading.Lock()


@functools.cache
def _engine() -> Any:
    try:
        from rapidocr_onnxruntime import RapidOCR
    except ImportError:
        raise EvalError("the ocr bar needs `pip install rapidocr-onnxruntime` (mmtok's eval extra)") from None
    # limit_type "max": the detector reads the pixels as given (shrunk to 2,000 px at most), instead of enlarging
    # every image to a 736-px short side, which would read text smaller than any model is shown.
    return RapidOCR(det_limit_type="max")


def read_text(image: PIL.Image.Image) -> str:
    """The text RapidOCR reads in an RGB image, lines top to bottom, joined by newlines."""
    import numpy as np

    array = np.asarray(image.convert("RGB"))[:, :, ::-1]  # RapidOCR takes OpenCV's BGR order
    with _lock:  # one engine per process; onnxruntime sessions use all cores already
        result, _ = _engine()(np.ascontiguousarray(array), use_cls=False)
    result = [line for line in result or [] if line[2] >= MIN_SCORE]
    if not result:
        return ""
    boxes = [(min(p[1] for p in box), min(p[0] for p in box), text) for box, text, _score in result]
    height = max(1.0, sorted(b - a for a, b in _heights(result))[len(result) // 2])
    boxes.sort(key=lambda b: (round(b[0] / height), b[1]))
    return "\n".join(text for _, _, text in boxes)


def _heights(result: list) -> list[tuple[float, float]]:
    return [(min(p[1] for p in box), max(p[1] for p in box)) for box, _text, _score in result]


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
