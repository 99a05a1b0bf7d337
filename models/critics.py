"""Neural critics for mutual-information estimation, and the trained token-relevance critic used by truncation.

- ``SeparableCritic``: f(x, y) = g(x) . h(y), all B x B pair scores in one matrix product.
- ``ConcatCritic``: f(x, y) = MLP([x, y]) over every pair (B^2 evaluations; more expressive, costlier).

``fit_critic`` trains a critic with any bound of ``mmtok.mi`` on paired samples. ``TokenCritic`` is the shipped
relevance critic: a separable critic between a visual token (its code and its neighbours' codes, or its
teacher-aligned feature) and a context text's teacher embedding, whose output estimates pmi(token; context) in
nats — the quantity the design seed thresholds at 0.18 (mmtok's default, calibrated on validation canvases:
``mmtok.truncation.DEFAULT_THRESHOLD_NATS``). Trained with the SMILE/Jensen-Shannon objective its logit is the log
density ratio itself; trained with NWJ, f - 1 is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mmtok import mi
from mmtok.models import checkpoint

CLASS_PATH = "mmtok.models.critics:TokenCritic"


def _mlp(d_in: int, hidden: int, d_out: int, layers: int = 2) -> nn.Sequential:
    parts: list[nn.Module] = []
    width = d_in
    for _ in range(layers):
        parts += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    parts.append(nn.Linear(width, d_out))
    return nn.Sequential(*parts)


class SeparableCritic(nn.Module):
    def __init__(self, dim_x: int, dim_y: int, hidden: int = 256, embed: int = 32, layers: int = 2) -> None:
        super().__init__()
        self.g = _mlp(dim_x, hidden, embed, layers)
        self.h = _mlp(dim_y, hidden, embed, layers)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.g(x) @ self.h(y).T  # (Bx, By)


class ConcatCritic(nn.Module):
    def __init__(self, dim_x: int, dim_y: int, hidden: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.f = _mlp(dim_x + dim_y, hidden, 1, layers)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        bx, by = len(x), len(y)
        pairs = torch.cat([x[:, None].expand(bx, by, -1), y[None].expand(bx, by, -1)], dim=-1)
        return self.f(pairs).squeeze(-1)  # (Bx, By)


def fit_critic(
    critic: nn.Module,
    sample: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    estimator: str,
    steps: int,
    batch: int = 64,
    lr: float = 5e-4,
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Maximise ``estimator``'s bound; ``sample(batch)`` returns joint samples (x, y). Returns the estimates."""
    optimizer = torch.optim.Adam(critic.parameters(), lr=lr)
    history = []
    for step in range(steps):
        x, y = sample(batch)
        value = mi.estimate(estimator, critic(x, y)).value
        optimizer.zero_grad(set_to_none=True)
        (-value).backward()
        optimizer.step()
        history.append(value.item())
        if on_step:
            on_step(step, float(value))
    return history


@dataclass
class TokenCriticConfig:
    token_dim: int = 128  # teacher-aligned token features (vq-clip-tiny: 128)
    context_dim: int = 128  # teacher text embeddings
    hidden: int = 256
    embed: int = 64
    layers: int = 2
    estimator: str = "nwj"
    image_tokenizer: str = "vq-clip-tiny"
    teacher: str = "clip-tiny"
    # "aligned": the tokenizer's teacher-aligned token features; "local": the token's code vector and its grid
    # neighbours' (radius ``radius``), which say what the token shows where it is (strokes vs background).
    token_features: str = "aligned"
    radius: int = 1
    # The context texts it was trained on, so MI truncation can tell a context it knows from one it does not
    # (empty: not recorded; mmtok.truncation keeps the list for the shipped critic-vq-text, trained before this).
    known_contexts: list[str] = field(default_factory=list)


class TokenCritic(checkpoint.Pretrained, nn.Module):
    """pmi(visual token; context) in nats from a separable critic (optimal NWJ critic: 1 + pmi; optimal
    Jensen-Shannon critic, as trained by SMILE: pmi)."""

    kind = "critic"
    CLASS_PATH = CLASS_PATH
    CONFIG_CLASS = TokenCriticConfig
    WHAT = "a token critic"
    STORAGE_DTYPE = None  # float32 on disk

    def __init__(self, config: TokenCriticConfig | None = None, name: str = "critic") -> None:
        super().__init__()
        self.config = config or TokenCriticConfig()
        self.name = name
        c = self.config
        if c.token_features not in ("aligned", "local"):
            from mmtok.errors import ConfigError

            raise ConfigError(f"critic token_features must be 'aligned' or 'local', got {c.token_features!r}")
        self.critic = SeparableCritic(c.token_dim, c.context_dim, c.hidden, c.embed, c.layers)

    def scores(self, tokens: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Raw critic scores ``[N, C]`` between token features ``[N, Dt]`` and context embeddings ``[C, Dc]``."""
        return self.critic(tokens, context)

    def token_features(self, seq: Any, tokenizer: Any = None) -> torch.Tensor:
        """The features this critic reads for each token of an image sequence, ``[N, token_dim]``."""
        if tokenizer is None:
            from mmtok.registry import get_registered

            tokenizer = get_registered(seq.tokenizer or self.config.image_tokenizer, "tokenizer", "token sequence")
        if self.config.token_features == "local":
            return tokenizer.local_codes(seq, self.config.radius).float().cpu()
        return tokenizer.features(seq, tokens=True)[1].float().cpu()

    def pmi(self, tokens: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Pointwise MI estimate ``[N, C]`` in nats (the NWJ critic's f - 1; the JS-trained SMILE critic's f;
        InfoNCE/DV critics are normalised over the given contexts instead)."""
        return self._pmi_from_scores(self.scores(tokens, context))

    def _pmi_from_scores(self, scores: torch.Tensor) -> torch.Tensor:
        if self.config.estimator == "nwj":
            return scores - 1
        if self.config.estimator == "smile":
            return scores
        count = torch.tensor(float(scores.shape[-1]))
        return scores - torch.logsumexp(scores, dim=-1, keepdim=True) + torch.log(count)

    # ------------------------------------------------------------------------- scoring from precomputed codes
    def window_table(self, codes_VC: torch.Tensor) -> torch.Tensor:
        """The token tower's first layer for every (window offset, code): ``[(2r+1)^2, V + 1, hidden]``, row ``V``
        an absent neighbour (zeros), the bias added to the centre offset's rows. Tokens are discrete codes, so the
        first layer of a window is the sum of its neighbours' rows: ``(2r+1)^2`` lookups instead of a
        ``(2r+1)^2 c x hidden`` product."""
        if self.config.token_features != "local":
            raise ValueError("window tables are for critics that read code windows (token_features = 'local')")
        first = self.critic.g[0]  # Linear((2r+1)^2 c -> hidden); local_codes lays features out channel-major
        window = (2 * self.config.radius + 1) ** 2
        weight_HCO = first.weight.view(first.out_features, -1, window)  # (hidden, c, offsets)
        table_OVH = torch.einsum("vc,hco->ovh", codes_VC.to(weight_HCO), weight_HCO)
        table_OVH = torch.cat([table_OVH, table_OVH.new_zeros(window, 1, first.out_features)], dim=1)
        table_OVH[window // 2] += first.bias  # every window has its centre row once: the layer's bias rides on it
        return table_OVH

    @torch.no_grad()
    def pmi_on_grids(self, ids_BHW: torch.Tensor, codes_VC: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """pmi ``[B, H*W, C]`` (nats) of every site of ``B`` code grids (``ids_BHW``; the id ``V`` marks a site
        whose token is absent) with each context embedding ``[C, Dc]``: the same numbers as ``pmi`` over
        ``local_codes``, from the cached window table (rebuilt when the weights change)."""
        key = (codes_VC.data_ptr(), tuple(codes_VC.shape), self.critic.g[0].weight._version)
        if getattr(self, "_table_key", None) != key:
            self._table, self._table_key = self.window_table(codes_VC), key
        table_OVH = self._table
        r = self.config.radius
        B, H, W = ids_BHW.shape
        window, rows = table_OVH.shape[0], table_OVH.shape[1]
        padded = F.pad(ids_BHW, (r, r, r, r), value=codes_VC.shape[0])  # off the grid: absent
        windows_BHWrr = padded.unfold(1, 2 * r + 1, 1).unfold(2, 2 * r + 1, 1)  # (dr, dc) in unfold's raster order
        # each offset's own table; int32 indices (exact below 2^31 table rows) halve the gather's index traffic
        rows_NO = windows_BHWrr.reshape(B * H * W, window).int() + torch.arange(window, dtype=torch.int32) * rows
        hidden_NH = F.embedding_bag(rows_NO, table_OVH.flatten(0, 1), mode="sum")  # the first layer, one pass
        tower = self.critic.g
        if isinstance(tower[1], nn.ReLU):  # in place: no second copy of the largest tensor
            hidden_NH, tower = hidden_NH.relu_(), tower[2:]
        else:
            tower = tower[1:]
        token_BNE = tower(hidden_NH).view(B, H * W, -1)  # the rest of the token tower
        return self._pmi_from_scores(token_BNE @ self.critic.h(context).T)  # (B, H*W, C)
