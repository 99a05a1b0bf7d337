"""Generated corpora for benchmarks: folders of real-photo images like a user's photo folder.

Images are crops of scikit-image's bundled photos, resized so the long side is uniform in [256, 4000] px with
portrait and landscape aspect ratios, saved as JPEG, PNG or WebP by Pillow; one in five JPEGs (and some WebP/PNG)
carry an EXIF orientation that swaps width and height, as phone photos do. Files are made once and reused.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import PIL.Image

_PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field")


def _photos() -> list[PIL.Image.Image]:
    from skimage import data

    return [PIL.Image.fromarray(np.asarray(getattr(data, name)())).convert("RGB") for name in _PHOTOS]


def photo_folder(
    n: int = 2000, folder: Path | None = None, seed: int = 0, formats: tuple[str, ...] = ("jpeg", "jpeg", "png", "webp")
) -> Path:
    """A folder of ``n`` photos (made on first use, then reused); ``<folder>.json`` beside it lists their sizes."""
    tag = "" if formats == ("jpeg", "jpeg", "png", "webp") else "-" + "-".join(sorted(set(formats)))
    if folder is None:
        from mmtok.cache import cache_dir

        folder = cache_dir("corpus") / f"photos-{n}-{seed}{tag}"
    manifest = folder.with_suffix(".json")
    if manifest.is_file() and len(json.loads(manifest.read_text())) == n:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    photos = _photos()
    entries = {}
    for i in range(n):
        fmt = rng.choice(formats)
        long_side = rng.randint(256, 4000)
        aspect = rng.uniform(0.5, 2.0)
        width, height = (
            (long_side, max(16, round(long_side / aspect)))
            if aspect >= 1
            else (max(16, round(long_side * aspect)), long_side)
        )
        width, height = min(width, 4000), min(height, 4000)
        photo = rng.choice(photos)
        left = rng.randint(0, photo.width // 4)
        top = rng.randint(0, photo.height // 4)
        image = photo.crop((left, top, photo.width - left // 2, photo.height - top // 2)).resize(
            (width, height), PIL.Image.Resampling.BILINEAR
        )
        orientation = rng.choice([6, 8, 3]) if rng.random() < (0.2 if fmt == "jpeg" else 0.05) else 1
        kwargs: dict = {}
        if orientation != 1:
            exif = PIL.Image.Exif()
            exif[0x0112] = orientation
            kwargs["exif"] = exif.tobytes()
        suffix = {"jpeg": "jpg", "png": "png", "webp": "webp"}[fmt]
        name = f"img_{i:05d}.{suffix}"
        if fmt == "jpeg":
            image.save(folder / name, quality=85, **kwargs)
        elif fmt == "png":
            image.save(folder / name, compress_level=1, **kwargs)
        else:
            image.save(folder / name, quality=75, method=0, **kwargs)
        displayed = (height, width) if orientation in (5, 6, 7, 8) else (width, height)
        entries[name] = {"width": displayed[0], "height": displayed[1], "orientation": orientation}
    manifest.write_text(json.dumps(entries))
    return folder


def folder_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix in (".jpg", ".png", ".webp"))
