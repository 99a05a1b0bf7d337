"""Expert parallelism: each process holds E / world experts; tokens travel to their experts by all-to-all.

Legend: T local tokens, D model dim, A local assignments, R rows received for this rank's experts, W world size.

``ExpertParallelMoE`` is a drop-in for ``moe.MoE``: the same ``forward`` (x -> output, auxiliary loss), the same
``last_stats`` and the same routing step (``moe.route``), whose totals here run over every process of the group
(``GroupTotals``), so with the batch split over the processes:

- the auxiliary loss (balancing + z-loss) each process returns is the single-process layer's on the whole batch;
  its backward all-reduces too, so after ``average_gradients`` the router's gradient is the single-process one;
- capacity (training) is decided over every process's assignments in process order: the single-process layer's on
  the processes' tokens end to end;
- the router's bias balancing and dynamic-k controller move from the totals, so every replica of the router stays
  equal to the single-process one;
- ``last_stats`` (load per expert, average k, dropped, tokens) are totals; ``local_tokens`` is this process's count.

The router is replicated. Each rank routes its own tokens, sorts the assignments by destination rank, exchanges
counts and then rows with ``all_to_all_single`` (differentiable here: the backward is the reverse exchange), runs its
local experts on what it received, sends the results back, and combines them with the routing weights. Plain
``torch.distributed`` collectives (tested with gloo on CPU; NCCL not tested). Every process of the group must run
every layer, in the same mode (train or eval), even with no tokens of its own, as for any collective.

Training: ``expert_parallel(model)`` converts every MoE layer of a model in place; after ``backward``,
``average_gradients(model)`` does what DDP would (averages the replicated parameters' gradients) and divides each
expert's gradient by W (it sums every process's loss, each of which counts 1/W); the result is the single-process
gradient of the mean loss. (Wrapping the model in DDP instead would average the expert slices, which are
different parameters on each process: their names would have to be left out of DDP and their gradients divided by
W; that is not tested here.) Saving: ``gather_state_dict(model)`` (every process calls it) gives the single-process
state dict; load it into a single-process copy and save that (``checkpoint.save_pretrained`` refuses a model that
holds only a slice of its experts).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from mmtok.errors import ConfigError
from mmtok.models.moe import (
    ExpertSegments,
    GroupedExperts,
    MoE,
    Totals,
    dispatch_path,
    expert_segments,
    route,
    sorted_assignments,
)

EXPERT_WEIGHTS = ("w1_EDF", "w3_EDF", "w2_EFD")


class _AllReduceSum(torch.autograd.Function):
    """Sum over the group; the backward sums the gradients over the group too."""

    @staticmethod
    def forward(ctx: Any, values: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        out = values.contiguous().clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _Exchange(torch.autograd.Function):
    """all-to-all of rows; the backward is the reverse exchange of their gradients."""

    @staticmethod
    def forward(ctx: Any, rows: torch.Tensor, send: list[int], recv: list[int], group: Any) -> torch.Tensor:
        ctx.counts = (send, recv, group)
        return _all_to_all(rows, send, recv, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        send, recv, group = ctx.counts
        return _all_to_all(grad, recv, send, group), None, None, None


def _all_to_all(rows: torch.Tensor, send: list[int], recv: list[int], group: Any) -> torch.Tensor:
    out = rows.new_empty((sum(recv), *rows.shape[1:]))
    dist.all_to_all_single(out, rows.contiguous(), recv, send, group=group)
    return out


class GroupTotals(Totals):
    """``moe.route``'s totals over every process of a group."""

    def __init__(self, group: Any = None) -> None:
        self.group = group

    def counts(self, counts: torch.Tensor) -> torch.Tensor:
        counts = counts.clone()
        dist.all_reduce(counts, group=self.group)
        return counts

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        return _AllReduceSum.apply(values, self.group)

    def gather(self, *rows: torch.Tensor) -> tuple[list[torch.Tensor], slice]:
        """Rows of every process (``(T_r, ...)`` each, T_r may differ) end to end, in process order; exact for
        integers and floats up to 53 bits (they travel as float64)."""
        world, rank = dist.get_world_size(self.group), dist.get_rank(self.group)
        T = rows[0].shape[0]
        widths = [math.prod(r.shape[1:]) for r in rows]
        sizes = torch.zeros(world, dtype=torch.long, device=rows[0].device)
        sizes[rank] = T
        dist.all_reduce(sizes, group=self.group)
        sizes_list = sizes.tolist()
        packed = torch.cat([r.reshape(T, w).double() for r, w in zip(rows, widths, strict=True)], 1)
        padded = packed.new_zeros(max(sizes_list), sum(widths))
        padded[:T] = packed
        parts = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded, group=self.group)
        every = torch.cat([part[:n] for part, n in zip(parts, sizes_list, strict=True)])
        columns = every.split(widths, dim=1)
        out = [c.reshape(len(every), *r.shape[1:]).to(r.dtype) for c, r in zip(columns, rows, strict=True)]
        start = sum(sizes_list[:rank])
        return out, slice(start, start + T)


class ExpertParallelMoE(nn.Module):
    """The expert-parallel version of a ``MoE`` layer: its router (shared) and this rank's slice of its experts."""

    expert_parallel = True  # holds a slice of the experts (checkpoint.save_pretrained refuses such a model)

    def __init__(self, moe: MoE, group: Any = None) -> None:
        super().__init__()
        if not dist.is_initialized():
            raise ConfigError("expert parallelism needs torch.distributed to be initialised (torchrun)")
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        cfg = moe.cfg
        if cfg.num_experts % self.world:
            raise ConfigError(f"{cfg.num_experts} experts cannot be split evenly over {self.world} processes")
        self.cfg = cfg
        self.per_rank = cfg.num_experts // self.world
        self.router = moe.router
        lo, hi = self.rank * self.per_rank, (self.rank + 1) * self.per_rank
        weights = [getattr(moe.experts, name) for name in EXPERT_WEIGHTS]
        self.experts = GroupedExperts.from_weights(
            *(nn.Parameter(w.detach()[lo:hi].clone(), requires_grad=w.requires_grad) for w in weights)
        )
        self.totals = GroupTotals(group)
        self.last_stats: dict[str, Any] = {}

    @property
    def first_expert(self) -> int:
        return self.rank * self.per_rank

    def dispatch_path(self, x: torch.Tensor) -> str:
        return dispatch_path(self.cfg, x)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (..., D) -> (output (..., D), auxiliary loss over every process's tokens); ``last_stats`` totals."""
        shape = x.shape
        x_TD = x.reshape(-1, shape[-1])
        routing, aux, stats = route(self.router, x_TD, self.training, self.totals)
        token_A, expert_A, weight_A = sorted_assignments(routing)  # sorted by expert is sorted by destination
        send = torch.bincount(expert_A // self.per_rank, minlength=self.world)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)
        send_counts, recv_counts = send.tolist(), recv.tolist()
        x_RD = _Exchange.apply(x_TD[token_A], send_counts, recv_counts, self.group)
        local_R = _all_to_all((expert_A % self.per_rank).contiguous(), send_counts, recv_counts, self.group)
        y_RD = self._local_experts(x_RD, local_R, self.dispatch_path(x_TD))
        y_AD = _Exchange.apply(y_RD, recv_counts, send_counts, self.group)
        out_TD = torch.zeros_like(x_TD).index_add(0, token_A, (y_AD * weight_A[:, None]).to(x_TD.dtype))
        self.last_stats = {**stats, "local_tokens": x_TD.shape[0]}
        return out_TD.reshape(shape), aux

    def _local_experts(self, x_RD: torch.Tensor, local_R: torch.Tensor, path: str) -> torch.Tensor:
        """This rank's experts on the rows it received, each row's output in its own place."""
        w = self.experts
        if path == "loop":
            out_RD = torch.zeros_like(x_RD)
            for e in range(self.per_rank):
                rows = (local_R == e).nonzero().flatten()
                if len(rows):
                    out_RD.index_add_(0, rows, w.expert(e, x_RD[rows]).to(x_RD.dtype))
            return out_RD
        order = torch.argsort(local_R, stable=True)
        counts = torch.bincount(local_R, minlength=self.per_rank)
        if path == "grouped_mm":
            y_RD = w.grouped(x_RD[order], torch.cumsum(counts, 0).to(torch.int32))
            return torch.zeros_like(x_RD).index_add(0, order, y_RD.to(x_RD.dtype))
        # ExpertSegments with unit weights: no sorted copy of the rows and no scatter back
        args = (x_RD, x_RD.new_ones(len(order)), w.w1_EDF, w.w3_EDF, w.w2_EFD, order, counts.tolist())
        return ExpertSegments.apply(*args) if torch.is_grad_enabled() else expert_segments(*args)

    @torch.no_grad()
    def step(self, growth: float = 1.5) -> None:
        """One cold-start warm-up step (as ``MoE.step``; the same on every rank)."""
        self.router.expert_scale.mul_(growth).clamp_(max=1.0)

    def add_experts(self, count: int, initial_scale: float = 0.1) -> None:
        raise ConfigError("add experts to the single-process model, then convert it with expert_parallel()")


def expert_parallel(model: nn.Module, group: Any = None, broadcast: bool = True) -> nn.Module:
    """Replace every ``MoE`` layer of ``model`` in place by its ``ExpertParallelMoE`` (this rank keeping its slice of
    the experts) and return the model (a bare ``MoE`` is returned converted). ``broadcast``: first copy every
    parameter and buffer from the group's first process, so every process starts from the same model."""
    if broadcast:
        src = 0 if group is None else dist.get_global_rank(group, 0)
        with torch.no_grad():
            for tensor in [*model.parameters(), *model.buffers()]:
                dist.broadcast(tensor.data, src=src, group=group)
    if isinstance(model, MoE):
        return ExpertParallelMoE(model, group)
    converted = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, MoE):
                setattr(module, name, ExpertParallelMoE(child, group))
                converted += 1
    if not converted:
        raise ConfigError(f"{type(model).__name__} has no MoE layer to make expert-parallel")
    return model


def _expert_parallel_layers(model: nn.Module) -> list[tuple[str, ExpertParallelMoE]]:
    return [(name, m) for name, m in model.named_modules() if isinstance(m, ExpertParallelMoE)]


@torch.no_grad()
def average_gradients(model: nn.Module, group: Any = None) -> None:
    """After ``backward`` on each process's loss: average the replicated parameters' gradients over the group (what
    DDP does; a missing gradient counts as zero) and divide the experts' gradients by the world size. Every process
    calls it. The result is the gradient of the mean of the processes' losses, as in a single process."""
    world = dist.get_world_size(group)
    expert_ids = {id(p) for _, layer in _expert_parallel_layers(model) for p in layer.experts.parameters()}
    shared: dict[tuple[torch.dtype, torch.device], list[nn.Parameter]] = {}
    for p in model.parameters():
        if not p.requires_grad:
            continue
        if id(p) in expert_ids:
            if p.grad is not None:
                p.grad.div_(world)
        else:
            shared.setdefault((p.dtype, p.device), []).append(p)
    for params in shared.values():  # one all-reduce per dtype and device
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
        dist.all_reduce(flat, group=group)
        flat.div_(world)
        for p, g in zip(params, flat.split([p.numel() for p in params]), strict=True):
            if p.grad is None:
                p.grad = g.view_as(p).clone()
            else:
                p.grad.copy_(g.view_as(p))


@torch.no_grad()
def gather_state_dict(model: nn.Module, group: Any = None) -> dict[str, torch.Tensor]:
    """The single-process state dict of an expert-parallel model: its own, with every layer's expert slices
    gathered from the group (every process calls it; every process gets it). Load it into a single-process copy
    (e.g. ``Backbone(model.config)``) to save or evaluate."""
    state = dict(model.state_dict())
    for name, layer in _expert_parallel_layers(model):
        prefix = f"{name}." if name else ""
        for weight in EXPERT_WEIGHTS:
            mine = getattr(layer.experts, weight).detach().contiguous()
            parts = [torch.empty_like(mine) for _ in range(layer.world)]
            dist.all_gather(parts, mine, group=layer.group)
            state[f"{prefix}experts.{weight}"] = torch.cat(parts)
    return state
