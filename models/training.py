"""What every mmtok training command shares: TOML configs, device and process-group set-up, the learning-rate
schedule, resumable checkpoints, and a progress bar with the live metrics.

Multi-process runs use ``torchrun``: ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` in the environment turn on
``torch.distributed`` (gloo on CPU, NCCL on CUDA); rank 0 logs and writes files.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from mmtok.errors import ConfigError
from mmtok.files import read_toml

C = TypeVar("C")


def read_toml_config(path: str | os.PathLike[str], sections: dict[str, type]) -> dict[str, Any]:
    """Parse a training config: each ``[section]`` into its dataclass, unknown sections and keys named."""
    path = Path(path)
    data = read_toml(path, "training config")
    unknown = sorted(set(data) - set(sections))
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {', '.join(unknown)}; expected {', '.join(sections)}")
    return {name: dataclass_from(cls, data.get(name, {}), f"{path} [{name}]") for name, cls in sections.items()}


def dataclass_from(cls: type[C], values: dict[str, Any], where: str) -> C:
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(fields)}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None


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
def distributed(device_request: str = "auto") -> Iterator[tuple[Distributed, torch.device]]:
    """Set up ``torch.distributed`` when launched by torchrun; yields (context, device)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    ctx = Distributed(int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0")))
    device = select_device(device_request)
    if ctx.enabled:
        if device.type == "cuda":
            device = torch.device("cuda", ctx.local_rank)
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        yield ctx, device
    finally:
        if ctx.enabled:
            dist.destroy_process_group()


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


class TrainLog:
    """Progress bar with live metrics on rank 0, plus ``train_log.jsonl`` in the output folder."""

    def __init__(self, out: Path, total_steps: int, start_step: int, enabled: bool, title: str) -> None:
        self.enabled = enabled
        self.out = out
        self.started = time.perf_counter()
        self.bar = None
        if not enabled:
            return
        out.mkdir(parents=True, exist_ok=True)
        self.log = (out / "train_log.jsonl").open("a", encoding="utf-8")
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn(title),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[metrics]}"),
            transient=False,
        )
        self.bar.start()
        self.task = self.bar.add_task(title, total=total_steps, completed=start_step, metrics="")

    def step(self, step: int, metrics: dict[str, float] | None = None) -> None:
        if not self.enabled:
            return
        if metrics:
            text = "  ".join(f"{k} {v:.4g}" for k, v in metrics.items())
            self.bar.update(self.task, completed=step, metrics=text)
            record = {"step": step, "seconds": round(time.perf_counter() - self.started, 2), **metrics}
            self.log.write(json.dumps(record) + "\n")
            self.log.flush()
        else:
            self.bar.update(self.task, completed=step)

    def close(self) -> None:
        if self.enabled:
            self.bar.stop()
            self.log.close()
