"""``mmtok train clip CONFIG``: train mmtok's small CLIP teacher on offline captioned images.

The model is open_clip's ``CLIP`` class, the loss open_clip's ``ClipLoss``; the data are real photos with their
captions and handwritten MNIST digits with captions like "a photo of the digit seven" (``mmtok.models.data``).
After training, zero-shot accuracy on the held-out digits is measured and stored in the folder's ``config.json``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from mmtok.models import checkpoint
from mmtok.models.data import DIGIT_PROMPTS, DIGIT_WORDS, CachedOfflineImages, heldout_digits
from mmtok.models.teacher import Teacher, TeacherConfig
from mmtok.models.training import TrainLog, cosine_lr, distributed, read_toml_config, split_decay


@dataclass
class ClipTrainConfig:
    steps: int = 3000
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.1
    warmup_steps: int = 200
    digit_fraction: float = 0.5  # share of MNIST digits in each batch; the rest are photo crops
    samples: int = 30000  # distinct (image, caption) samples, made once and kept in memory
    seed: int = 0
    log_every: int = 25
    checkpoint_every: int = 250
    out: str = "models/weights/clip-tiny"
    name: str = "clip-tiny"


@torch.no_grad()
def digit_zero_shot(teacher: Teacher, images: torch.Tensor, labels: torch.Tensor, batch: int = 250) -> float:
    """Zero-shot accuracy over the ten digit classes, prompts averaged."""
    weights = teacher.zero_shot_weights(list(DIGIT_WORDS), DIGIT_PROMPTS)
    correct = 0
    device = weights.device
    for start in range(0, len(labels), batch):
        features = teacher.encode_image(images[start : start + batch].to(device))
        correct += int((features @ weights.T).argmax(-1).cpu().eq(labels[start : start + batch]).sum())
    return correct / len(labels)


def _forever(loader: DataLoader) -> Iterator[Any]:
    while True:
        yield from loader


def train_clip(
    config_path: str | os.PathLike[str],
    *,
    out: str | None = None,
    steps: int | None = None,
    resume: bool = False,
    device: str = "auto",
    command: str = "",
) -> Path | None:
    import open_clip

    cfg = read_toml_config(config_path, {"model": TeacherConfig, "train": ClipTrainConfig})
    model_cfg: TeacherConfig = cfg["model"]
    train: ClipTrainConfig = cfg["train"]
    if out:
        train.out = out
    if steps is not None:
        train.steps = steps
    out_dir = Path(train.out)
    state_path = out_dir / "train_state.safetensors"
    with distributed(device) as (ctx, dev):
        torch.manual_seed(train.seed + ctx.rank)
        teacher = Teacher(model_cfg, name=train.name).to(dev)
        optimizer = torch.optim.AdamW(split_decay(teacher), lr=train.lr, weight_decay=train.weight_decay)
        start = 0
        if resume and state_path.is_file():
            start, _ = checkpoint.load_training_state(state_path, teacher, optimizer)
        model = torch.nn.parallel.DistributedDataParallel(teacher) if ctx.enabled else teacher
        loss_fn = open_clip.loss.ClipLoss(rank=ctx.rank, world_size=ctx.world_size)
        dataset = CachedOfflineImages(model_cfg.image_size, train.samples, train.digit_fraction, train.seed, ctx.rank)
        data = _forever(
            DataLoader(
                dataset,
                batch_size=train.batch_size,
                shuffle=True,
                drop_last=True,
                generator=torch.Generator().manual_seed(train.seed + start),
            )
        )
        log = TrainLog(out_dir, train.steps, start, ctx.is_main, "train clip")
        module = model.module if ctx.enabled else model
        for step in range(start, train.steps):
            for group in optimizer.param_groups:
                group["lr"] = cosine_lr(step, train.steps, train.warmup_steps, train.lr)
            images, captions = next(data)
            tokens = module.tokenize(list(captions)).to(dev)
            image_features = module.encode_image(images.to(dev))
            text_features = torch.nn.functional.normalize(module.clip.encode_text(tokens), dim=-1)
            loss = loss_fn(image_features, text_features, module.clip.logit_scale.exp())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            with torch.no_grad():
                module.clip.logit_scale.clamp_(0, 4.6052)  # temperature at most 100, as in CLIP
            if (step + 1) % train.log_every == 0:
                log.step(step + 1, {"loss": ctx.all_mean(loss.item(), dev), "lr": optimizer.param_groups[0]["lr"]})
            else:
                log.step(step + 1)
            if ctx.is_main and (step + 1) % train.checkpoint_every == 0:
                checkpoint.save_training_state(state_path, teacher, optimizer, step + 1, {"config": str(config_path)})
        log.close()
        if not ctx.is_main:
            return None
        teacher.eval()
        images, labels = heldout_digits(model_cfg.image_size)
        accuracy = digit_zero_shot(teacher, images, labels)
        stats: dict[str, Any] = {
            "steps": train.steps,
            "heldout_digit_zero_shot_accuracy": round(accuracy, 4),
            "train": dataclasses.asdict(train),
        }
        teacher.cpu().save_pretrained(out_dir, trained_by=command or f"mmtok train clip {config_path}", training=stats)
        return out_dir
