"""Where a run trains: the device, and the process group ``torchrun`` sets up (``RANK``/``WORLD_SIZE``/``LOCAL_RANK``
in the environment: gloo on CPU, NCCL on CUDA)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist

from mmtok.errors import ConfigError


def select_device(requested: str = "auto") -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda was asked for, but no CUDA device is available")
    return device


@dataclasses.dataclass
class Distributed:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_mean(self, value: float, device: torch.device) -> float:
        if not self.enabled:
            return value
        t = torch.tensor([value], device=device, dtype=torch.float64)
        dist.all_reduce(t)
        return float(t.item()) / self.world_size

    @contextmanager
    def main_first(self) -> Iterator[None]:
        """Rank 0 runs the block first (it fills a cache), then the other ranks (they read it)."""
        if self.enabled and not self.is_main:
            dist.barrier()
        try:
            yield
        finally:
            if self.enabled and self.is_main:
                dist.barrier()


@contextmanager
def distributed(device_request: str = "auto") -> Iterator[tuple[Distributed, torch.device]]:
    """Set up ``torch.distributed`` when launched by torchrun; yields (context, device). A process group the
    caller has already set up is used, and left to it to close."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    ctx = Distributed(int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0")))
    device = select_device(device_request)
    created = False
    if ctx.enabled:
        if device.type == "cuda":
            device = torch.device("cuda", ctx.local_rank)
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
            created = True
    try:
        yield ctx, device
        if created:
            dist.barrier()  # every rank is done (rank 0 has saved) before any closes the group
    finally:
        if created:
            dist.destroy_process_group()
