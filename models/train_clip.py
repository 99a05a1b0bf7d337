"""``mmtok train clip CONFIG``: train mmtok's small CLIP teacher on offline captioned images.

The model is open_clip's ``CLIP`` class, the loss open_clip's ``ClipLoss``; the data are real photos with their
captions and handwritten MNIST digits with captions like "a photo of the digit seven" (``mmtok.models.data``).
After training, zero-shot accuracy on the held-out digits is measured and stored in the folder's ``config.json``.
The trainer is its spec (:class:`mmtok.models.training.TrainSpec`); schedule, checkpoints, ``--resume`` and
``torchrun`` come from :class:`mmtok.models.training.Loop`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmtok.models.data import DIGIT_PROMPTS, DIGIT_WORDS, CachedOfflineImages, heldout_digits
from mmtok.models.teacher import Teacher, TeacherConfig
from mmtok.models.training import Job, LoopConfig, Part, Setup, ShuffledBatches, TrainSpec, split_decay


@dataclass
class ClipTrainConfig(LoopConfig):
    steps: int = 3000
    batch_size: int = 128
    weight_decay: float = 0.1
    warmup_steps: int = 200
    digit_fraction: float = 0.5  # share of MNIST digits in each batch; the rest are photo crops
    samples: int = 30000  # distinct (image, caption) samples, made once and kept in memory
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


def clip_job(run: Setup) -> Job:
    """The teacher with its AdamW, this rank's captioned images in shuffled batches, the CLIP loss; the temperature
    is clamped after each step and the held-out digits' zero-shot accuracy measured at the end."""
    import open_clip

    model_cfg, train, ctx, dev = run.model, run.train, run.ctx, run.device
    teacher = Teacher(model_cfg, name=train.name).to(dev)
    optimizer = torch.optim.AdamW(split_decay(teacher), lr=train.lr, weight_decay=train.weight_decay)
    dataset = CachedOfflineImages(model_cfg.image_size, train.samples, train.digit_fraction, train.seed, ctx.rank)
    data = ShuffledBatches(dataset, train.batch_size, train.seed)
    loss_fn = open_clip.loss.ClipLoss(rank=ctx.rank, world_size=ctx.world_size)

    def step(index: int) -> dict[str, float | torch.Tensor]:
        images, captions = next(data)
        tokens = teacher.tokenize(list(captions)).to(dev)
        image_features = teacher.encode_image(images.to(dev))
        text_features = torch.nn.functional.normalize(teacher.clip.encode_text(tokens), dim=-1)
        loss = loss_fn(image_features, text_features, teacher.clip.logit_scale.exp())
        loss.backward()
        return {"loss": loss.detach(), "lr": optimizer.param_groups[0]["lr"]}

    @torch.no_grad()
    def clamp_temperature(index: int) -> None:
        teacher.clip.logit_scale.clamp_(0, 4.6052)  # temperature at most 100, as in CLIP

    def evaluate() -> dict[str, float]:
        images, labels = heldout_digits(model_cfg.image_size)
        return {"heldout_digit_zero_shot_accuracy": round(digit_zero_shot(teacher.eval(), images, labels), 4)}

    return Job(
        Part(teacher, optimizer),
        step,
        record=lambda result: result.evaluation,
        state={"batches": data.taken},
        after_step=clamp_temperature,
        evaluate=evaluate,
    )


train_clip = TrainSpec("clip", TeacherConfig, ClipTrainConfig, clip_job, seed_per_rank=True)
