"""Image size and EXIF orientation read straight from file headers, without decoding pixels.

Pricing and inspecting a photo folder only needs each image's displayed size. Pillow's lazy ``Image.open`` builds
a full plugin object per file (~0.6 ms); walking the header ourselves costs a few microseconds beyond the read of
the first 4 KiB, which is the physical limit. Formats: PNG, JPEG, WebP, GIF, BMP, TIFF, and HEIF/HEIC and AVIF from
their boxes (:mod:`mmtok.headers_heif`: the core prices an iPhone photo without a HEIF decoder). Anything the fast
path does not understand raises :class:`HeaderError`, and the caller falls back to Pillow.

Orientation follows Pillow's ``ImageOps.exif_transpose``: EXIF tag 0x0112 of IFD0, values 5–8 swap width and height.
Known limit: a PNG ``eXIf`` chunk placed after the image data is not seen (Pillow-written files put it before).

A header says nothing about whether the rest of the file arrived, so :func:`check_image_end` looks at the end of a
JPEG, PNG or WebP file, still without decoding: JPEG scan data must be followed by an end-of-image marker (FF D9),
a PNG must hold its IEND chunk, a WebP file must be as long as its RIFF header says, and a HEIF or AVIF file must
reach the end of its items' data (``iloc``). A cut-off download or copy fails there, at the cost of one read of the
file's last 4 KiB.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mmtok.files import UnreadableFile, open_checked

if TYPE_CHECKING:
    import mmap


class RandomAccess(Protocol):
    """Bytes read by offset without holding them all: a base64 string in a request body, a ranged HTTP read."""

    def pread(self, n: int, offset: int) -> bytes: ...


Readable = int | RandomAccess  # an open file descriptor, or any random-access reader


def pread(source: Readable, n: int, offset: int) -> bytes:
    """``n`` bytes at ``offset`` of a file descriptor or a :class:`RandomAccess` reader (fewer at the end)."""
    return os.pread(source, n, offset) if isinstance(source, int) else source.pread(n, offset)


HEAD_BYTES = 4096
TAIL_BYTES = 4096  # the end marker is looked for here first; past it, the file is searched from the image data on
_SEARCH_CHUNK = 1 << 20
_MAX_EXIF_BYTES = 65536
_MAX_CHUNK_WALK = 64
_ORIENTATION_TAG = 0x0112
_SWAPPING_ORIENTATIONS = frozenset({5, 6, 7, 8})
# JPEG start-of-frame markers (baseline, extended, progressive, lossless, arithmetic variants); not DHT/JPG/DAC.
_JPEG_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_JPEG_STANDALONE = frozenset({0x01, 0xD0, 0xD1, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8})
_JPEG_EOI = b"\xff\xd9"
_JPEG_MAX_SEGMENTS = 4096  # segments walked before the first scan
_PNG_DATA_START = 8 + 8 + 13 + 4  # signature and IHDR chunk
_PNG_IEND = b"IEND\xaeB`\x82"  # the chunk type and its (constant) CRC


class HeaderError(ValueError):
    """The header is truncated, malformed, or uses a variant the fast path does not parse."""


class TruncatedError(ValueError):
    """The file stops before the end its own structure declares: a cut-off copy or download."""


@dataclass(frozen=True, slots=True)
class ImageHeader:
    format: str  # "png" | "jpeg" | "webp" | "gif" | "bmp" | "tiff" | "heif" | "avif"
    stored_width: int  # as stored in the file, before orientation
    stored_height: int
    orientation: int  # EXIF orientation 1..8 (1 when absent)
    # JPEG: the end of the frame header (check_image_end walks on from there); HEIF/AVIF: the end of the items' data
    body_offset: int | None = None
    min_bytes: int = 0  # the fewest bytes any file with this header holds (``min_jpeg_bytes``, ``min_png_bytes``)

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) as displayed, i.e. after EXIF orientation."""
        if self.orientation in _SWAPPING_ORIENTATIONS:
            return self.stored_height, self.stored_width
        return self.stored_width, self.stored_height


def image_format(head: bytes) -> str | None:
    """The image format named by the file's magic bytes, or None."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:2] == b"BM" and len(head) >= 26:
        return "bmp"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    if head[4:8] == b"ftyp":
        return _heif_family(head)
    return None


# ISO base media files (an "ftyp" box first) whose brands say image: AVIF (AV1) or HEIF/HEIC (HEVC, as iPhones and
# cameras write). MP4, MOV and M4A share the box but not these major brands. The major brand decides; the generic
# image brands (mif1, mif2) defer to the compatible brands for the codec. HEIF image sequences (msf1, hevc, hevx)
# and files whose major brand is a video one are video tracks: FFmpeg reads them.
_AVIF_BRANDS = frozenset({b"avif", b"avis"})
_HEIF_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis"})
_GENERIC_IMAGE_BRANDS = frozenset({b"mif1", b"mif2"})


def _heif_family(head: bytes) -> str | None:
    """The image format ("avif" or "heif") an ftyp box's brands name, or None (a video or audio container)."""
    major = head[8:12]
    if major in _AVIF_BRANDS:
        return "avif"
    if major in _HEIF_BRANDS:
        return "heif"
    if major not in _GENERIC_IMAGE_BRANDS:
        return None  # a video or audio brand (isom, mp42, qt, M4A, msf1, ...), whatever else it lists
    size = int.from_bytes(head[:4], "big")
    compatible = {head[i : i + 4] for i in range(16, min(size, len(head)) - 3, 4)}
    return "avif" if compatible & _AVIF_BRANDS else "heif"


class _Source:
    """Random access over a file descriptor (or a :class:`RandomAccess` reader) whose first bytes are in memory."""

    __slots__ = ("fd", "head")

    def __init__(self, fd: Readable | None, head: bytes) -> None:
        self.fd = fd
        self.head = head

    def at(self, offset: int, n: int) -> bytes:
        end = offset + n
        if offset < 0 or n < 0:
            raise HeaderError("negative offset")
        if end <= len(self.head):
            return self.head[offset:end]
        if self.fd is None:
            raise HeaderError("truncated header")
        data = pread(self.fd, n, offset)
        if len(data) < n:
            raise HeaderError("truncated header")
        return data


def read_image_header(fd: Readable | None, head: bytes, fmt: str) -> ImageHeader:
    """Parse the header of an image of format ``fmt`` whose first bytes are ``head``.

    ``fd`` is the open file descriptor (or a :class:`RandomAccess` reader) for reads beyond ``head`` (None when
    ``head`` is the whole file).
    """
    src = _Source(fd, head)
    try:
        if fmt == "png":
            return _png(src)
        if fmt == "jpeg":
            return _jpeg(src)
        if fmt == "webp":
            return _webp(src)
        if fmt == "gif":
            w, h = struct.unpack("<HH", src.at(6, 4))
            return _checked("gif", w, h, 1)
        if fmt == "bmp":
            return _bmp(src)
        if fmt == "tiff":
            tags = _tiff_tags(src, 0)
            return _checked("tiff", tags.get(256, 0), tags.get(257, 0), tags.get(_ORIENTATION_TAG, 1))
        if fmt in ("heif", "avif"):
            from mmtok.headers_heif import read_heif_header

            return read_heif_header(src, fmt)
    except (struct.error, IndexError) as e:
        raise HeaderError(f"malformed {fmt} header: {e}") from None
    raise HeaderError(f"unknown image format {fmt!r}")


def _checked(
    fmt: str, width: int, height: int, orientation: int, body_offset: int | None = None, min_bytes: int = 0
) -> ImageHeader:
    if width <= 0 or height <= 0:
        raise HeaderError(f"{fmt} header gives a zero or negative size {width}x{height}")
    return ImageHeader(fmt, width, height, orientation, body_offset, min_bytes)


# The most deflate can compress: 258 bytes per match of at least 2 bits (zlib's FAQ: 1032:1).
DEFLATE_MAX_RATIO = 1032
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # by colour type: grey, RGB, palette, grey+alpha, RGBA
# Huffman-coded frames, by what their least coded unit is: an 8x8 DCT block (baseline, extended, progressive, and
# the hierarchical differential sequential and progressive SOF5/SOF6), or one sample (lossless SOF3 and its
# differential SOF7). Each unit costs at least one bit; arithmetic-coded frames (SOF9-15) can spend less.
_JPEG_HUFFMAN_DCT = frozenset({0xC0, 0xC1, 0xC2, 0xC5, 0xC6})
_JPEG_HUFFMAN_LOSSLESS = frozenset({0xC3, 0xC7})


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def min_png_bytes(width: int, height: int, bit_depth: int, colour_type: int) -> int:
    """The fewest bytes a PNG of this size can hold: its filtered rows (a filter byte and the packed samples of
    each row; interlacing only adds rows) deflated at deflate's largest ratio."""
    row = 1 + (width * bit_depth * _PNG_CHANNELS.get(colour_type, 1) + 7) // 8
    return row * height // DEFLATE_MAX_RATIO


def min_jpeg_bytes(width: int, height: int, sampling: list[tuple[int, int]], unit_px: int = 8) -> int:
    """The fewest bytes of Huffman-coded data a JPEG of this size can hold: every coded unit of a component (an 8x8
    block, ``unit_px`` 8; a sample in lossless JPEG, ``unit_px`` 1) is coded with at least one Huffman code of at
    least one bit (progressive files too: their first DC scan codes every block). Counted for the component with
    the fewest units. ``sampling``: (H, V) per component."""
    h_max = max(h for h, _ in sampling)
    v_max = max(v for _, v in sampling)

    def blocks(h: int, v: int) -> int:  # the component's size, rounded up, in units, rounded up
        return _ceil(_ceil(width * h, h_max), unit_px) * _ceil(_ceil(height * v, v_max), unit_px)

    return min(blocks(h, v) for h, v in sampling) // 8


def _png(src: _Source) -> ImageHeader:
    length, ctype = struct.unpack(">I4s", src.at(8, 8))
    if ctype != b"IHDR" or length != 13:
        raise HeaderError("PNG does not start with an IHDR chunk")
    width, height, bit_depth, colour_type = struct.unpack(">IIBB", src.at(16, 10))
    orientation = 1
    pos = 8 + 8 + 13 + 4
    for _ in range(_MAX_CHUNK_WALK):
        try:
            length, ctype = struct.unpack(">I4s", src.at(pos, 8))
        except HeaderError:
            break  # a truncated file still has a valid IHDR; decoding will report the rest
        if ctype in (b"IDAT", b"IEND"):
            break
        if ctype == b"eXIf":
            orientation = _exif_orientation(src.at(pos + 8, min(length, _MAX_EXIF_BYTES)))
            break
        pos += 12 + length
    return _checked("png", width, height, orientation, min_bytes=min_png_bytes(width, height, bit_depth, colour_type))


def _jpeg(src: _Source) -> ImageHeader:
    pos = 2
    orientation = 0  # 0: no APP1 Exif seen yet
    while True:
        if src.at(pos, 1) != b"\xff":
            raise HeaderError(f"JPEG marker expected at byte {pos}")
        marker = src.at(pos + 1, 1)[0]
        while marker == 0xFF:  # fill bytes
            pos += 1
            marker = src.at(pos + 1, 1)[0]
        pos += 2
        if marker in _JPEG_STANDALONE:
            continue
        if marker in (0xD9, 0xDA):
            raise HeaderError("JPEG has no frame header before its scan data")
        (seglen,) = struct.unpack(">H", src.at(pos, 2))
        if seglen < 2:
            raise HeaderError(f"JPEG segment of length {seglen} at byte {pos}")
        if marker in _JPEG_SOF:
            _precision, height, width = struct.unpack(">BHH", src.at(pos + 2, 5))
            if height == 0:
                raise HeaderError("JPEG height is defined by a DNL marker")
            return _checked("jpeg", width, height, orientation or 1, pos + seglen, _jpeg_min_bytes(src, marker, pos))
        if marker == 0xE1 and orientation == 0:
            segment = src.at(pos + 2, min(seglen - 2, _MAX_EXIF_BYTES))
            if segment.startswith(b"Exif\x00\x00"):
                orientation = _exif_orientation(segment[6:])
        pos += seglen


def _jpeg_min_bytes(src: _Source, marker: int, pos: int) -> int:
    """:func:`min_jpeg_bytes` for a Huffman-coded frame header at ``pos`` (DCT or lossless, hierarchical frames too);
    0 for arithmetic coding (it can spend less than a bit on a unit) and for sampling factors outside 1-4."""
    if marker not in _JPEG_HUFFMAN_DCT | _JPEG_HUFFMAN_LOSSLESS:
        return 0
    _precision, height, width, count = struct.unpack(">BHHB", src.at(pos + 2, 6))
    table = src.at(pos + 8, 3 * count)
    sampling = [(table[3 * i + 1] >> 4, table[3 * i + 1] & 15) for i in range(count)]
    if not sampling or any(not (1 <= h <= 4 and 1 <= v <= 4) for h, v in sampling):
        return 0
    return min_jpeg_bytes(width, height, sampling, 1 if marker in _JPEG_HUFFMAN_LOSSLESS else 8)


def _webp(src: _Source) -> ImageHeader:
    fourcc, size = struct.unpack("<4sI", src.at(12, 8))
    data = src.at(20, 10)
    if fourcc == b"VP8 ":
        if data[3:6] != b"\x9d\x01\x2a":
            raise HeaderError("WebP VP8 frame without its start code")
        w, h = struct.unpack("<HH", data[6:10])
        return _checked("webp", w & 0x3FFF, h & 0x3FFF, 1)
    if fourcc == b"VP8L":
        if data[0] != 0x2F:
            raise HeaderError("WebP VP8L frame without its signature")
        (bits,) = struct.unpack("<I", data[1:5])
        return _checked("webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1, 1)
    if fourcc == b"VP8X":
        flags = data[0]
        w = int.from_bytes(data[4:7], "little") + 1
        h = int.from_bytes(data[7:10], "little") + 1
        orientation = 1
        if flags & 0x08:  # an EXIF chunk follows somewhere after the image data
            pos = 20 + size + (size & 1)
            for _ in range(_MAX_CHUNK_WALK):
                try:
                    ctype, csize = struct.unpack("<4sI", src.at(pos, 8))
                except HeaderError:
                    break
                if ctype == b"EXIF":
                    blob = src.at(pos + 8, min(csize, _MAX_EXIF_BYTES))
                    orientation = _exif_orientation(blob[6:] if blob.startswith(b"Exif\x00\x00") else blob)
                    break
                pos += 8 + csize + (csize & 1)
        return _checked("webp", w, h, orientation)
    raise HeaderError(f"WebP with unknown first chunk {fourcc!r}")


def _bmp(src: _Source) -> ImageHeader:
    (dib_size,) = struct.unpack("<I", src.at(14, 4))
    if dib_size == 12:
        w, h = struct.unpack("<HH", src.at(18, 4))
    elif dib_size >= 16:
        w, h = struct.unpack("<ii", src.at(18, 8))
        h = abs(h)  # negative height: top-down rows
    else:
        raise HeaderError(f"BMP with a {dib_size}-byte info header")
    return _checked("bmp", w, h, 1)


class _Bytes(_Source):
    def __init__(self, data: bytes) -> None:
        super().__init__(None, data)


def _exif_orientation(tiff_blob: bytes) -> int:
    """Orientation from an EXIF blob (a TIFF structure); 1 when absent or unreadable, as Pillow does."""
    try:
        return _tiff_tags(_Bytes(tiff_blob), 0).get(_ORIENTATION_TAG, 1)
    except (HeaderError, struct.error):
        return 1


def _tiff_tags(src: _Source, base: int) -> dict[int, int]:
    """Width (256), height (257) and orientation (274) from IFD0 of a TIFF structure starting at ``base``."""
    order = src.at(base, 2)
    if order == b"II":
        endian = "<"
    elif order == b"MM":
        endian = ">"
    else:
        raise HeaderError("TIFF byte order mark missing")
    magic, ifd = struct.unpack(endian + "HI", src.at(base + 2, 6))
    if magic != 42:
        raise HeaderError("TIFF magic number missing")
    (count,) = struct.unpack(endian + "H", src.at(base + ifd, 2))
    entries = src.at(base + ifd + 2, 12 * count)
    tags: dict[int, int] = {}
    for i in range(count):
        tag, typ, _n = struct.unpack_from(endian + "HHI", entries, 12 * i)
        if tag in (256, 257, _ORIENTATION_TAG):
            if typ == 3:  # SHORT
                (tags[tag],) = struct.unpack_from(endian + "H", entries, 12 * i + 8)
            elif typ == 4:  # LONG
                (tags[tag],) = struct.unpack_from(endian + "I", entries, 12 * i + 8)
    return tags


# ------------------------------------------------------------------------------------------------ end of file
def check_image_end(fd: Readable | None, head: bytes, fmt: str, size: int, body_offset: int | None = None) -> None:
    """Raise :class:`TruncatedError` when a JPEG, PNG, WebP, HEIF or AVIF file of ``size`` bytes stops before its end.

    Reads only the last :data:`TAIL_BYTES` in the common case. Data appended after the end marker (a camera's
    trailer, a motion photo's video) is allowed: when the marker is not in the tail, the file is searched from its
    image data on, which is a full read only for files that turn out to be cut off. Other formats pass unchecked.
    ``body_offset`` is :attr:`ImageHeader.body_offset` when the header was parsed (it saves re-walking it; for HEIF
    and AVIF it is where the items' data ends, and the only thing checked).
    """
    if fmt in ("heif", "avif"):
        if body_offset is not None and size < body_offset:
            name = fmt.upper()
            raise TruncatedError(f"{name} item data runs to byte {body_offset:,}, but the file has {size:,} bytes")
        return
    if fd is None and size > len(head):
        return  # only part of the file is at hand: nothing can be said about its end
    if fmt == "webp":
        (riff,) = struct.unpack_from("<I", head, 4)
        if riff + 8 > size:
            raise TruncatedError(f"WebP RIFF header declares {riff + 8:,} bytes, but the file has {size:,}")
        return
    if fmt == "png":
        if size < _PNG_DATA_START + 12:
            raise TruncatedError(f"PNG ends after {size:,} bytes, before any image data")
        if not _contains(fd, head, _PNG_IEND, _PNG_DATA_START, size):
            raise TruncatedError(f"PNG has no IEND chunk: the file ({size:,} bytes) stops inside the image data")
    elif fmt == "jpeg":
        start = _jpeg_scan_start(_Source(fd, head), 2 if body_offset is None else body_offset, size)
        if not _contains(fd, head, _JPEG_EOI, start, size):
            raise TruncatedError(
                f"JPEG has no end-of-image marker (FF D9): the file ({size:,} bytes) stops inside the image data"
            )


def _contains(fd: Readable | None, head: bytes, needle: bytes, start: int, size: int) -> bool:
    """Whether ``needle`` occurs in bytes ``start..size``: the last TAIL_BYTES first, then all of them."""
    tail_from = max(start, size - TAIL_BYTES)
    if size <= len(head):
        return head.rfind(needle, tail_from, size) >= 0 or head.find(needle, start, size) >= 0
    assert fd is not None
    # rfind: the marker normally ends the file, and JPEG data is full of FF bytes that slow a forward search
    if pread(fd, size - tail_from, tail_from).rfind(needle) >= 0:
        return True
    overlap = len(needle) - 1
    for pos in range(start, tail_from, _SEARCH_CHUNK):
        if needle in pread(fd, min(_SEARCH_CHUNK + overlap, size - pos), pos):
            return True
    return False


def _jpeg_scan_start(src: _Source, pos: int, size: int) -> int:
    """The offset of the first scan's entropy-coded data, walking segments from the marker at ``pos``.

    The search for FF D9 starts there: the headers before it may hold those bytes (an EXIF thumbnail is a whole
    JPEG, end marker included; a quantisation table may hold 255 then 217), entropy-coded data cannot (an FF there
    is followed by 00 or a restart marker). A segment the walk does not understand ends it where it stands.
    """
    try:
        for _ in range(_JPEG_MAX_SEGMENTS):
            if pos + 4 > size:
                raise TruncatedError(f"JPEG ends after {size:,} bytes, inside its headers, before any image data")
            ff, marker, seglen = struct.unpack(">BBH", src.at(pos, 4))
            if ff != 0xFF:
                return pos
            if marker == 0xFF:  # a fill byte
                pos += 1
            elif marker in _JPEG_STANDALONE:
                pos += 2
            elif marker == 0xD9 or seglen < 2:
                return pos
            elif marker == 0xDA:
                if pos + 2 + seglen > size:
                    raise TruncatedError(f"JPEG ends after {size:,} bytes, inside its scan header")
                return pos + 2 + seglen
            else:
                pos += 2 + seglen
    except HeaderError:
        pass
    return min(pos, size)


def gif_is_animated(path: str | os.PathLike[str]) -> bool | None:
    """Whether a GIF holds more than one image, by walking its blocks as Pillow reads them (no pixel is decoded):
    True at the second image descriptor, False at the trailer; None when the file cannot tell (not a GIF, cut short,
    or more than ``_GIF_MAX_STEPS`` sub-blocks before an answer: a crafted file of 1-byte sub-blocks). The walk reads
    the file through a memory map, so a large first frame costs one pass over its sub-block lengths."""
    import mmap

    try:
        with open_checked(path) as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _gif_images_over_one(data)
    except (OSError, ValueError, IndexError, UnreadableFile):  # unreadable, empty (mmap of 0 bytes), or off the end
        return None


_GIF_MAX_STEPS = 4_000_000  # sub-blocks and stray bytes walked (a 1 GB first frame of 255-byte sub-blocks: ~0.3 s)


def _gif_images_over_one(data: mmap.mmap) -> bool | None:
    if data[:6] not in (b"GIF87a", b"GIF89a") or len(data) < 13:
        return None
    pos = 13 + (3 << ((data[10] & 7) + 1) if data[10] & 0x80 else 0)  # header, screen descriptor, global table
    images, size, steps = 0, len(data), 0
    while pos < size and steps < _GIF_MAX_STEPS:
        block = data[pos]
        steps += 1
        if block == 0x3B:  # trailer
            return False
        if block not in (0x2C, 0x21):  # a stray byte between blocks: skipped, as Pillow skips it
            pos += 1
            continue
        if block == 0x2C:  # image descriptor: 9 bytes, a local colour table, the LZW code size, then sub-blocks
            images += 1
            if images > 1:
                return True
            packed = data[pos + 9]
            pos += 10 + (3 << ((packed & 7) + 1) if packed & 0x80 else 0) + 1
        else:  # extension: its label, then sub-blocks
            pos += 2
        while data[pos] and steps < _GIF_MAX_STEPS:  # sub-blocks: a length byte, that many bytes; 0 ends them
            pos += data[pos] + 1
            steps += 1
        pos += 1
    return None  # no trailer (cut short), or too many steps to tell


def webp_is_lossless(path: str | os.PathLike[str]) -> bool:
    """Whether a WebP file's (first) image is VP8L, the lossless codec, by walking its RIFF chunks to the first image
    data (an ICC profile or EXIF block before it is skipped by its size; an animation's first frame is looked into).
    False for VP8 (lossy), and for anything that cannot be read."""
    try:
        with open_checked(path) as f:
            if f.read(12)[8:12] != b"WEBP":
                return False
            for _ in range(_MAX_CHUNK_WALK):
                head = f.read(8)
                if len(head) < 8:
                    return False
                fourcc, length = head[:4], struct.unpack("<I", head[4:])[0]
                if fourcc in (b"VP8L", b"VP8 "):
                    return fourcc == b"VP8L"
                if fourcc == b"ANMF":  # a frame: 16 bytes of position and timing, then its own chunks
                    f.seek(16, os.SEEK_CUR)
                    continue
                f.seek(length + (length & 1), os.SEEK_CUR)  # chunks are padded to an even size
    except (OSError, UnreadableFile):
        return False
    return False
