"""The HEIF/AVIF sizes the core reads from boxes (mmtok/headers_heif.py) against the decoders that draw the pixels:
libheif through pillow-heif (the heif extra) and libavif through Pillow, on files their encoders write now, every
EXIF orientation, odd sizes that make x265 pad and crop, and clean apertures rewritten in place."""

from __future__ import annotations

import io
import struct

import PIL.Image
import PIL.ImageOps
import pytest

import mmtok
from mmtok.headers import HeaderError, read_image_header
from mmtok.media.types import pillow_formats

pillow_heif = pytest.importorskip("pillow_heif")


def _encoded(size: tuple[int, int], orientation: int, fmt: str) -> bytes:
    image = PIL.Image.linear_gradient("L").resize(size).convert("RGB")
    exif = PIL.Image.Exif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    pillow_formats("heif")  # registers pillow-heif's opener and saver
    image.save(out, format=fmt.upper(), exif=exif.tobytes(), quality=30)
    return out.getvalue()


def _decoded(data: bytes, fmt: str) -> tuple[int, int]:
    with PIL.Image.open(io.BytesIO(data), formats=pillow_formats(fmt)) as im:
        im.load()
        return PIL.ImageOps.exif_transpose(im).size


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("size", [(64, 32), (61, 35), (17, 128)])
@pytest.mark.parametrize("fmt", ["heif", "avif"])
def test_the_header_size_is_the_decoded_size_for_every_orientation(fmt, size, orientation):
    data = _encoded(size, orientation, fmt)
    header = read_image_header(None, data, fmt)
    assert header.size == _decoded(data, fmt)
    if fmt == "avif":  # Pillow turns irot/imir into this EXIF orientation; the header says the same
        with PIL.Image.open(io.BytesIO(data), formats=["AVIF"]) as im:
            assert header.orientation == int(im.getexif().get(0x0112, 1) or 1)
    assert header.body_offset == len(data)  # the items' data ends the file


def _with_clap(data: bytes, values: tuple[int, ...]) -> bytes:
    at = data.index(b"clap") + 4
    fields = b"".join(v.to_bytes(4, "big", signed=True) for v in values)
    return data[:at] + fields + data[at + 32 :]


@pytest.mark.parametrize(
    "clap",
    [
        (40, 1, 20, 1, 0, 1, 0, 1),  # centred
        (41, 1, 21, 1, 3, 1, -2, 1),  # odd sizes, shifted
        (81, 2, 41, 2, 1, 2, -1, 2),  # half pixels
        (33, 1, 15, 1, -20, 1, 12, 1),  # pushed past the left and bottom edges: clamped
        (100, 1, 100, 1, 0, 1, 0, 1),  # larger than the image: clamped to it
        (7, 3, 5, 3, 0, 1, 0, 1),  # under three pixels
    ],
)
def test_a_clean_aperture_crops_as_libheif_crops_it(clap):
    data = _with_clap(_encoded((61, 35), 1, "heif"), clap)
    try:
        expected = _decoded(data, "heif")
    except Exception as e:  # libheif refused the aperture: so must the header reading
        with pytest.raises(HeaderError):
            read_image_header(None, data, "heif")
        pytest.skip(f"libheif refuses it too: {e}")
    assert read_image_header(None, data, "heif").size == expected


def test_a_heic_loaded_by_its_header_decodes_to_that_size(tmp_path):
    path = tmp_path / "turned.heic"
    path.write_bytes(_encoded((61, 35), 6, "heif"))
    photo = mmtok.load(path)
    assert (photo.width, photo.height) == (35, 61)
    assert tuple(photo.to_tensor().shape) == (3, 61, 35)


def _avif_with_clap(width: int, height: int, clap: tuple[int, ...]) -> bytes:
    """A Pillow-written AVIF (iloc version 0, 4-byte offsets) with a clap property added to its primary item: the
    box goes at the end of ipco, its index into ipma, and the sizes and the data offset move by what was added."""
    out = io.BytesIO()
    PIL.Image.new("RGB", (width, height), (200, 10, 10)).save(out, format="AVIF")
    data = bytearray(out.getvalue())
    box = struct.pack(">I4s", 40, b"clap") + struct.pack(">IIIIiIiI", *clap)
    ipco = data.index(b"ipco") - 4
    end = ipco + int.from_bytes(data[ipco : ipco + 4], "big")
    count, pos = 0, ipco + 8
    while pos < end:
        count, pos = count + 1, pos + int.from_bytes(data[pos : pos + 4], "big")
    data[end:end] = box
    associations = data.index(b"ipma") - 4 + 8 + 4 + 4 + 2  # size, type, version/flags, entries, item id
    data.insert(associations + 1 + data[associations], 0x80 | (count + 1))
    data[associations] += 1
    for name, grown in ((b"ipco", 40), (b"ipma", 1), (b"iprp", 41), (b"meta", 41)):
        at = data.index(name) - 4
        data[at : at + 4] = (int.from_bytes(data[at : at + 4], "big") + grown).to_bytes(4, "big")
    offset = data.index(b"iloc") - 4 + 8 + 4 + 2 + 2 + 2 + 2 + 2  # the first extent's offset
    data[offset : offset + 4] = (int.from_bytes(data[offset : offset + 4], "big") + 41).to_bytes(4, "big")
    return bytes(data)


def test_an_avif_clean_aperture_is_not_applied_as_pillows_decoder_does_not_apply_it():
    data = _avif_with_clap(64, 32, (40, 1, 20, 1, 0, 1, 0, 1))
    assert read_image_header(None, data, "avif").size == _decoded(data, "avif") == (64, 32)
    assert read_image_header(None, data, "heif").size == (40, 20)  # the clap is there: HEIF's rule would crop
