"""HEIF/HEIC and AVIF image size read from the file's boxes (ISO/IEC 23008-12), without a decoder.

The core prices a photo from its displayed size, and a HEIF file states it in its ``meta`` box: the primary item
(``pitm``) has an image spatial extent (``ispe``, required for every image item, a grid's too) and the
transformative properties that ``ipma`` associates with it, applied in their listed order. What is read:

- ``ispe``: the coded size (a grid's output size for an iPhone's tiled photo).
- ``clap`` (clean aperture): the crop, with libheif's rounding and clamping (libheif 1.23, ``Box_clap::left_rounded``
  and the decoder's clamp; read 2026-12-05). HEIF only: x265 pads HEVC to whole blocks and writes a ``clap`` to cut
  the padding off, and libheif (pillow-heif) applies it. For AVIF the size is the ``ispe`` uncropped, as Pillow's
  AVIF decoder (libavif) gives it: the size mmtok decodes, so the priced size and the decoded tensor agree.
- ``irot`` (quarter turns anticlockwise) and ``imir`` (mirror axis): a quarter turn swaps width and height. HEIF: the
  size is given as displayed with orientation 1, as pillow-heif decodes it (rotation applied, the EXIF orientation
  tag reset). AVIF: the stored size with the EXIF orientation Pillow derives from ``irot``/``imir`` (libavif's
  table), so ``ImageHeader.size`` is the displayed one and decoding applies it.
- ``iloc``: where every item's data lies; the last byte of it is where the file must reach (a cut-off copy is
  caught before any decoding). Data in ``idat`` or in other files adds nothing.

An EXIF orientation tag inside a HEIF file is not read: the format's own ``irot``/``imir`` rule the display. Box
walks are bounded (``_MAX_BOXES``), the ``meta`` box is read whole only under ``_MAX_META_BYTES``, and anything
malformed is a :class:`~mmtok.headers.HeaderError`.
"""

from __future__ import annotations

import struct
from fractions import Fraction

from mmtok.headers import HeaderError, ImageHeader, _Source

_MAX_BOXES = 64  # top-level boxes walked to find meta, and children walked in one box
_MAX_META_BYTES = 4 << 20  # an iPhone's meta (48 grid tiles, thumbnails, gain map) is ~10 KB
_TRANSFORMS = (b"clap", b"irot", b"imir")


def read_heif_header(src: _Source, fmt: str) -> ImageHeader:
    """The displayed size (and, for AVIF, the orientation) of a HEIF or AVIF file's primary image."""
    meta = _meta(src)
    children = _boxes(meta, 4)  # meta is a full box: version and flags first
    primary = _primary_item(children.get(b"pitm"))
    properties, associations = _properties(children.get(b"iprp"))
    ordered = [properties[i] for i in associations.get(primary, ()) if 0 <= i < len(properties)]
    spatial = [body for kind, body in ordered if kind == b"ispe"]
    if not spatial:
        raise HeaderError(f"{fmt} primary item {primary} has no ispe (image spatial extent) property")
    _version, width, height = struct.unpack(">III", spatial[0][:12])
    if fmt == "heif":
        width, height = _displayed(width, height, [p for p in ordered if p[0] in _TRANSFORMS])
        orientation = 1
    else:
        orientation = _exif_orientation(dict(p for p in ordered if p[0] in (b"irot", b"imir")))
    data_end = _data_end(children.get(b"iloc"))
    if width <= 0 or height <= 0:
        raise HeaderError(f"{fmt} header gives a zero size {width}x{height}")
    return ImageHeader(fmt, width, height, orientation, data_end or None)


def _meta(src: _Source) -> bytes:
    """The body of the top-level ``meta`` box."""
    pos = 0
    for _ in range(_MAX_BOXES):
        try:
            first = src.at(pos, 8)
        except HeaderError:
            raise HeaderError("no meta box before the end of the file") from None
        size, kind, header = _box_header(first + src.at(pos + 8, 8) if first[:4] == b"\x00\x00\x00\x01" else first)
        if size == 0:
            raise HeaderError(f"no meta box before a box that runs to the end of the file ({kind!r})")
        if kind == b"meta":
            if size - header > _MAX_META_BYTES:
                raise HeaderError(f"meta box of {size:,} bytes, over the {_MAX_META_BYTES:,}-byte limit")
            return src.at(pos + header, size - header)
        pos += size
    raise HeaderError(f"no meta box in the first {_MAX_BOXES} boxes")


def _box_header(data: bytes) -> tuple[int, bytes, int]:
    """(size, type, header length) of the box starting ``data``; size 0: to the end of the enclosing space."""
    if len(data) < 8:
        raise HeaderError("truncated box header")
    size, kind = struct.unpack(">I4s", data[:8])
    if size == 1:
        if len(data) < 16:
            raise HeaderError("truncated box header")
        (size,) = struct.unpack(">Q", data[8:16])
        header = 16
    else:
        header = 8
    if size and size < header:
        raise HeaderError(f"{kind!r} box of {size} bytes, shorter than its header")
    return size, kind, header


def _boxes(data: bytes, start: int) -> dict[bytes, bytes]:
    """The child boxes of ``data`` from ``start``, by type (the first of each type), as their bodies."""
    found: dict[bytes, bytes] = {}
    for kind, body in _box_list(data, start):
        found.setdefault(kind, body)
    return found


def _box_list(data: bytes, start: int) -> list[tuple[bytes, bytes]]:
    pos, boxes = start, []
    while pos < len(data):
        if len(boxes) >= 4 * _MAX_BOXES:
            raise HeaderError(f"more than {4 * _MAX_BOXES} boxes in one container")
        size, kind, header = _box_header(data[pos : pos + 16])
        end = len(data) if size == 0 else pos + size
        if end > len(data):
            raise HeaderError(f"{kind.decode('latin-1')!r} box runs past its container")
        boxes.append((kind, data[pos + header : end]))
        pos = end
    return boxes


def _primary_item(pitm: bytes | None) -> int:
    if pitm is None or len(pitm) < 6:
        raise HeaderError("no primary item (pitm box)")
    return int.from_bytes(pitm[4:6] if pitm[0] == 0 else pitm[4:8], "big")


def _properties(iprp: bytes | None) -> tuple[list[tuple[bytes, bytes]], dict[int, list[int]]]:
    """The item properties (``ipco``, in order) and each item's associated property indices (``ipma``, 0-based)."""
    if iprp is None:
        raise HeaderError("no item properties (iprp box)")
    boxes = _box_list(iprp, 0)
    ipco = next((body for kind, body in boxes if kind == b"ipco"), None)
    if ipco is None:
        raise HeaderError("no item property container (ipco box)")
    associations: dict[int, list[int]] = {}
    for kind, body in boxes:
        if kind == b"ipma":
            associations.update(_ipma(body))
    return _box_list(ipco, 0), associations


def _ipma(body: bytes) -> dict[int, list[int]]:
    version, flags = body[0], int.from_bytes(body[1:4], "big")
    (count,) = struct.unpack(">I", body[4:8])
    pos, items = 8, {}
    for _ in range(count):
        width = 2 if version == 0 else 4
        item = int.from_bytes(_take(body, pos, width), "big")
        n = _take(body, pos + width, 1)[0]
        pos += width + 1
        step = 2 if flags & 1 else 1
        raw = _take(body, pos, step * n)
        mask = 0x7FFF if step == 2 else 0x7F
        items[item] = [(int.from_bytes(raw[i : i + step], "big") & mask) - 1 for i in range(0, step * n, step)]
        pos += step * n
    return items


def _take(data: bytes, pos: int, n: int) -> bytes:
    if pos + n > len(data):
        raise HeaderError("truncated box")
    return data[pos : pos + n]


def _displayed(width: int, height: int, transforms: list[tuple[bytes, bytes]]) -> tuple[int, int]:
    """The size after the transformative properties, in their order, as libheif applies them."""
    for kind, body in transforms:
        if kind == b"clap":
            width, height = _clap(width, height, body)
        elif kind == b"irot" and body[:1] and body[0] & 1:
            width, height = height, width
    return width, height


def _clap(width: int, height: int, body: bytes) -> tuple[int, int]:
    """The clean aperture's size inside a ``width`` x ``height`` image, rounded and clamped as libheif does."""
    if len(body) < 32:
        raise HeaderError("truncated clap box")
    wn, wd, hn, hd = struct.unpack(">IIII", body[:16])
    xn, xd, yn, yd = struct.unpack(">iIiI", body[16:32])
    if 0 in (wd, hd, xd, yd):
        raise HeaderError("clap box with a zero denominator")
    return _aperture(width, Fraction(wn, wd), Fraction(xn, xd), _trunc), _aperture(
        height, Fraction(hn, hd), Fraction(yn, yd), _round
    )


def _aperture(size: int, extent: Fraction, offset: Fraction, first: object) -> int:
    """One dimension of the crop: libheif rounds the left edge down (the top edge to nearest), the far edge to
    nearest, then clamps both into the image."""
    start = first(offset + Fraction(size - 1, 2) - (extent - 1) / 2)  # type: ignore[operator]
    end = _round(extent - 1 + start)
    start, end = max(start, 0), min(end, size - 1)
    if start > end:
        raise HeaderError(f"clap box crops a {size}-pixel side to nothing")
    return end - start + 1


def _trunc(value: Fraction) -> int:
    return int(value)  # C integer division: toward zero


def _round(value: Fraction) -> int:
    return int(Fraction(value.numerator + value.denominator // 2, value.denominator))


# irot quarter turns (anticlockwise) and imir axis -> EXIF orientation, libavif's table (Pillow's AVIF plugin uses it)
_ORIENTATION = {(0, None): 1, (1, None): 8, (2, None): 3, (3, None): 6,
                (0, 0): 4, (0, 1): 2, (1, 0): 5, (1, 1): 7, (2, 0): 2, (2, 1): 4, (3, 0): 7, (3, 1): 5}  # fmt: skip


def _exif_orientation(transforms: dict[bytes, bytes]) -> int:
    irot, imir = transforms.get(b"irot", b"\x00"), transforms.get(b"imir")
    angle = irot[0] & 3 if irot else 0
    axis = None if imir is None else (imir[0] & 1 if imir else 0)
    return _ORIENTATION[(angle, axis)]


def _data_end(iloc: bytes | None) -> int:
    """The byte after the last item data stored in the file itself (``iloc`` construction method 0); 0 if none."""
    if iloc is None or len(iloc) < 8:
        return 0
    version = iloc[0]
    offset_size, length_size = iloc[4] >> 4, iloc[4] & 15
    base_size, index_size = iloc[5] >> 4, (iloc[5] & 15 if version in (1, 2) else 0)
    id_width = 2 if version < 2 else 4
    count = int.from_bytes(_take(iloc, 6, id_width), "big")
    pos, end = 6 + id_width, 0
    for _ in range(count):
        pos += id_width
        method = int.from_bytes(_take(iloc, pos, 2), "big") & 15 if version in (1, 2) else 0
        pos += 2 if version in (1, 2) else 0
        reference = int.from_bytes(_take(iloc, pos, 2), "big")
        base = int.from_bytes(_take(iloc, pos + 2, base_size), "big")
        extents = int.from_bytes(_take(iloc, pos + 2 + base_size, 2), "big")
        pos += 4 + base_size
        if not index_size + offset_size + length_size:
            continue  # extents of no bytes place nothing (and would loop without reading)
        for _ in range(extents):
            pos += index_size
            offset = int.from_bytes(_take(iloc, pos, offset_size), "big")
            length = int.from_bytes(_take(iloc, pos + offset_size, length_size), "big")
            pos += offset_size + length_size
            if method == 0 and reference == 0:
                end = max(end, base + offset + length)
    return end
