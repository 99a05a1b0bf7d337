"""Write the HEIF/HEIC and AVIF files the core tests price from their headers (``tests/data/heif/``), with their
displayed sizes in ``sizes.json``: run ``python -m mmtok.eval.tools.heif_samples`` in the full venv (pillow-heif's
libheif and x265 encode HEIC; Pillow's libavif encodes AVIF). The core venv has no HEIF decoder, so these small
files (a few KB) are shipped; the full suite re-encodes the same kinds of file and checks the header reading against
the decoders themselves (tests/test_headers_heif.py).

- ``chelsea.heic``, ``chelsea.avif``: the 451x300 sample photo (x265 codes it 452x300: the ``clap`` crops it back).
- ``rotated.heic``: a 61x35 image with EXIF orientation 6, which libheif writes as ``irot`` (and ``clap``).
- ``mirrored.avif``: a 61x35 image with EXIF orientation 5, which libavif writes as ``irot`` and ``imir``.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "heif"


def _rotated(orientation: int):
    import PIL.Image

    image = PIL.Image.linear_gradient("L").resize((61, 35)).convert("RGB")
    exif = PIL.Image.Exif()
    exif[0x0112] = orientation
    return image, exif.tobytes()


def write(out: Path = OUT) -> dict[str, list[int]]:
    """Encode the samples into ``out`` and return each one's displayed size as its decoder gives it."""
    import PIL.Image
    import PIL.ImageOps
    import pillow_heif

    pillow_heif.register_heif_opener()
    out.mkdir(parents=True, exist_ok=True)
    photo = PIL.Image.open(ROOT / "mmtok" / "samples" / "media" / "chelsea.jpg")
    photo.save(out / "chelsea.heic", quality=40)
    photo.save(out / "chelsea.avif", quality=40)
    image, exif = _rotated(6)
    image.save(out / "rotated.heic", exif=exif, quality=40)
    image, exif = _rotated(5)
    image.save(out / "mirrored.avif", exif=exif, quality=40)
    sizes = {}
    for path in sorted(out.glob("*.hei?")) + sorted(out.glob("*.avif")):
        with PIL.Image.open(path, formats=["AVIF" if path.suffix == ".avif" else "HEIF"]) as im:
            sizes[path.name] = list(PIL.ImageOps.exif_transpose(im).size)
    (out / "sizes.json").write_text(json.dumps(sizes, indent=1, sort_keys=True) + "\n")
    return sizes


if __name__ == "__main__":
    print(write())
