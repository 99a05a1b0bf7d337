"""The header fast path gives exactly Pillow's displayed size for every format, size and EXIF orientation."""

from __future__ import annotations

import struct

import PIL.Image
import PIL.ImageOps
import pytest

import mmtok
from mmtok.headers import HeaderError, image_format, read_image_header
from tests.makers import write_image


def pillow_displayed_size(path) -> tuple[int, int]:
    with PIL.Image.open(path) as im:
        return PIL.ImageOps.exif_transpose(im).size


@pytest.mark.parametrize("orientation", [1, 2, 3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize(("fmt", "suffix"), [("JPEG", "jpg"), ("PNG", "png"), ("WEBP", "webp"), ("TIFF", "tif")])
def test_size_and_orientation_match_pillow(tmp_path, fmt, suffix, orientation):
    path = write_image(tmp_path / f"x.{suffix}", (123, 45), fmt, orientation=orientation)
    image = mmtok.load(path)
    assert (image.width, image.height) == pillow_displayed_size(path)
    assert image.orientation == orientation


@pytest.mark.parametrize(
    ("fmt", "suffix", "mode", "kwargs"),
    [
        ("JPEG", "jpg", "RGB", {"progressive": True}),
        ("JPEG", "jpg", "L", {}),
        ("JPEG", "jpg", "CMYK", {}),
        ("PNG", "png", "I;16", {}),
        ("PNG", "png", "P", {}),
        ("WEBP", "webp", "RGBA", {"lossless": True}),
        ("WEBP", "webp", "RGB", {"lossless": True}),
        ("GIF", "gif", "P", {}),
        ("BMP", "bmp", "RGB", {}),
        ("TIFF", "tif", "RGB", {"compression": "tiff_lzw"}),
    ],
)
def test_format_variants_match_pillow(tmp_path, fmt, suffix, mode, kwargs):
    path = tmp_path / f"x.{suffix}"
    write_image(path, (301, 97), fmt, mode=mode)
    if kwargs:
        with PIL.Image.open(path) as im:
            im.load()
            im.save(path, format=fmt, **kwargs)
    image = mmtok.load(path)
    assert image.format == image_format(path.read_bytes()[:64])
    assert (image.width, image.height) == pillow_displayed_size(path) == (301, 97)


def test_bmp_stored_top_down_has_positive_height(tmp_path):
    path = write_image(tmp_path / "x.bmp", (20, 10), "BMP")
    data = bytearray(path.read_bytes())
    struct.pack_into("<i", data, 22, -10)  # negative height: rows stored top to bottom
    path.write_bytes(bytes(data))
    assert (mmtok.load(path).width, mmtok.load(path).height) == (20, 10)


def test_large_exif_block_before_the_frame_header(tmp_path):
    """Cameras put big EXIF blocks (thumbnails, maker notes) before SOF: the parser seeks past the first 4 KiB."""
    path = tmp_path / "x.jpg"
    im = PIL.Image.new("RGB", (640, 480), (10, 20, 30))
    exif = PIL.Image.Exif()
    exif[0x0112] = 8
    exif[0x010E] = "x" * 30_000  # ImageDescription, 30 kB
    im.save(path, exif=exif.tobytes())
    image = mmtok.load(path)
    assert (image.width, image.height) == pillow_displayed_size(path) == (480, 640)


def test_truncated_header_raises_header_error(tmp_path):
    path = write_image(tmp_path / "x.jpg", (64, 64), "JPEG")
    head = path.read_bytes()[:20]
    with pytest.raises(HeaderError):
        read_image_header(None, head, "jpeg")


def test_loader_falls_back_to_pillow_when_the_fast_path_gives_up(tmp_path, monkeypatch):
    path = write_image(tmp_path / "x.jpg", (64, 32), "JPEG", orientation=6)

    def give_up(*args, **kwargs):
        raise HeaderError("variant not handled")

    monkeypatch.setattr("mmtok.media.loading.read_image_header", give_up)
    image = mmtok.load(path)
    assert (image.width, image.height, image.orientation) == (32, 64, 6)
