"""The learning-rate schedule and the optimizer's parameter groups every trainer uses."""

from __future__ import annotations

import math
from typing import Any

import torch


def cosine_lr(step: int, total: int, warmup: int, base: float, final_fraction: float = 0.05) -> float:
    """Linear warm-up, then cosine decay to ``final_fraction`` of the base rate."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return base * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * progress)))


def split_decay(model: torch.nn.Module) -> list[dict[str, Any]]:
    """AdamW parameter groups: no weight decay on biases, norms, embeddings and scalars."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "embedding" in name or "norm" in name or "ln_" in name else decay).append(p)
    return [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]
