"""Pixels for shrinking: decoding as displayed, uniform borders, resizing, encoding, and the two image measures.

Decoding applies EXIF orientation (the output is upright, at the displayed size), keeps alpha where the file has it
(outputs stay in a format that carries it), and takes the first frame of an animated GIF. Measures compare what the
model sees: the original at the model's view, and the rendition at its own view, scaled back onto the original's
view (crops pasted back onto the border colour), so that what a cut loses is what is scored.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mmtok.errors import MediaError

if TYPE_CHECKING:
    import PIL.Image

BORDER_TOLERANCE = 12  # per channel, 0-255: a border pixel this close to the border colour is still border
JPEG_QUALITY = 90
WEBP_QUALITY = 90
SSIM_PROTOCOL = "SSIM of luma in [-1, 1] (torchmetrics' definition: Gaussian 11 / 1.5), at the model's view"

# input format -> output format (Pillow name, suffix), where the model's provider takes it (see ``output_format``)
OUTPUT_FORMATS = {
    "jpeg": ("JPEG", ".jpg"),
    "webp": ("WEBP", ".webp"),
    "png": ("PNG", ".png"),
    "gif": ("PNG", ".png"),
    "bmp": ("PNG", ".png"),
    "tiff": ("PNG", ".png"),
    "avif": ("WEBP", ".webp"),  # lossy photos that may hold alpha, as WebP can; providers take neither AVIF nor
    "heif": ("WEBP", ".webp"),  # (but Gemini) HEIF, and all but xAI take WebP (budgets/formats.toml)
}
EXACT_FORMATS = frozenset({"png", "gif", "bmp", "tiff"})  # formats whose pixels are stored exactly
WRITERS = {"jpeg": ("JPEG", ".jpg"), "png": ("PNG", ".png"), "webp": ("WEBP", ".webp")}  # mmtok name -> writer


@dataclass
class Decoded:
    """An image as displayed: ``pixels`` in its own mode (RGB, or RGBA when it has alpha), ``rgb`` composited over
    white (what the measures read), and notes on what decoding did."""

    pixels: PIL.Image.Image
    rgb: PIL.Image.Image
    source_format: str
    notes: list[str]
    warnings: list[str]
    frames: int = 1  # in the file (only the first is kept)
    exact: bool = False  # the file's pixels are stored exactly (PNG, GIF, BMP, TIFF, lossless WebP)

    @property
    def size(self) -> tuple[int, int]:
        return self.pixels.size

    @property
    def has_alpha(self) -> bool:
        return self.pixels.mode == "RGBA"

    def output_format(self, taken: frozenset[str] | None = None) -> tuple[str, str]:
        """(Pillow format, suffix) to write this image as, for a provider that takes ``taken`` (None: unknown)."""
        return output_format(self.source_format, self.has_alpha, taken, self.exact)

    def format_taken(self, taken: frozenset[str] | None) -> bool:
        return taken is None or self.source_format in taken


def output_format(
    source_format: str, has_alpha: bool, taken: frozenset[str] | None, exact: bool = False
) -> tuple[str, str]:
    """The source's own kind of format (``OUTPUT_FORMATS``) when the provider takes it or nothing is known; else,
    among what it takes, JPEG for a lossy source without alpha, PNG (then WebP, JPEG) for the others (alpha, or
    ``exact`` pixels: a lossless WebP)."""
    preferred = OUTPUT_FORMATS.get(source_format, WRITERS["png"])
    if taken is None or written_name(preferred[1]) in taken:
        return preferred
    lossy = preferred[0] != "PNG" and not has_alpha and not exact
    for name in ("jpeg", "png", "webp") if lossy else ("png", "webp", "jpeg"):
        if name in taken:
            return WRITERS[name]
    return preferred  # a provider that takes none of them: the quote's format warning says so


def written_name(suffix: str) -> str:
    """The mmtok format name of a written suffix: ``.jpg`` -> ``jpeg``."""
    return {".jpg": "jpeg", ".webp": "webp", ".png": "png"}[suffix]


def decode(path: object, source_format: str) -> Decoded:
    """Decode ``path`` upright, first frame only."""
    import PIL.Image
    import PIL.ImageOps

    from mmtok.headers import webp_is_lossless
    from mmtok.media.types import pillow_formats

    notes: list[str] = []
    warnings: list[str] = []
    formats = pillow_formats(source_format)  # outside the try: a missing HEIF decoder names its extra (exit 2)
    try:
        with PIL.Image.open(path, formats=formats) as im:
            frames = getattr(im, "n_frames", 1)
            if frames > 1:
                im.seek(0)
                warnings.append(f"animated {source_format.upper()} with {frames} frames: only the first frame is kept")
            orientation = int(im.getexif().get(0x0112, 1) or 1)
            im.load()
            upright = PIL.ImageOps.exif_transpose(im)
            alpha = upright.mode in ("RGBA", "LA", "PA") or (upright.mode == "P" and "transparency" in upright.info)
            pixels = upright.convert("RGBA" if alpha else "RGB")
    except MediaError:
        raise
    except Exception as e:  # Pillow raises many types on bad data
        raise MediaError(path, f"cannot decode {source_format} image: {e}") from None
    if orientation != 1:
        notes.append(f"EXIF orientation {orientation} applied (output upright)")
    if pixels.mode == "RGBA":
        if pixels.getchannel("A").getextrema() == (255, 255):
            pixels = pixels.convert("RGB")  # an alpha channel that is opaque everywhere carries nothing
        else:
            notes.append("alpha kept (measured over white)")
    rgb = pixels if pixels.mode == "RGB" else over_white(pixels)
    exact = source_format in EXACT_FORMATS or (source_format == "webp" and webp_is_lossless(path))  # type: ignore[arg-type]
    return Decoded(pixels, rgb, source_format, notes, warnings, frames, exact)


def over_white(image: PIL.Image.Image) -> PIL.Image.Image:
    import PIL.Image

    background = PIL.Image.new("RGBA", image.size, (255, 255, 255, 255))
    return PIL.Image.alpha_composite(background, image).convert("RGB")


Bounds = tuple[tuple[int, int, int, int], tuple[int, int, int]]  # (left, top, right, bottom), the border colour


def content_bounds(rgb: PIL.Image.Image) -> Bounds | None:
    """The tight box around what differs from a uniform border (left, top, right, bottom) and the border colour;
    None when the corners agree on no colour or the image is that colour throughout."""
    array = np.asarray(rgb)  # (H, W, 3) uint8
    height, width = array.shape[:2]
    corners = [
        tuple(int(c) for c in array[y, x])
        for y, x in ((0, 0), (0, width - 1), (height - 1, 0), (height - 1, width - 1))
    ]
    colour = max(corners, key=corners.count)
    if corners.count(colour) < 2:
        return None
    low = np.array([max(0, c - BORDER_TOLERANCE) for c in colour], np.uint8)
    high = np.array([min(255, c + BORDER_TOLERANCE) for c in colour], np.uint8)
    differs = ((array < low) | (array > high)).any(axis=2)  # (H, W): outside the border colour's tolerance
    rows, cols = np.flatnonzero(differs.any(axis=1)), np.flatnonzero(differs.any(axis=0))
    if not len(rows):
        return None  # a uniform image: nothing to keep or to cut
    return (int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1), colour  # type: ignore[return-value]


def content_box(rgb: PIL.Image.Image, bounds: Bounds | None = None, margin_px: int | None = None) -> Bounds | None:
    """The box inside a uniform border with a margin (default 1% of the long side, at least 2 px) and the border
    colour; None when the image has no uniform border worth cutting (under 2% of the area). ``bounds``: the image's
    :func:`content_bounds`, when already found."""
    bounds = bounds if bounds is not None else content_bounds(rgb)
    if bounds is None:
        return None
    (left, top, right, bottom), colour = bounds
    width, height = rgb.size
    margin = max(2, round(0.01 * max(width, height))) if margin_px is None else margin_px
    box = (max(0, left - margin), max(0, top - margin), min(width, right + margin), min(height, bottom + margin))
    if (box[2] - box[0]) * (box[3] - box[1]) > 0.98 * width * height:
        return None
    return box, colour


def resized(image: PIL.Image.Image, size: tuple[int, int]) -> PIL.Image.Image:
    """Lanczos resampling (antialiased when shrinking); the image itself when the size is unchanged."""
    import PIL.Image

    if image.size == tuple(size):
        return image
    return image.resize(size, PIL.Image.Resampling.LANCZOS, reducing_gap=3.0)


def encode(image: PIL.Image.Image, pillow_format: str) -> bytes:
    """The image as file bytes, with no metadata: JPEG and WebP at quality 90, PNG at zlib level 6."""
    buffer = io.BytesIO()
    if pillow_format == "JPEG":
        image.convert("RGB").save(buffer, "JPEG", quality=JPEG_QUALITY, optimize=True)
    elif pillow_format == "WEBP":
        image.save(buffer, "WEBP", quality=WEBP_QUALITY, method=4)
    else:
        image.save(buffer, "PNG", compress_level=6)
    return buffer.getvalue()


def encode_smallest(image: PIL.Image.Image, pillow_format: str, webp: bool = True) -> tuple[bytes, str]:
    """(bytes, suffix) for ``--lossless``: with ``pillow_format`` PNG, the smaller of a PNG and a lossless WebP (both
    exact; ``webp=False`` for a provider that does not take WebP); JPEG and WebP at quality 90 (lossy)."""
    if pillow_format != "PNG":
        return encode(image, pillow_format), ".jpg" if pillow_format == "JPEG" else ".webp"
    png = encode(image, "PNG")  # lossless WebP is smaller on nearly every image; PNG level 9 is slow
    if not webp:
        return png, ".png"
    lossless_webp = encode_lossless_webp(image)
    return (png, ".png") if len(png) <= len(lossless_webp) else (lossless_webp, ".webp")


def encode_lossless_webp(image: PIL.Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "WEBP", lossless=True, quality=80, method=4)
    return buffer.getvalue()


def decode_bytes(data: bytes) -> PIL.Image.Image:
    """Encoded bytes back to RGB over white, as the measures read them."""
    import PIL.Image

    with PIL.Image.open(io.BytesIO(data)) as im:
        im.load()
        return (over_white(im.convert("RGBA")) if im.mode in ("RGBA", "LA", "PA", "P") else im.convert("RGB")).copy()


def strip_jpeg_metadata(data: bytes) -> bytes | None:
    """The JPEG with its EXIF/XMP (APP1), IPTC (APP13), other application segments and comments removed, the
    compressed image data untouched; JFIF (APP0), ICC profiles (APP2) and Adobe colour (APP14) are kept. None when
    the stream is not a plain sequence of marker segments."""
    if data[:2] != b"\xff\xd8":
        return None
    out = [data[:2]]
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xDA:  # start of scan: the rest is image data
            out.append(data[pos:])
            return b"".join(out)
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        segment = data[pos : pos + 2 + length]
        if not (0xE1 <= marker <= 0xEF and marker not in (0xE2, 0xEE)) and marker != 0xFE:
            out.append(segment)
        pos += 2 + length
    return None


# ------------------------------------------------------------------------------------------------------ measures
def to_view(
    rendition: PIL.Image.Image,
    rendition_view: tuple[int, int],
    original_view: tuple[int, int],
    original_size: tuple[int, int],
    box: tuple[int, int, int, int] | None,
    border: tuple[int, int, int] | None,
) -> PIL.Image.Image:
    """The rendition as the model sees it, laid over the original's view: resized to its own view, scaled onto the
    region it covers in the original's view, pasted onto the border colour when it was cropped."""
    import PIL.Image

    seen = resized(rendition, rendition_view)
    if box is None:
        return seen.resize(original_view, PIL.Image.Resampling.BICUBIC) if seen.size != original_view else seen
    sx, sy = original_view[0] / original_size[0], original_view[1] / original_size[1]
    left, top = round(box[0] * sx), round(box[1] * sy)
    right, bottom = max(left + 1, round(box[2] * sx)), max(top + 1, round(box[3] * sy))
    canvas = PIL.Image.new("RGB", original_view, border or (255, 255, 255))
    canvas.paste(seen.resize((right - left, bottom - top), PIL.Image.Resampling.BICUBIC), (left, top))
    return canvas


def ssim(reference: PIL.Image.Image, other: PIL.Image.Image) -> float:
    """SSIM of the luma (ITU-R 601 Y, in [-1, 1]) of two images of one size: torchmetrics' definition (data range
    2, Gaussian window 11, sigma 1.5, K1 0.01, K2 0.03, reflected edges, the mean of the map) with the Gaussian
    as two 1-D passes (no scipy or torch in the core), so a 4-megapixel view takes a fraction of a second."""
    return SsimReference(reference, kept=False).against(other)


_LUMA_OF_BYTE = np.arange(256, dtype=np.float32) / 127.5 - 1.0  # an L image's byte as SSIM's luma, in [-1, 1]


def ssim_map(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The SSIM of each pixel of two luma planes ``(H, W)`` (its mean is :func:`ssim`)."""
    return np.concatenate(list(SsimReference(x, kept=False).strips(y)))


SSIM_ROWS = 96  # rows of the SSIM map made at a time: a few MB of temporaries at any view size
SSIM_WINDOW, SSIM_SIGMA, SSIM_RANGE = 11, 1.5, 2.0


@functools.cache
def _gauss() -> np.ndarray:
    offsets = np.arange((1 - SSIM_WINDOW) / 2, (1 + SSIM_WINDOW) / 2, 1.0)
    gauss = np.exp(-((offsets / SSIM_SIGMA) ** 2) / 2)
    return (gauss / gauss.sum()).astype(np.float32)


class SsimReference:
    """The reference's half of SSIM: its luma reflected at its edges and, ``kept``, its local means and variances,
    made once. A search measures several renditions against one view of the original: against a kept reference
    each blurs three planes, not five (40% less work a measure, the same SSIM: tests/test_torch_free_measures.py),
    for two more planes of the view's size held (~30 MB at 3.6 MP). The map is made ``SSIM_ROWS`` rows at a time,
    each strip blurred from its rows and ``window // 2`` rows of context either side, so that it is the whole
    map's, exactly, in a fraction of the memory (a 3.6-MP view's five whole maps and their temporaries took
    ~140 MB).

    Only the map where the two differ is made (:meth:`against`): a pixel whose window holds the same luma in both
    is 1.0 exactly, so the map is made over the rectangle around the pixels that differ, widened by the window,
    and every pixel outside it counts 1.0. A cropped rendition laid over the original's view on its border colour
    differs only inside the crop: a page's 985x206 text block in a 1344x1900 view is a tenth of the map."""

    def __init__(self, image: PIL.Image.Image | np.ndarray, kept: bool = True) -> None:
        self.bytes = None if isinstance(image, np.ndarray) else np.asarray(image.convert("L"))
        luma = image if self.bytes is None else _LUMA_OF_BYTE[self.bytes]
        if min(luma.shape) < SSIM_WINDOW:
            raise ValueError(f"SSIM needs images at least {SSIM_WINDOW} px a side; got {luma.shape}")
        r = SSIM_WINDOW // 2
        self.padded = np.pad(luma, r, mode="reflect")  # torch's "reflect", scipy's "mirror"
        self.luma = self.padded[r:-r, r:-r]
        self.stats = None
        if kept:
            mu, var = np.empty_like(luma), np.empty_like(luma)
            for top, rows in self._strips(self.padded):
                mu[top : top + SSIM_ROWS], var[top : top + SSIM_ROWS] = self._stats(rows)
            self.stats = mu, var

    def _strips(self, padded: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
        r = SSIM_WINDOW // 2
        for top in range(0, padded.shape[0] - 2 * r, SSIM_ROWS):
            yield top, padded[top : top + SSIM_ROWS + 2 * r]  # the strip and its context

    @staticmethod
    def _stats(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The local means and variances of a strip with its context."""
        mu = _blur_valid(rows, _gauss())
        return mu, np.maximum(_blur_valid(rows * rows, _gauss()) - mu**2, 0.0)

    def against(self, other: PIL.Image.Image) -> float:
        """The mean SSIM of ``other`` (an image of the reference's size) against the reference; 1.0 where their
        luma is the same. The map is made where they differ (see the class)."""
        y = np.asarray(other.convert("L"))
        if self.bytes is None or y.shape != self.bytes.shape:
            raise ValueError(f"SSIM needs two images of one size; got {self.luma.shape}, {y.shape}")
        region = _changed_region(self.bytes, y, SSIM_WINDOW // 2)
        if region is None:
            return 1.0
        top, bottom, left, right = region
        made = sum(float(s.sum(dtype=np.float64)) for s in self._map(_LUMA_OF_BYTE[_reflected(y, region)], region))
        return (made + y.size - (bottom - top) * (right - left)) / y.size

    def strips(self, y: np.ndarray) -> Iterator[np.ndarray]:
        """The SSIM map of the luma plane ``y`` against the reference, ``SSIM_ROWS`` rows at a time."""
        if y.shape != self.luma.shape:
            raise ValueError(f"SSIM needs two images of one size; got {self.luma.shape}, {y.shape}")
        return self._map(np.pad(y, SSIM_WINDOW // 2, mode="reflect"), (0, y.shape[0], 0, y.shape[1]))

    def _map(self, padded: np.ndarray, region: tuple[int, int, int, int]) -> Iterator[np.ndarray]:
        """The SSIM map over ``region`` (top, bottom, left, right) of the reference, given the other's luma there
        with ``window // 2`` pixels of context each side (``padded``), ``SSIM_ROWS`` rows at a time."""
        c1, c2 = (0.01 * SSIM_RANGE) ** 2, (0.03 * SSIM_RANGE) ** 2
        top, bottom, left, right = region
        r = SSIM_WINDOW // 2
        mine = self.padded[top : bottom + 2 * r, left : right + 2 * r]
        for (row, sy), (_, sx) in zip(self._strips(padded), self._strips(mine), strict=True):
            if self.stats is None:
                mu_x, var_x = self._stats(sx)
            else:
                rows = slice(top + row, min(top + row + SSIM_ROWS, bottom))
                mu_x, var_x = (plane[rows, left:right] for plane in self.stats)
            mu_y, var_y = self._stats(sy)
            cov = _blur_valid(sx * sy, _gauss()) - mu_x * mu_y
            yield ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / ((mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2))


def _changed_region(a: np.ndarray, b: np.ndarray, r: int) -> tuple[int, int, int, int] | None:
    """The rectangle (top, bottom, left, right) of the SSIM map that two planes' differing pixels reach: around
    them, widened by ``r`` (the window's half) and kept inside the plane; None where they are the same."""
    differ = a != b
    rows, cols = np.flatnonzero(differ.any(axis=1)), np.flatnonzero(differ.any(axis=0))
    if not rows.size:
        return None
    height, width = a.shape
    return max(0, rows[0] - r), min(height, rows[-1] + 1 + r), max(0, cols[0] - r), min(width, cols[-1] + 1 + r)


def _reflected(plane: np.ndarray, region: tuple[int, int, int, int]) -> np.ndarray:
    """``plane``'s ``region`` (top, bottom, left, right) with ``SSIM_WINDOW // 2`` pixels of context each side,
    reflected at the plane's edges as ``np.pad(mode="reflect")`` would (the whole padded plane is never made)."""
    r = SSIM_WINDOW // 2
    top, bottom, left, right = region
    return plane[np.ix_(_reflect(np.arange(top - r, bottom + r), plane.shape[0]),
                        _reflect(np.arange(left - r, right + r), plane.shape[1]))]  # fmt: skip


def _reflect(index: np.ndarray, size: int) -> np.ndarray:
    """Indices reflected into [0, size) about its first and last (not repeated), as ``np.pad``'s "reflect"."""
    index = np.abs(index)
    return np.where(index >= size, 2 * (size - 1) - index, index)


def _blur_valid(plane: np.ndarray, gauss: np.ndarray) -> np.ndarray:
    """``plane`` (h + 2r, w + 2r) convolved with the separable kernel ``gauss`` along its width, then its height,
    where the kernel fits whole: (h, w). By OpenCV's separable filter where it is installed (the ``shrink`` extra
    brings it with RapidOCR): a 3.6-MP view's SSIM took 0.06 s there against 0.19 s in numpy, the same SSIM to
    1e-5 (tests/test_torch_free_measures.py); otherwise in numpy (:func:`_blur_valid_numpy`)."""
    cv2 = _cv2()
    if cv2 is None:
        return _blur_valid_numpy(plane, gauss)
    r = len(gauss) // 2
    out = cv2.sepFilter2D(plane, cv2.CV_32F, gauss, gauss, borderType=cv2.BORDER_CONSTANT)
    return out[r : out.shape[0] - r, r : out.shape[1] - r]  # the border OpenCV made up is cut away


@functools.cache
def _cv2() -> Any:
    """OpenCV, where it is installed (None: numpy blurs), on one thread: shrink runs its measures side by side already
    (a reading thread, the recogniser's threads, the detector's), and OpenCV's own pool on top of them took the cores
    they need. Measured while this was written (a 2-core machine): the first SSIM of a 5-MP photo's search, beside the
    look for its text, took 1.36 s with OpenCV's two threads and 0.70 s with one."""
    try:
        import cv2
    except ImportError:
        return None
    cv2.setNumThreads(1)
    return cv2


def _blur_valid_numpy(plane: np.ndarray, gauss: np.ndarray) -> np.ndarray:
    """:func:`_blur_valid` in numpy: each pass a sum of the kernel's shifted, weighted copies of the plane
    (contiguous slices, no windowed copy: a third faster than a matrix product over sliding windows, the same SSIM
    to 1e-7)."""
    k = len(gauss)
    height, width = plane.shape[0] - k + 1, plane.shape[1] - k + 1
    rows = plane[:, :width] * gauss[0]  # (h + 2r, w)
    for i in range(1, k):
        rows += plane[:, i : i + width] * gauss[i]
    out = rows[:height] * gauss[0]  # (h, w)
    for i in range(1, k):
        out += rows[i : i + height] * gauss[i]
    return out
