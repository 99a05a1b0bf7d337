"""Mutual-information estimators with one interface.

Neural variational bounds take a critic's score matrix ``scores[i, j] = f(x_i, y_j)`` over a batch, whose diagonal
(or a ``joint`` mask with one entry per row) holds the joint samples and whose other entries stand for the product
of marginals:

- ``infonce``: mean_i [f_ii - log mean_j exp f_ij]; never above log B (van den Oord et al. 2018).
- ``nwj``: mean_i f_ii - e^-1 mean_{i != j} exp f_ij (Nguyen, Wainwright & Jordan 2010; the f-GAN KL bound).
- ``dv`` (MINE): mean_i f_ii - log mean_{i != j} exp f_ij (Donsker-Varadhan, Belghazi et al. 2018).
- ``smile``: as ``dv`` with exp f clipped to [e^-tau, e^tau] in the partition term, trained through the
  Jensen-Shannon bound's gradient (Song & Ermon 2020).

Each returns the estimate and a pointwise (per-sample) score; for NWJ the optimal critic is 1 + pmi, so the
pointwise MI is f - 1.

``ksg`` is the non-parametric Kraskov-Stoegbauer-Grassberger estimator (algorithm 1, max-norm, scipy cKDTree),
accurate for low-dimensional variables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

ESTIMATORS = ("infonce", "nwj", "dv", "smile")


@dataclass(frozen=True)
class MIEstimate:
    value: torch.Tensor  # scalar estimate in nats (differentiable: maximise it to train the critic)
    pointwise: torch.Tensor  # (B,) per-sample scores in nats


def _log_mean_exp(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    if dim is None:
        return torch.logsumexp(x.flatten(), 0) - math.log(x.numel())
    return torch.logsumexp(x, dim) - math.log(x.shape[dim])


def _parts(scores: torch.Tensor, joint: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(joint scores per row, the other scores flattened, the joint mask)."""
    if joint is None:
        joint = torch.eye(scores.shape[0], dtype=torch.bool, device=scores.device)
    if joint.shape != scores.shape or not bool((joint.sum(1) == 1).all()):
        raise ValueError("the joint mask must mark exactly one joint sample per row of the score matrix")
    return scores[joint], scores[~joint], joint


def infonce(scores: torch.Tensor, joint: torch.Tensor | None = None) -> MIEstimate:
    positive, _, _ = _parts(scores, joint)
    pointwise = positive - _log_mean_exp(scores, dim=1)
    return MIEstimate(pointwise.mean(), pointwise)


def nwj(scores: torch.Tensor, joint: torch.Tensor | None = None) -> MIEstimate:
    positive, negative, _ = _parts(scores, joint)
    return MIEstimate(positive.mean() - torch.exp(negative - 1).mean(), positive - 1)


def dv(scores: torch.Tensor, joint: torch.Tensor | None = None) -> MIEstimate:
    positive, negative, _ = _parts(scores, joint)
    partition = _log_mean_exp(negative)
    return MIEstimate(positive.mean() - partition, positive - partition)


def smile(scores: torch.Tensor, joint: torch.Tensor | None = None, tau: float = 5.0) -> MIEstimate:
    """The value is the clipped-partition DV estimate; its gradient is the Jensen-Shannon (f-GAN) bound's, as in
    Song & Ermon's reference code: the clipped DV term alone would let the joint scores grow without limit."""
    positive, negative, _ = _parts(scores, joint)
    partition = _log_mean_exp(negative.clamp(-tau, tau))
    dv_value = positive.mean() - partition
    js = -torch.nn.functional.softplus(-positive).mean() - torch.nn.functional.softplus(negative).mean()
    return MIEstimate(js + (dv_value - js).detach(), positive - partition)


def estimate(name: str, scores: torch.Tensor, joint: torch.Tensor | None = None) -> MIEstimate:
    """``scores[i, j] = f(x_i, y_j)``; ``joint`` marks the one joint pair of each row (default: the diagonal of a
    square matrix)."""
    if name not in ESTIMATORS:
        raise ValueError(f"unknown MI estimator {name!r}; choose from {', '.join(ESTIMATORS)}")
    if scores.ndim != 2 or scores.shape[1] < 2 or (joint is None and scores.shape[0] != scores.shape[1]):
        raise ValueError(
            f"scores must be a [B, B] matrix (or rectangular with a joint mask), got {tuple(scores.shape)}"
        )
    return {"infonce": infonce, "nwj": nwj, "dv": dv, "smile": smile}[name](scores, joint)


def ksg(x: np.ndarray, y: np.ndarray, k: int = 3) -> tuple[float, np.ndarray]:
    """KSG estimate of I(X; Y) in nats from samples ``x [N, dx]``, ``y [N, dy]``; also the pointwise terms."""
    from scipy.spatial import cKDTree
    from scipy.special import digamma

    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
    if len(x) != len(y) or len(x) <= k:
        raise ValueError(f"need the same number (> k) of x and y samples, got {len(x)} and {len(y)}")
    n = len(x)
    joint = np.hstack([x, y])
    # distance to the k-th neighbour in the joint space (max-norm), excluding the point itself
    eps = cKDTree(joint).query(joint, k=k + 1, p=np.inf)[0][:, -1]
    radius = np.nextafter(eps, 0)  # strictly less than eps, as in the algorithm
    nx = cKDTree(x).query_ball_point(x, radius, p=np.inf, return_length=True) - 1
    ny = cKDTree(y).query_ball_point(y, radius, p=np.inf, return_length=True) - 1
    pointwise = digamma(k) + digamma(n) - digamma(nx + 1) - digamma(ny + 1)
    return float(pointwise.mean()), pointwise


def gaussian_mi(rho: float, dim: int) -> float:
    """True MI of ``dim`` independent pairs with correlation ``rho``: -dim/2 log(1 - rho^2)."""
    return -0.5 * dim * math.log(1 - rho**2)


def rho_for_mi(mi: float, dim: int) -> float:
    return math.sqrt(1 - math.exp(-2 * mi / dim))
