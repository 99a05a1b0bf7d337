"""The original's analysis, kept between calls: its uniform border, where its lines of text are, what each line
reads, and the recognition network's looks at its views.

Reading the original is the one step every measured answer needs (its text must be read once), and it does not
depend on the model or the bars. So it is kept in the user cache folder (``<cache>/shrink/analysis/``), named by
the SHA-256 of the file's bytes and of the settings that shape it (the OCR models, the detector's sizes, the
recognition network), and every later call on the same image starts from it: another model, other bars, the
hook's next read of a copy, an MCP call, a batch naming the image twice. A file whose bytes differ is another
image; a cache that cannot be read or written only costs time (the analysis is made again).

The file is JSON (never pickle): data read back as numbers and strings, checked for shape, and discarded whole
when anything in it is not what this module writes. It holds the text read from the image, as the shrunk copies
in the same folder hold its pixels.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

VERSION = 2  # 2: a page's lines searched inside its uniform border
MAX_FILE_BYTES = 8 * 1024 * 1024  # a page of 10,000 lines is ~2 MB; anything larger is not ours


@dataclass
class Analysis:
    """What is known of one original. ``bounds`` and ``lines`` are None until found; ``truth`` holds each line
    read so far (index -> (text, score)); ``looks`` the network's looks by view size (``"224x140"``)."""

    path: Path | None  # where it is kept (None: not kept)
    bounds: Any = None  # ((left, top, right, bottom), (r, g, b)) | False (no border) | None (not found yet)
    lines: np.ndarray | None = None  # (N, 4, 2) float32 corners
    truth: dict[int, tuple[str, float]] = field(default_factory=dict)
    looks: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # features, probabilities
    changed: bool = False

    def save(self) -> None:
        """Write what is known, atomically, when something was added (a failure only costs the next call time)."""
        if self.path is None or not self.changed:
            return
        from mmtok.files import write_atomic

        data = {
            "version": VERSION,
            "bounds": _bounds_out(self.bounds),
            "lines": None if self.lines is None else self.lines.astype(np.float32).round(2).tolist(),
            "truth": {str(i): [text, round(score, 5)] for i, (text, score) in sorted(self.truth.items())},
            "looks": {size: [_b64(f), _b64(p)] for size, (f, p) in self.looks.items()},
        }
        try:
            write_atomic(self.path, json.dumps(data, ensure_ascii=False).encode())
            self.changed = False
        except OSError:
            pass


def settings_key() -> str:
    """What shapes an analysis: the OCR models and the detector's sizes, and the recognition network."""
    from mmtok.budgets.shrink import ocr as O
    from mmtok.budgets.shrink import recognition as R

    parts = [
        VERSION,
        O.DETECTION_MODEL,
        O.RECOGNITION_MODEL,
        O.MAX_SIDE_PX,
        O.TILE_LINE_PX,
        O.TILE_SHRINK,
        O.TILE_OVERLAP_PX,
        O.MAX_DETECT_PIXELS,
        O.BESIDE_DETECT_PIXELS,
        O.BAND_OVERLAP_PX,
        O.VIEW_DETECT_PIXELS,
        O.TRAILING_BLANK,
        R.NETWORK,
    ]
    return json.dumps(parts)


def load(source: Path) -> Analysis:
    """The analysis kept for the image in ``source`` (by its bytes), or an empty one that will be kept there."""
    from mmtok.cache import cache_dir

    digest = hashlib.sha256(settings_key().encode())
    with open(source, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    path = cache_dir("shrink", "analysis") / f"{digest.hexdigest()[:40]}.json"
    try:
        if path.stat().st_size <= MAX_FILE_BYTES:
            return _parsed(path, json.loads(path.read_bytes()))
    except (OSError, ValueError, TypeError, KeyError, IndexError):
        pass  # missing, or not what this module writes: made again
    return Analysis(path)


def _parsed(path: Path, data: dict[str, Any]) -> Analysis:
    if data["version"] != VERSION:
        raise ValueError("another version")
    lines = None
    if data["lines"] is not None:
        lines = np.asarray(data["lines"], np.float32).reshape(-1, 4, 2)
        if not np.isfinite(lines).all():
            raise ValueError("not finite")
    truth = {}
    for key, (text, score) in data["truth"].items():
        index = int(key)
        if not isinstance(text, str) or lines is None or not 0 <= index < len(lines):
            raise ValueError("a reading of no line")
        truth[index] = (text, float(score))
    looks = {str(size): (_array(f, 1280), _array(p, 1000)) for size, (f, p) in data["looks"].items()}
    return Analysis(path, _bounds_in(data["bounds"]), lines, truth, looks)


def _bounds_out(bounds: Any) -> Any:
    if bounds is None:
        return None
    if bounds is False:
        return False
    box, colour = bounds
    return [list(map(int, box)), list(map(int, colour))]


def _bounds_in(value: Any) -> Any:
    if value is None or value is False:
        return value
    box, colour = value
    if len(box) != 4 or len(colour) != 3:
        raise ValueError("not a box")
    return tuple(int(v) for v in box), tuple(int(v) for v in colour)


def _b64(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array, np.float32).tobytes()).decode("ascii")


def _array(text: str, size: int) -> np.ndarray:
    array = np.frombuffer(base64.b64decode(text, validate=True), np.float32)
    if array.shape != (size,) or not np.isfinite(array).all():
        raise ValueError("not a look")
    return array.copy()


def enabled() -> bool:
    """Whether analyses are kept (``MMTOK_SHRINK_ANALYSIS=0`` turns it off, as the benchmark does for cold runs)."""
    return os.environ.get("MMTOK_SHRINK_ANALYSIS", "1") != "0"
