"""The nearest codes of a residual codebook, level by level: one distance block per level and one minimum, equal
to vector-quantize-pytorch's evaluation, in blocks of :data:`SEARCH_ROWS` rows."""

from __future__ import annotations

import torch

from mmtok.models.av.config import (
    DISTANCE_FLOOR,
)


def residual_nearest_codes(
    codebooks: list[tuple[torch.Tensor, torch.Tensor]], content: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual quantisation of ``content`` ``[N, d]`` by nearest codes, level after level: (codes ``[N, d]``, the
    sum of the chosen codes, and ids ``[N, L]``), equal to vector-quantize-pytorch's eval-mode ResidualVQ forward.

    ``codebooks`` holds per level the codes ``[1, C, d]`` and their squared norms ``[1, C]``. The library scores a
    level as argmax(-sqrt(clamp(|x|^2 + |c|^2 - 2 x.c))) over a full distance matrix, then one-hot encodes the
    choice. Here the same squared distances, from the same einsum (the -2 folded into x, which is exact: a power of
    two scales every rounding step alike), go to one min per row; ``_library_choice`` settles the rows where the
    library's square root could round the best and another distance to one value."""
    residual_1ND = content[None].float()
    out_1ND = torch.zeros_like(residual_1ND)
    ids = []
    for codes_1CD, norms_1C in codebooks:
        norms_1N = (residual_1ND**2).sum(-1)
        dots_1NC = torch.einsum("b i d, b j d -> b i j", residual_1ND * -2, codes_1CD)
        dist_1NC = norms_1N[..., None] + norms_1C[:, None, :]
        dist_1NC += dots_1NC  # (|x|^2 + |c|^2) + (-2 x.c), as the library adds them
        index_1N = _library_choice(dist_1NC)
        chosen_1ND = codes_1CD[0][index_1N]
        residual_1ND = residual_1ND - chosen_1ND
        out_1ND = out_1ND + chosen_1ND
        ids.append(index_1N)
    return out_1ND[0], torch.stack(ids, dim=-1)[0]


def _library_choice(dist_1NC: torch.Tensor) -> torch.Tensor:
    """argmax(-sqrt(clamp(dist))) per row, as the library takes it, from one min and one second-best pass.

    The min is the library's choice unless another distance could share its rounded root (a tie the library gives
    to the lower index): within 2^-20 of it, relative (the root merges at most ~2^-22), or both under the clamp.
    Those rows, and any that are not finite, are decided the library's way on the same distances."""
    best_1N, index_1N = dist_1NC.min(-1)
    slot_1N1 = index_1N[..., None]
    dist_1NC.scatter_(-1, slot_1N1, float("inf"))
    runner_up_1N = dist_1NC.amin(-1)
    dist_1NC.scatter_(-1, slot_1N1, best_1N[..., None])
    unsure_1N = runner_up_1N <= best_1N.clamp(min=DISTANCE_FLOOR) * (1 + 2**-20)
    unsure_1N |= ~torch.isfinite(best_1N)
    if bool(unsure_1N.any()):
        rows = unsure_1N[0].nonzero().flatten()
        index_1N = index_1N.clone()
        index_1N[0, rows] = (-dist_1NC[0, rows].clamp(min=DISTANCE_FLOOR).sqrt()).argmax(-1)
    return index_1N
