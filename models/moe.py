"""Mixture-of-Experts layer: Router -> TokenDispatcher -> GroupedExperts (the torchtitan split).

Legend: T tokens, D model dim, E experts, F expert hidden dim, K experts per token (max), A routed assignments.

- Router: linear (or small MLP) logits in fp32, temperature softmax over all E experts; top-k (default 2), or a
  dynamic k in [min_k, max_k] per token by top-p of the sorted probabilities or by router entropy, with a
  controller that moves the threshold towards a target average k. Selection may add a per-expert bias
  (aux-loss-free balancing); weights always come from the unbiased softmax, renormalised over the chosen experts.
- Losses: Switch load balancing E * sum_e f_e * P_e with P_e over the *full* softmax (a common bug computes it over
  the top-k probabilities only), and the ST-MoE router z-loss mean(logsumexp(logits)^2).
- Capacity (training only): assignments beyond ceil(capacity_factor * A / E) per expert are dropped, lowest
  probability first. Evaluation is dropless.
- ``route`` is the one routing step (router, capacity, losses, balancing updates, statistics) of both this layer and
  its expert-parallel version (``mmtok.models.expert_parallel``); a ``Totals`` says over which tokens its sums run
  (this layer's, or every process's in a group).
- Dispatch: sort assignments by expert, then ``torch.nn.functional.grouped_mm`` over the contiguous segments, or
  ``ExpertSegments``: gather, run and add back one expert's rows at a time, forward and (hand-written) backward,
  so no A x D copy of the tokens is ever made; the per-expert gather/``index_add_`` loop (HF Mixtral style) is the
  reference every path is tested against. "auto" picks grouped_mm for bf16/fp16 on CUDA and the segments
  elsewhere (measured faster on CPU; see eval/bench/moe.py).
- Cold start: experts added to a trained layer enter with a routing-weight multiplier of 0.1 that grows x1.5 per
  ``step()`` until 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from mmtok.errors import ConfigError, TokenError

DISPATCH = ("auto", "grouped_mm", "segment", "loop")


@dataclass
class MoEConfig:
    dim: int = 512  # D
    hidden_dim: int = 1024  # F, per expert (SwiGLU)
    num_experts: int = 8  # E
    top_k: int = 2  # K for fixed routing
    dynamic_k: str = ""  # "" (fixed top-k) | "top_p" | "entropy"
    min_k: int = 1
    max_k: int = 4
    top_p: float = 0.5  # dynamic top_p: smallest k whose probabilities sum to at least this
    target_k: float = 0.0  # > 0: move top_p (or the entropy scale) during training to reach this average k
    target_k_rate: float = 0.01
    temperature: float = 1.0
    router_mlp: bool = False
    aux_loss_weight: float = 0.01
    z_loss_weight: float = 0.001
    bias_balancing: bool = False  # aux-loss-free balancing (selection bias nudged towards equal load)
    bias_update_rate: float = 0.001
    capacity_factor: float = 0.0  # > 0: drop overflow assignments in training
    dispatch: str = "auto"

    def __post_init__(self) -> None:
        if self.dispatch not in DISPATCH:
            raise ConfigError(f"dispatch must be one of {DISPATCH}, got {self.dispatch!r}")
        if self.dynamic_k not in ("", "top_p", "entropy"):
            raise ConfigError(f"dynamic_k must be '', 'top_p' or 'entropy', got {self.dynamic_k!r}")
        k = self.max_k if self.dynamic_k else self.top_k
        if not 1 <= k <= self.num_experts or (self.dynamic_k and self.min_k > self.max_k):
            raise ConfigError(
                f"k must be in [1, num_experts={self.num_experts}] (top_k={self.top_k}, "
                f"min_k={self.min_k}, max_k={self.max_k})"
            )

    @property
    def k_slots(self) -> int:
        return self.max_k if self.dynamic_k else self.top_k


@dataclass
class Routing:
    """A routing decision for T tokens over K slots (slots with weight 0 and expert -1 are unused)."""

    experts: torch.Tensor  # (T, K) long, -1 for unused slots
    weights: torch.Tensor  # (T, K) float, renormalised over the used slots
    probs: torch.Tensor  # (T, E) fp32 softmax over all experts
    logits: torch.Tensor  # (T, E) fp32

    @property
    def active(self) -> torch.Tensor:
        return self.experts >= 0  # (T, K)


class Router(nn.Module):
    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        if cfg.router_mlp:
            self.gate = nn.Sequential(
                nn.Linear(cfg.dim, cfg.dim), nn.GELU(), nn.Linear(cfg.dim, cfg.num_experts, bias=False)
            )
        else:
            self.gate = nn.Linear(cfg.dim, cfg.num_experts, bias=False)
        self.register_buffer("selection_bias", torch.zeros(cfg.num_experts))  # balancing: selection only
        self.register_buffer("expert_scale", torch.ones(cfg.num_experts))  # cold start ramp
        self.register_buffer("threshold", torch.tensor(float(cfg.top_p)))  # dynamic-k controller state

    def forward(self, x_TD: torch.Tensor) -> Routing:
        cfg = self.cfg
        logits_TE = self._logits(x_TD)
        probs_TE = torch.softmax(logits_TE / cfg.temperature, dim=-1)
        gated_TE = probs_TE * self.expert_scale  # new experts start with a small share
        scores_TE = gated_TE + self.selection_bias
        K = cfg.k_slots
        _, experts_TK = scores_TE.topk(K, dim=-1)
        weights_TK = gated_TE.gather(1, experts_TK)
        if cfg.dynamic_k:
            keep_TK = self._dynamic_mask(gated_TE, weights_TK)
            experts_TK = torch.where(keep_TK, experts_TK, torch.full_like(experts_TK, -1))
            weights_TK = torch.where(keep_TK, weights_TK, torch.zeros_like(weights_TK))
        weights_TK = weights_TK / weights_TK.sum(-1, keepdim=True).clamp(min=1e-9)
        return Routing(experts_TK, weights_TK, probs_TE, logits_TE)

    def _logits(self, x_TD: torch.Tensor) -> torch.Tensor:
        """Router logits in fp32 whatever the model's dtype (routing decisions are precision-sensitive)."""
        h = x_TD.float()
        for layer in self.gate if isinstance(self.gate, nn.Sequential) else [self.gate]:
            if isinstance(layer, nn.Linear):
                h = F.linear(h, layer.weight.float(), None if layer.bias is None else layer.bias.float())
            else:
                h = layer(h)
        return h

    def _dynamic_mask(self, probs_TE: torch.Tensor, chosen_TK: torch.Tensor) -> torch.Tensor:
        """Which of the K slots (sorted by probability) each token uses."""
        cfg = self.cfg
        K = chosen_TK.shape[1]
        if cfg.dynamic_k == "top_p":
            norm = chosen_TK / probs_TE.sum(-1, keepdim=True)
            before = norm.cumsum(-1) - norm  # probability mass of the slots before each slot
            count_T = (before < self.threshold).sum(-1)
        else:  # entropy: exp(H) is the "effective number" of experts, scaled by the controller
            entropy_T = -(probs_TE * probs_TE.clamp(min=1e-9).log()).sum(-1)
            count_T = torch.round(entropy_T.exp() * self.threshold / 0.5)
        count_T = count_T.clamp(cfg.min_k, cfg.max_k).long()
        return torch.arange(K, device=chosen_TK.device)[None] < count_T[:, None]

    @torch.no_grad()
    def update(self, routing: Routing) -> None:
        """After a training step on ``routing`` alone: bias balancing and the dynamic-k controller."""
        self.update_from(self.load(routing), float(routing.active.sum(-1).float().mean()))

    @torch.no_grad()
    def update_from(self, load_E: torch.Tensor, average_k: float) -> None:
        """Bias balancing from the assignments per expert ``load_E`` and the dynamic-k controller from the average k
        (under expert parallelism both are totals over every process, so every replica of the router moves alike)."""
        cfg = self.cfg
        if cfg.bias_balancing:
            self.selection_bias += cfg.bias_update_rate * torch.sign(load_E.mean() - load_E)
        if cfg.dynamic_k and cfg.target_k > 0:
            step = cfg.target_k_rate * (cfg.target_k - average_k)
            self.threshold.copy_((self.threshold + step).clamp(0.01, 10.0 if cfg.dynamic_k == "entropy" else 0.999))

    def load(self, routing: Routing) -> torch.Tensor:
        """Assignments per expert, (E,) float."""
        experts = routing.experts[routing.active]
        return torch.bincount(experts, minlength=self.cfg.num_experts).float()


def balancing_loss(routing: Routing, num_experts: int) -> torch.Tensor:
    """Switch Transformer load-balancing loss: E * sum_e f_e * P_e, P_e from the full softmax."""
    active = routing.active
    experts = routing.experts[active]
    f_E = torch.bincount(experts, minlength=num_experts).float() / max(1, int(active.sum()))
    P_E = routing.probs.mean(0)
    return num_experts * (f_E * P_E).sum()


def z_loss(routing: Routing) -> torch.Tensor:
    return torch.logsumexp(routing.logits, dim=-1).pow(2).mean()


class Totals:
    """Over which tokens ``route`` forms its totals: here a layer's own; ``expert_parallel.GroupTotals`` sums over
    every process of a group (the same three operations as collectives)."""

    def counts(self, counts: torch.Tensor) -> torch.Tensor:
        """Integer totals (no gradient)."""
        return counts

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """A differentiable sum whose backward sums the gradients the same way."""
        return values

    def gather(self, *rows: torch.Tensor) -> tuple[list[torch.Tensor], slice]:
        """Every process's rows end to end (process order) and where this process's rows lie in them."""
        return list(rows), slice(None)


LOCAL = Totals()


def route(
    router: Router, x_TD: torch.Tensor, training: bool, totals: Totals = LOCAL
) -> tuple[Routing, torch.Tensor, dict[str, Any]]:
    """The routing step of a MoE layer: routing (top-k or dynamic k), capacity (training only), the auxiliary loss
    (balancing + z-loss), the router's balancing updates (training only) and the statistics, with every total
    formed by ``totals``. Returns (routing, auxiliary loss, statistics: load per expert, average k, dropped
    assignments and tokens, all totals)."""
    cfg = router.cfg
    E = cfg.num_experts
    routing = router(x_TD)
    if not torch.isfinite(routing.logits).all():  # a NaN or infinity in x reaches every logit of its token
        raise TokenError("MoE input contains NaN or infinite values (or values whose router logits overflow)")
    dropped = x_TD.new_zeros((), dtype=torch.long)
    if training and cfg.capacity_factor > 0:
        routing, dropped = apply_capacity(routing, cfg.capacity_factor, totals)
    active = routing.active
    local = torch.cat(
        [
            torch.bincount(routing.experts[active], minlength=E),
            torch.stack([active.sum(), torch.tensor(x_TD.shape[0], device=x_TD.device), dropped]),
        ]
    )
    counts = totals.counts(local)
    load_E = counts[:E].float()
    assigned, tokens, dropped_total = counts[E:].tolist()
    average_k = assigned / max(1, tokens)
    aux = x_TD.new_zeros((), dtype=torch.float32)
    if training:
        # Switch balancing E * sum_e f_e * P_e (P_e over the full softmax) and the z-loss, both over all tokens
        lse_T = torch.logsumexp(routing.logits, dim=-1)
        sums = totals.sum(torch.cat([routing.probs.sum(0), lse_T.pow(2).sum()[None]]))
        P_E = sums[:E] / max(1, tokens)
        f_E = load_E / max(1, assigned)
        aux = cfg.aux_loss_weight * E * (f_E * P_E).sum() + cfg.z_loss_weight * sums[E] / max(1, tokens)
        router.update_from(load_E, average_k)
    stats = {"load": load_E.cpu(), "average_k": average_k, "dropped": dropped_total, "tokens": tokens}
    return routing, aux, stats


def apply_capacity(routing: Routing, capacity_factor: float, totals: Totals = LOCAL) -> tuple[Routing, torch.Tensor]:
    """Drop the assignments beyond ceil(capacity_factor * A / E) per expert, lowest probability first (A and the
    ranking over every process's assignments, in process order, under ``totals``); the kept weights renormalised.
    Returns the routing and this process's dropped assignments (a 0-d tensor)."""
    E = routing.probs.shape[1]
    with torch.no_grad():
        (experts_TK, weights_TK), mine = totals.gather(routing.experts, routing.weights.detach())
        experts_TK = _drop_overflow(experts_TK, weights_TK, capacity_factor, E)[mine]
    kept = experts_TK >= 0
    weights = torch.where(kept, routing.weights, torch.zeros_like(routing.weights))
    weights = weights / weights.sum(-1, keepdim=True).clamp(min=1e-9)
    dropped = routing.active.sum() - kept.sum()
    return Routing(experts_TK, weights, routing.probs, routing.logits), dropped


def _drop_overflow(
    experts_TK: torch.Tensor, weights_TK: torch.Tensor, capacity_factor: float, num_experts: int
) -> torch.Tensor:
    capacity = math.ceil(capacity_factor * int((experts_TK >= 0).sum()) / num_experts)
    experts = experts_TK.clone()
    flat_e, flat_w = experts.view(-1), weights_TK.reshape(-1)
    for e in range(num_experts):
        slots = (flat_e == e).nonzero().flatten()
        if len(slots) > capacity:
            order = flat_w[slots].argsort()  # lowest probability first
            flat_e[slots[order[: len(slots) - capacity]]] = -1
    return experts


def sorted_assignments(routing: Routing) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The A active assignments sorted by expert: (token, expert, weight) each ``(A,)``."""
    active = routing.active
    token_A = torch.arange(active.shape[0], device=active.device)[:, None].expand_as(routing.experts)[active]
    expert_A = routing.experts[active]
    weight_A = routing.weights[active]
    order = torch.argsort(expert_A, stable=True)
    return token_A[order], expert_A[order], weight_A[order]


def dispatch_path(cfg: MoEConfig, x: torch.Tensor) -> str:
    if cfg.dispatch != "auto":
        return cfg.dispatch
    return "grouped_mm" if x.is_cuda and x.dtype in (torch.bfloat16, torch.float16) else "segment"


class GroupedExperts(nn.Module):
    """E SwiGLU experts with stacked weights: w1, w3 (E, D, F) and w2 (E, F, D)."""

    def __init__(self, dim: int, hidden_dim: int, num_experts: int) -> None:
        super().__init__()
        self.w1_EDF = nn.Parameter(torch.empty(num_experts, dim, hidden_dim))
        self.w3_EDF = nn.Parameter(torch.empty(num_experts, dim, hidden_dim))
        self.w2_EFD = nn.Parameter(torch.empty(num_experts, hidden_dim, dim))
        for w, fan_in in ((self.w1_EDF, dim), (self.w3_EDF, dim), (self.w2_EFD, hidden_dim)):
            nn.init.normal_(w, std=fan_in**-0.5)

    @classmethod
    def from_weights(cls, w1_EDF: nn.Parameter, w3_EDF: nn.Parameter, w2_EFD: nn.Parameter) -> GroupedExperts:
        """Experts holding the given parameters (no initialisation drawn)."""
        experts = cls.__new__(cls)
        nn.Module.__init__(experts)
        experts.w1_EDF, experts.w3_EDF, experts.w2_EFD = w1_EDF, w3_EDF, w2_EFD
        return experts

    @property
    def num_experts(self) -> int:
        return self.w1_EDF.shape[0]

    def expert(self, e: int, x_AD: torch.Tensor) -> torch.Tensor:
        return (F.silu(x_AD @ self.w1_EDF[e]) * (x_AD @ self.w3_EDF[e])) @ self.w2_EFD[e]

    def grouped(self, x_AD: torch.Tensor, offsets_E: torch.Tensor) -> torch.Tensor:
        """Rows sorted by expert, ``offsets_E`` the int32 cumulative counts: grouped GEMMs over the segments."""
        mm = _grouped_mm()
        h = F.silu(mm(x_AD, self.w1_EDF, offs=offsets_E)) * mm(x_AD, self.w3_EDF, offs=offsets_E)
        return mm(h, self.w2_EFD, offs=offsets_E)


class ExpertSegments(torch.autograd.Function):
    """Dispatch -> SwiGLU experts -> weighted combine as one autograd node, one run of one expert's rows at a time.

    Assignments come sorted by expert (``token_A``, ``weight_A``, ``counts_E``). Forward gathers a run of one
    expert's rows of ``x_TD`` (at most ``_rows_per_piece``: a few MB of hidden rows), runs the expert with the
    routing weight folded into the F-wide hidden rows, and adds the result into ``out_TD``. So the working set is
    one run, and the A x D gathered copy, its A x D output, their weighted copy and the gradients of all three are
    never made (at E64 top-8 each is 8x the layer's input). It keeps each run's two hidden pre-activations (A x F in
    all, what the dense FFN of the same active FLOPs keeps). Backward walks the runs again: it gathers the output
    gradient's rows, writes (first run) or accumulates each expert's weight gradients into their slices of one
    stacked tensor, and adds each run's input gradient into ``grad_x_TD``."""

    @staticmethod
    def forward(ctx: Any, *args: Any) -> torch.Tensor:
        """:func:`expert_segments` on its arguments (``x_TD, weight_A, w1_EDF, w3_EDF, w2_EFD, token_A, counts_E``),
        keeping what backward needs: the six tensors, the counts and each run's hidden pre-activations."""
        ctx.hidden = []
        out_TD = expert_segments(*args, ctx.hidden)
        ctx.save_for_backward(*args[:6])
        ctx.counts_E = args[6]
        return out_TD

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_TD: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x_TD, weight_A, w1_EDF, w3_EDF, w2_EFD, token_A = ctx.saved_tensors
        need_x, need_weight, need_w1, need_w3, need_w2 = ctx.needs_input_grad[:5]
        grad_x_TD = torch.zeros_like(x_TD) if need_x else None
        grad_weight_A = torch.empty_like(weight_A) if need_weight else None
        grad_w1, grad_w3, grad_w2 = (
            _expert_grad(w, ctx.counts_E) if need else None
            for w, need in ((w1_EDF, need_w1), (w3_EDF, need_w3), (w2_EFD, need_w2))
        )
        start = 0
        pieces = _by_expert(token_A, weight_A, ctx.counts_E, _rows_per_piece(w1_EDF.shape[-1]))
        for (e, tokens, weights, first), (h1_NF, h3_NF) in zip(pieces, ctx.hidden, strict=True):
            stop = start + len(tokens)
            grad_ND = grad_TD.index_select(0, tokens)
            act_NF = F.silu(h1_NF)
            gated_NF = act_NF * h3_NF
            grad_gated_NF = grad_ND @ w2_EFD[e].T  # d loss / d (weight x gated)
            if need_weight:
                torch.sum(grad_gated_NF * gated_NF, -1, out=grad_weight_A[start:stop])
            if need_w2:
                _weight_grad(grad_w2[e], gated_NF.mul_(weights[:, None]).T, grad_ND, first)
            grad_gated_NF *= weights[:, None]
            grad_h3_NF = grad_gated_NF * act_NF
            grad_h1_NF = torch.ops.aten.silu_backward(grad_gated_NF * h3_NF, h1_NF)
            if need_w1 or need_w3:
                x_ND = x_TD.index_select(0, tokens)  # gathered just before its GEMMs, so they read it from cache
                if need_w1:
                    _weight_grad(grad_w1[e], x_ND.T, grad_h1_NF, first)
                if need_w3:
                    _weight_grad(grad_w3[e], x_ND.T, grad_h3_NF, first)
            if need_x:
                grad_x_ND = (grad_h1_NF @ w1_EDF[e].T).addmm_(grad_h3_NF, w3_EDF[e].T)
                grad_x_TD.index_add_(0, tokens, grad_x_ND.to(grad_x_TD.dtype))
            start = stop
        return grad_x_TD, grad_weight_A, grad_w1, grad_w3, grad_w2, None, None


def expert_segments(
    x_TD: torch.Tensor,
    weight_A: torch.Tensor,
    w1_EDF: torch.Tensor,
    w3_EDF: torch.Tensor,
    w2_EFD: torch.Tensor,
    token_A: torch.Tensor,
    counts_E: list[int],
    hidden: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> torch.Tensor:
    """The weighted sum of each token's experts, one expert at a time (gather, run, add back); ``hidden`` collects
    each expert's two pre-activations for a backward pass."""
    out_TD = torch.zeros_like(x_TD)
    for e, tokens, weights, _ in _by_expert(token_A, weight_A, counts_E, _rows_per_piece(w1_EDF.shape[-1])):
        x_ND = x_TD.index_select(0, tokens)  # N = this expert's rows
        h1_NF, h3_NF = x_ND @ w1_EDF[e], x_ND @ w3_EDF[e]
        gated_NF = F.silu(h1_NF).mul_(h3_NF).mul_(weights[:, None])  # the routing weight on F-wide rows, not D-wide
        out_TD.index_add_(0, tokens, (gated_NF @ w2_EFD[e]).to(out_TD.dtype))
        if hidden is not None:
            hidden.append((h1_NF, h3_NF))
    return out_TD


def _rows_per_piece(hidden_dim: int) -> int:
    """Rows run through an expert at once: its F-wide hidden rows about 8 MB (float32), at least 256. Larger
    pieces are larger GEMMs: on the 2-core CPU of eval/results/bench_moe_cpu.json, E8/top-2 (F = 1,024) forward
    ran 0.90x the per-expert loop with 256-row pieces (1 MB hidden rows) and 1.0x with 2,048; E64 fwd+bwd gained
    2-3%; 4x larger pieces changed nothing more."""
    return max(256, 2**21 // hidden_dim)


def _weight_grad(out_XY: torch.Tensor, a_XN: torch.Tensor, b_NY: torch.Tensor, first: bool) -> None:
    """One expert's weight gradient: written by its first piece, accumulated by the others."""
    if first:
        torch.mm(a_XN, b_NY, out=out_XY)
    else:
        out_XY.addmm_(a_XN, b_NY)


def _expert_grad(w_EXY: torch.Tensor, counts_E: list[int]) -> torch.Tensor:
    """A stacked weight gradient whose slices backward writes; zeros only for experts without rows."""
    grad = torch.empty_like(w_EXY)
    for e, count in enumerate(counts_E):
        if not count:
            grad[e].zero_()
    return grad


def _by_expert(
    token_A: torch.Tensor, weight_A: torch.Tensor, counts_E: list[int], rows: int
) -> list[tuple[int, torch.Tensor, torch.Tensor, bool]]:
    """(expert, tokens, their routing weights, whether it is the expert's first piece) for runs of at most ``rows``
    assignments of one expert, from assignments sorted by expert."""
    pieces, start = [], 0
    for e, count in enumerate(counts_E):
        for first in range(start, start + count, rows):
            stop = min(start + count, first + rows)
            pieces.append((e, token_A[first:stop], weight_A[first:stop], first == start))
        start += count
    return pieces


def _grouped_mm() -> Any:
    """``F.grouped_mm`` (public since torch 2.10), else the private ``torch._grouped_mm`` it wraps."""
    return getattr(F, "grouped_mm", None) or torch._grouped_mm


class MoE(nn.Module):
    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.router = Router(cfg)
        self.experts = GroupedExperts(cfg.dim, cfg.hidden_dim, cfg.num_experts)
        self.last_stats: dict[str, Any] = {}

    def dispatch_path(self, x: torch.Tensor) -> str:
        return dispatch_path(self.cfg, x)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (..., D) -> (output (..., D), auxiliary loss); routing statistics in ``last_stats``."""
        shape = x.shape
        x_TD = x.reshape(-1, shape[-1])
        if x_TD.shape[0] == 0:
            return x.clone(), x.new_zeros(())
        routing, aux, self.last_stats = route(self.router, x_TD, self.training)
        path = self.dispatch_path(x_TD)
        out_TD = self.reference(x_TD, routing) if path == "loop" else self.sorted_dispatch(x_TD, routing, path)
        return out_TD.reshape(shape), aux

    def sorted_dispatch(self, x_TD: torch.Tensor, routing: Routing, path: str) -> torch.Tensor:
        """Sort the A active assignments by expert, run the experts on contiguous rows, scatter back."""
        token_A, expert_A, weight_A = sorted_assignments(routing)
        counts_E = torch.bincount(expert_A, minlength=self.cfg.num_experts)
        if path == "segment":
            w = self.experts
            args = (x_TD, weight_A, w.w1_EDF, w.w3_EDF, w.w2_EFD, token_A, counts_E.tolist())
            return ExpertSegments.apply(*args) if torch.is_grad_enabled() else expert_segments(*args)
        offsets_E = torch.cumsum(counts_E, 0).to(torch.int32)
        y_AD = self.experts.grouped(x_TD[token_A], offsets_E)
        out_TD = torch.zeros_like(x_TD)
        return out_TD.index_add_(0, token_A, (y_AD * weight_A[:, None]).to(x_TD.dtype))

    def reference(self, x_TD: torch.Tensor, routing: Routing) -> torch.Tensor:
        """HF Mixtral-style per-expert loop: gather each expert's tokens, run it, index_add_ back."""
        out_TD = torch.zeros_like(x_TD)
        for e in range(self.cfg.num_experts):
            token_idx, slot_idx = torch.where(routing.experts == e)
            if len(token_idx) == 0:
                continue
            y = self.experts.expert(e, x_TD[token_idx]) * routing.weights[token_idx, slot_idx, None]
            out_TD.index_add_(0, token_idx, y.to(x_TD.dtype))
        return out_TD

    # --------------------------------------------------------------------------------------------- cold start
    @torch.no_grad()
    def add_experts(self, count: int, initial_scale: float = 0.1) -> None:
        """Grow the layer by ``count`` freshly initialised experts; they enter with a routing-weight multiplier of
        ``initial_scale`` that ``step()`` ramps up, so a trained model is not disrupted."""
        cfg = self.cfg
        old_e = cfg.num_experts
        cfg.num_experts = old_e + count
        experts = GroupedExperts(cfg.dim, cfg.hidden_dim, cfg.num_experts).to(self.experts.w1_EDF)
        for name in ("w1_EDF", "w3_EDF", "w2_EFD"):
            getattr(experts, name)[:old_e] = getattr(self.experts, name)
        self.experts = experts
        router = Router(cfg).to(self.experts.w1_EDF.device)
        gate_old = self.router.gate[-1] if cfg.router_mlp else self.router.gate
        gate_new = router.gate[-1] if cfg.router_mlp else router.gate
        if cfg.router_mlp:
            router.gate[0].load_state_dict(self.router.gate[0].state_dict())
        gate_new.weight[:old_e] = gate_old.weight
        router.selection_bias[:old_e] = self.router.selection_bias
        router.expert_scale[:old_e] = self.router.expert_scale
        router.expert_scale[old_e:] = initial_scale
        router.threshold.copy_(self.router.threshold)
        self.router = router

    @torch.no_grad()
    def step(self, growth: float = 1.5) -> None:
        """One warm-up step for new experts: their routing multiplier grows by ``growth`` up to 1."""
        self.router.expert_scale.mul_(growth).clamp_(max=1.0)
