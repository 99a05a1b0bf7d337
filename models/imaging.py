"""Image preprocessing shared by tokenizers, teachers and datasets.

Images enter models as float ``[B, 3, S, S]`` in [-1, 1]. The documented rule (``fit``):

- ``"crop"`` (default): resize so the shorter side is ``S`` (antialiased), then centre-crop the longer side.
  Non-square images lose their edges; a 1x1 image becomes a flat S x S image.
- ``"pad"``: resize so the longer side is ``S`` and pad the rest with mid-grey; the content box is returned so
  a decoder can crop the padding back off.

Grayscale and RGBA inputs are turned into RGB by ``mmtok.load`` (alpha over white) before they get here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

FITS = ("crop", "pad")


def resize_to_square(pixels: torch.Tensor, size: int, fit: str = "crop") -> tuple[torch.Tensor, tuple[int, ...]]:
    """uint8 or float ``[3, H, W]`` -> float ``[3, size, size]`` in [-1, 1], and the content box (top, left, h, w)."""
    if fit not in FITS:
        raise ValueError(f"fit must be one of {FITS}, got {fit!r}")
    if pixels.ndim != 3 or pixels.shape[0] != 3:
        raise ValueError(f"expected an RGB tensor [3, H, W], got {tuple(pixels.shape)}")
    x = pixels.float()
    if pixels.dtype == torch.uint8:
        x = x / 127.5 - 1.0
    _, h, w = x.shape
    scale = size / min(h, w) if fit == "crop" else size / max(h, w)
    new_h, new_w = max(1, round(h * scale)), max(1, round(w * scale))
    if (new_h, new_w) != (h, w):
        x = F.interpolate(x[None], size=(new_h, new_w), mode="bilinear", antialias=scale < 1, align_corners=False)[0]
    if fit == "crop":
        top, left = (new_h - size) // 2, (new_w - size) // 2
        return x[:, top : top + size, left : left + size].clamp(-1, 1), (0, 0, size, size)
    out = torch.zeros(3, size, size)
    top, left = (size - new_h) // 2, (size - new_w) // 2
    out[:, top : top + new_h, left : left + new_w] = x
    return out.clamp(-1, 1), (top, left, new_h, new_w)


def to_uint8(x: torch.Tensor) -> torch.Tensor:
    """float [-1, 1] -> uint8 [0, 255] (any leading shape)."""
    return ((x.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
