"""Per-token features and the baseline selections: random, uniform, norm, DivPrune, and ToMe's merging."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from mmtok.errors import TruncationError
from mmtok.truncation.report import METHODS


def token_features(seq: Any, tokenizer: Any = None, normalized: bool = True) -> torch.Tensor:
    """Per-token feature vectors ``[N, D]``: the tokenizer's teacher-aligned features for codebook ids, else the
    sequence's own embeddings."""
    if seq.ids is not None and seq.modality == "image":
        if tokenizer is None:
            from mmtok.registry import get_registered

            tokenizer = get_registered(seq.tokenizer, "tokenizer", "token sequence", TruncationError)
        return tokenizer.features(seq, tokens=True, normalized=normalized)[1].float().cpu()
    if seq.embeddings is not None:
        return seq.embeddings.float()
    raise TruncationError(f"a {seq.modality} sequence without embeddings needs its tokenizer's features")


def _check_features(features: torch.Tensor, n: int) -> None:
    if features.ndim != 2 or features.shape[0] != n:
        raise TruncationError(f"features must be [N={n}, D], got {tuple(features.shape)}")
    if not torch.isfinite(features).all():
        raise TruncationError("token features contain NaN or infinite values")


def _budget(n: int, keep: int | None, keep_ratio: float | None) -> int:
    if keep is not None:
        if keep < 1:
            raise TruncationError(f"keep must be at least 1, got {keep}")
        return min(keep, n)
    if keep_ratio is None:
        raise TruncationError("give one of threshold (mi only), keep or keep_ratio")
    if not 0 < keep_ratio <= 1:
        raise TruncationError(f"keep_ratio must be in (0, 1], got {keep_ratio}")
    return max(1, min(n, math.ceil(keep_ratio * n)))


def _select(features: torch.Tensor, method: str, k: int, seed: int) -> torch.Tensor:
    n = len(features)
    if method == "random":
        return torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:k]
    if method == "uniform":
        return torch.linspace(0, n - 1, k).round().long().unique()
    if method == "norm":
        return features.norm(dim=1).topk(k).indices
    if method == "divprune":
        if n > MAX_PAIRWISE_TOKENS:
            raise TruncationError(
                f"divprune on {n:,} tokens: at most {MAX_PAIRWISE_TOKENS:,} (each kept token is compared with all)"
            )
        unit = F.normalize(features, dim=1)
        chosen = [int(features.norm(dim=1).argmax())]
        distance = 1 - unit @ unit[chosen[0]]
        distance[chosen[0]] = -1
        for _ in range(k - 1):
            nxt = int(distance.argmax())
            chosen.append(nxt)
            torch.minimum(distance, 1 - unit @ unit[nxt], out=distance)  # a chosen token's -1 stays
            distance[nxt] = -1
        return torch.tensor(chosen)
    raise TruncationError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")


# ToMe scores every pair across its two halves ((N/2)^2 similarities, 256 MiB here); DivPrune compares each token
# it keeps with every token (N x k).
MAX_PAIRWISE_TOKENS = 16384


def tome_merge(features: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Bipartite soft matching (Bolya et al. 2023) until ``k`` tokens remain.

    Returns merged features ``[k, D]`` (size-weighted means), the index of each survivor in the input, and sizes.
    """
    if len(features) > MAX_PAIRWISE_TOKENS:
        raise TruncationError(
            f"tome on {len(features):,} tokens: at most {MAX_PAIRWISE_TOKENS:,} (it compares every pair)"
        )
    feats = features.clone()
    index = torch.arange(len(features))
    size = torch.ones(len(features))
    while len(feats) > k:
        a, b = feats[0::2], feats[1::2]
        if len(b) == 0:
            break
        r = min(len(feats) - k, len(a))
        sim = F.normalize(a, dim=1) @ F.normalize(b, dim=1).T  # (|A|, |B|)
        best, target = sim.max(dim=1)
        merge = best.argsort(descending=True)[:r]  # the r most similar A tokens merge into their B match
        keep_a = torch.ones(len(a), dtype=torch.bool)
        keep_a[merge] = False
        a_size, b_size = size[0::2], size[1::2].clone()
        b = b * b_size[:, None]
        b.index_add_(0, target[merge], a[merge] * a_size[merge, None])
        b_size.index_add_(0, target[merge], a_size[merge])
        b = b / b_size[:, None]
        feats = torch.cat([a[keep_a], b])
        size = torch.cat([a_size[keep_a], b_size])
        index = torch.cat([index[0::2][keep_a], index[1::2]])
    order = index.argsort()
    return feats[order], index[order], size[order]
