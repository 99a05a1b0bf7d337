"""``mmtok train vq CONFIG``: train the CLIP-aligned VQ tokenizer.

Loss = L1 + L2 reconstruction + perceptual (teacher patch-token cosine distance between image and reconstruction)
+ commitment + alignment (-cosine between the alignment head's pooled / per-token features and the frozen
teacher's image feature / patch tokens). With ``align_into_encoder = false`` the alignment head is trained as a
probe on detached codes: the ablation that shows what alignment buys the tokens themselves.

Runs on one process, or several under ``torchrun`` (DistributedDataParallel; the codebook's EMA statistics are
all-reduced by vector-quantize-pytorch). Checkpoints every ``checkpoint_every`` steps; ``--resume`` continues.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler

from mmtok.errors import ConfigError
from mmtok.models import checkpoint
from mmtok.models.data import CachedOfflineImages, ImageFiles
from mmtok.models.teacher import Teacher
from mmtok.models.training import TrainLog, cosine_lr, distributed, read_toml_config, split_decay
from mmtok.models.vq import VQConfig, VQTokenizer


@dataclass
class VQTrainConfig:
    steps: int = 3000
    batch_size: int = 32
    lr: float = 3e-4
    weight_decay: float = 0.0
    warmup_steps: int = 100
    data: str = ""  # folder or .jsonl manifest of images; empty: the offline photos and digits
    samples: int = 30000  # offline samples made once and kept in memory
    digit_fraction: float = 0.3
    seed: int = 0
    l1_weight: float = 1.0
    l2_weight: float = 1.0
    perceptual_weight: float = 0.2
    align_weight: float = 1.0  # pooled feature vs the teacher's image feature
    align_token_weight: float = 0.5  # per-token features vs the teacher's patch tokens
    align_into_encoder: bool = True  # False: ablation (alignment head is a probe on detached codes)
    num_workers: int = 0
    log_every: int = 25
    checkpoint_every: int = 250
    out: str = "models/weights/vq-clip-tiny"
    name: str = "vq-clip-tiny"


def _batches(loader: DataLoader, sampler: DistributedSampler | None) -> Iterator[torch.Tensor]:
    epoch = 0
    while True:
        if sampler is not None:
            sampler.set_epoch(epoch)
        for batch in loader:
            images = batch[0]
            if isinstance(images, list):  # ImageFiles: drop the files that failed to decode
                images = [im for im in images if im is not None]
                if not images:
                    continue
                images = torch.stack(images)
            yield images
        epoch += 1


def _collate_files(items: list[tuple[torch.Tensor | None, str]]) -> tuple[list, list[str]]:
    return [im for im, _ in items], [p for _, p in items]


def make_loader(vq_cfg: VQConfig, train: VQTrainConfig, rank: int, world: int) -> Iterator[torch.Tensor]:
    if train.data:
        dataset: Any = ImageFiles(train.data, vq_cfg.image_size, vq_cfg.fit)
        sampler = DistributedSampler(dataset, world, rank, seed=train.seed) if world > 1 else None
        loader = DataLoader(
            dataset,
            train.batch_size,
            shuffle=sampler is None,
            sampler=sampler,
            drop_last=True,
            num_workers=train.num_workers,
            collate_fn=_collate_files,
        )
        return _batches(loader, sampler)
    dataset = CachedOfflineImages(vq_cfg.image_size, train.samples, train.digit_fraction, train.seed, rank)
    loader = DataLoader(
        dataset,
        train.batch_size,
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(train.seed + rank),
    )
    return _batches(loader, None)


def vq_losses(
    model: torch.nn.Module, teacher: Teacher, x: torch.Tensor, train: VQTrainConfig
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Total loss and its parts for one batch of images (B, 3, S, S); ``model`` may be DDP-wrapped."""
    out = model(x, align_detached=not train.align_into_encoder)
    recon = out["recon"]
    l1 = (recon - x).abs().mean()
    l2 = F.mse_loss(recon, x)
    with torch.no_grad():
        t_pooled, t_tokens = teacher.encode_image(x, tokens=True)  # (B, D), (B, Nt, D)
    _, r_tokens = teacher.encode_image(recon, tokens=True)  # gradients reach the decoder through the teacher
    perceptual = (1 - (r_tokens * t_tokens).sum(-1)).mean()
    a_tokens, a_pooled = out["align_tokens"], out["align_pooled"]  # (B, N, D), (B, D)
    grid = out["codes"].shape[-1]
    side = int(t_tokens.shape[1] ** 0.5)
    if side != grid:  # teacher patch grid differs from the token grid: resample the targets
        t_map = t_tokens.transpose(1, 2).reshape(len(x), -1, side, side)
        t_tokens = F.normalize(
            F.interpolate(t_map, size=(grid, grid), mode="bilinear", align_corners=False).flatten(2).transpose(1, 2),
            dim=-1,
        )
    align = (1 - (a_pooled * t_pooled).sum(-1)).mean()
    align_tokens = (1 - (a_tokens * t_tokens).sum(-1)).mean()
    loss = (
        train.l1_weight * l1
        + train.l2_weight * l2
        + train.perceptual_weight * perceptual
        + out["commit"]
        + train.align_weight * align
        + train.align_token_weight * align_tokens
    )
    parts = {
        "l1": l1.item(),
        "percep": perceptual.item(),
        "align": align.item(),
        "align_tok": align_tokens.item(),
        "commit": out["commit"].item(),
        "ids": out["ids"],
    }
    return loss, parts


def codebook_stats(counts: torch.Tensor) -> tuple[float, float]:
    """(fraction of codes used, perplexity) from a histogram of code ids."""
    total = counts.sum()
    if total == 0:
        return 0.0, 0.0
    p = counts.double() / total
    entropy = -(p[p > 0] * p[p > 0].log()).sum()
    return float((counts > 0).double().mean()), float(entropy.exp())


def train_vq(
    config_path: str | os.PathLike[str],
    *,
    out: str | None = None,
    steps: int | None = None,
    teacher: str | None = None,
    data: str | None = None,
    resume: bool = False,
    device: str = "auto",
    command: str = "",
) -> Path | None:
    cfg = read_toml_config(config_path, {"model": VQConfig, "train": VQTrainConfig})
    vq_cfg: VQConfig = cfg["model"]
    train: VQTrainConfig = cfg["train"]
    if out:
        train.out = out
    if steps is not None:
        train.steps = steps
    if teacher:
        vq_cfg.teacher = teacher
    if data:
        train.data = data
    out_dir = Path(train.out)
    state_path = out_dir / "train_state.safetensors"
    with distributed(device) as (ctx, dev):
        torch.manual_seed(train.seed)  # same initial weights on every rank
        frozen = Teacher.from_pretrained(vq_cfg.teacher).to(dev).requires_grad_(False)
        if frozen.embed_dim != vq_cfg.teacher_dim:
            raise ConfigError(
                f"{config_path}: teacher_dim {vq_cfg.teacher_dim} but teacher {vq_cfg.teacher!r} "
                f"embeds into {frozen.embed_dim} dimensions"
            )
        tok = VQTokenizer(vq_cfg, name=train.name).to(dev)
        optimizer = torch.optim.AdamW(split_decay(tok), lr=train.lr, weight_decay=train.weight_decay, betas=(0.9, 0.95))
        start = 0
        if resume and state_path.is_file():
            start, _ = checkpoint.load_training_state(state_path, tok, optimizer)
        model = torch.nn.parallel.DistributedDataParallel(tok) if ctx.enabled else tok
        batches = make_loader(vq_cfg, train, ctx.rank, ctx.world_size)
        log = TrainLog(out_dir, train.steps, start, ctx.is_main, "train vq")
        counts = torch.zeros(tok.codebook_size, dtype=torch.long)
        for step in range(start, train.steps):
            for group in optimizer.param_groups:
                group["lr"] = cosine_lr(step, train.steps, train.warmup_steps, train.lr)
            x = next(batches).to(dev)
            loss, parts = vq_losses(model, frozen, x, train)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            ids = parts.pop("ids")
            counts += torch.bincount(ids.flatten().long().cpu(), minlength=tok.codebook_size)
            if (step + 1) % train.log_every == 0:
                usage, perplexity = codebook_stats(counts)
                counts.zero_()
                log.step(step + 1, {"loss": ctx.all_mean(loss.item(), dev), **parts, "usage": usage, "ppl": perplexity})
            else:
                log.step(step + 1)
            if ctx.is_main and (step + 1) % train.checkpoint_every == 0:
                checkpoint.save_training_state(state_path, tok, optimizer, step + 1, {"config": str(config_path)})
        log.close()
        if not ctx.is_main:
            return None
        tok.eval().cpu().save_pretrained(
            out_dir,
            trained_by=command or f"mmtok train vq {config_path}",
            training={"steps": train.steps, "train": dataclasses.asdict(train)},
        )
        return out_dir
