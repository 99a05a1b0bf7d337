"""Expert parallelism: each process holds E / world experts; tokens travel to their experts by all-to-all.

Legend: T local tokens, D model dim, A local assignments, R rows received for this rank's experts, W world size.

The router is replicated. Each rank routes its own tokens, sorts the assignments by destination rank, exchanges
counts and then rows with ``all_to_all_single`` (the functional collective, which carries autograd, so gradients
flow back through the exchange), runs its local experts on what it received, sends the results back, and combines
them with the routing weights. Works with gloo on CPU and NCCL on GPU.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from mmtok.errors import ConfigError
from mmtok.models.moe import ExpertSegments, MoE, Routing, balancing_loss, expert_segments, z_loss


def _exchange(tensor: torch.Tensor, send_counts: list[int], recv_counts: list[int], group: Any) -> torch.Tensor:
    """all-to-all of rows, differentiable (functional collectives carry autograd: the backward is the reverse
    exchange)."""
    from torch.distributed import _functional_collectives as funcol

    out = funcol.all_to_all_single(tensor.contiguous(), recv_counts, send_counts, group or dist.group.WORLD)
    return funcol.wait_tensor(out)


class ExpertParallelMoE(nn.Module):
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
        self.w1_EDF = nn.Parameter(moe.experts.w1_EDF.detach()[lo:hi].clone())
        self.w3_EDF = nn.Parameter(moe.experts.w3_EDF.detach()[lo:hi].clone())
        self.w2_EFD = nn.Parameter(moe.experts.w2_EFD.detach()[lo:hi].clone())

    def _local_experts(self, x_RD: torch.Tensor, local_R: torch.Tensor) -> torch.Tensor:
        """This rank's experts on the rows it received, each row's output in its own place (``ExpertSegments``
        with unit weights: no sorted copy of the rows and no scatter back)."""
        order = torch.argsort(local_R, stable=True)
        counts = torch.bincount(local_R, minlength=self.per_rank).tolist()
        args = (x_RD, x_RD.new_ones(len(order)), self.w1_EDF, self.w3_EDF, self.w2_EFD, order, counts)
        return ExpertSegments.apply(*args) if torch.is_grad_enabled() else expert_segments(*args)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = x.shape
        x_TD = x.reshape(-1, shape[-1])
        routing: Routing = self.router(x_TD)
        active = routing.active
        token_A = torch.arange(x_TD.shape[0], device=x.device)[:, None].expand_as(routing.experts)[active]
        expert_A = routing.experts[active]
        weight_A = routing.weights[active]
        order = torch.argsort(expert_A, stable=True)  # sorted by expert is sorted by destination rank
        token_A, expert_A, weight_A = token_A[order], expert_A[order], weight_A[order]
        dest_A = expert_A // self.per_rank
        send = torch.bincount(dest_A, minlength=self.world)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)
        send_counts, recv_counts = send.tolist(), recv.tolist()
        x_RD = _exchange(x_TD[token_A], send_counts, recv_counts, self.group)
        local_R = torch.empty(sum(recv_counts), dtype=torch.long, device=x.device)
        dist.all_to_all_single(
            local_R, (expert_A % self.per_rank).contiguous(), recv_counts, send_counts, group=self.group
        )
        y_RD = self._local_experts(x_RD, local_R)
        y_AD = _exchange(y_RD, recv_counts, send_counts, self.group)
        out_TD = torch.zeros_like(x_TD).index_add(0, token_A, (y_AD * weight_A[:, None]).to(x_TD.dtype))
        aux = x.new_zeros((), dtype=torch.float32)
        if self.training:
            aux = self.cfg.aux_loss_weight * balancing_loss(routing, self.cfg.num_experts)
            aux = aux + self.cfg.z_loss_weight * z_loss(routing)
        return out_TD.reshape(shape), aux
