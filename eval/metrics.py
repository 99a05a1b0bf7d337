"""Image metrics with their protocols: Fréchet distance on a named extractor's features, PSNR, SSIM.

A Fréchet distance is only "FID" when the extractor is Inception-v3 with its standard weights and
preprocessing; on any other extractor it is reported as ``FD-<extractor>``, never as FID.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Metric:
    """A number and the protocol that produced it, printed together."""

    name: str  # e.g. "FD-clip-tiny", "PSNR", "SSIM"
    value: float
    protocol: str  # extractor, data, preprocessing, N

    def __str__(self) -> str:
        return f"{self.name} = {self.value:.4g} ({self.protocol})"


def gaussian_stats(features: torch.Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance (unbiased) of features ``[N, D]``, in float64."""
    x = features.detach().cpu().double().numpy() if torch.is_tensor(features) else np.asarray(features, np.float64)
    if x.ndim != 2 or len(x) < 2:
        raise ValueError(f"need features [N >= 2, D], got {x.shape}")
    return x.mean(axis=0), np.cov(x, rowvar=False)


def frechet_distance(mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray) -> float:
    """Fréchet distance between two Gaussians: ||mu1 - mu2||^2 + Tr(S1 + S2 - 2 (S1 S2)^(1/2)).

    The matrix square root is scipy's ``sqrtm``; an offset on the diagonals keeps it finite when the product is
    singular, as in the reference FID implementation (pytorch-fid / clean-fid).
    """
    import warnings

    from scipy import linalg

    diff = mu1 - mu2
    with warnings.catch_warnings():  # a singular product (fewer samples than dims) is handled just below
        warnings.simplefilter("ignore", linalg.LinAlgWarning)
        covmean = linalg.sqrtm(sigma1 @ sigma2)
    if not np.isfinite(covmean).all():
        offset = np.eye(sigma1.shape[0]) * 1e-6
        covmean = linalg.sqrtm((sigma1 + offset) @ (sigma2 + offset))
    if np.iscomplexobj(covmean):
        covmean = covmean.real
    return float(diff @ diff + np.trace(sigma1) + np.trace(sigma2) - 2 * np.trace(covmean))


def feature_frechet(a: torch.Tensor, b: torch.Tensor) -> float:
    return frechet_distance(*gaussian_stats(a), *gaussian_stats(b))


def psnr(x: torch.Tensor, y: torch.Tensor) -> float:
    """PSNR in dB of images in [-1, 1] ``[B, 3, H, W]`` (data range 2), torchmetrics, averaged over the batch."""
    from torchmetrics.functional.image import peak_signal_noise_ratio

    return float(
        peak_signal_noise_ratio(x.float(), y.float(), data_range=2.0, reduction="elementwise_mean", dim=(1, 2, 3))
    )


def ssim(x: torch.Tensor, y: torch.Tensor) -> float:
    """SSIM of images in [-1, 1] ``[B, 3, H, W]`` (Gaussian window 11, sigma 1.5), torchmetrics."""
    from torchmetrics.functional.image import structural_similarity_index_measure

    return float(structural_similarity_index_measure(x.float(), y.float(), data_range=2.0))
