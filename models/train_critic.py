"""``mmtok train critic CONFIG``: train the token-relevance critic used by MI truncation.

Pairs: a visual token's teacher-aligned feature (vq-clip-tiny on the digits-on-photos training canvases) and the
teacher's text embedding of that image's caption ("a photo of the digit seven", and other templates). Joint samples
pair a token with its own image's caption; the other captions of the batch stand for the product of marginals.
A separable critic is trained with the NWJ bound, so its output f - 1 estimates pmi(token; caption) in nats: tokens
on the digit carry information about the caption, background tokens carry none.
"""

from __future__ import annotations

import dataclasses
import os
import random
from dataclasses import dataclass
from pathlib import Path

import torch

from mmtok import mi
from mmtok.models.critics import TokenCritic, TokenCriticConfig
from mmtok.models.data import DIGIT_TEMPLATES, DIGIT_WORDS
from mmtok.models.teacher import Teacher
from mmtok.models.train_backbone import task_tokens
from mmtok.models.training import TrainLog, cosine_lr, read_toml_config


@dataclass
class CriticTrainConfig:
    steps: int = 2000
    images_per_step: int = 64
    tokens_per_image: int = 8
    lr: float = 5e-4
    warmup_steps: int = 100
    train_examples: int = 8000
    image_size: int = 128
    seed: int = 0
    log_every: int = 50
    out: str = "models/weights/critic-vq-text"
    name: str = "critic-vq-text"


def caption_bank(teacher: Teacher) -> torch.Tensor:
    """Teacher text embeddings ``[10, templates, D]`` of every digit caption template."""
    with torch.no_grad():
        return torch.stack(
            [
                teacher.encode_text([t.format(word=w, digit=d) for t in DIGIT_TEMPLATES])
                for d, w in enumerate(DIGIT_WORDS)
            ]
        )


@torch.no_grad()
def token_feature_table(tokenizer: object, ids: torch.Tensor, grid: tuple[int, int], batch: int = 64) -> torch.Tensor:
    """Aligned token features ``[n, N, D]`` for canvases given as ids ``[n, N]``."""
    out = []
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch].reshape(-1, *grid)  # (b, h, w)
        codes = tokenizer.codes_from_ids(chunk)
        out.append(tokenizer.aligned(codes)[0])
    return torch.cat(out)


def train_critic(
    config_path: str | os.PathLike[str], *, out: str | None = None, steps: int | None = None, command: str = ""
) -> Path:
    import mmtok

    cfg = read_toml_config(config_path, {"model": TokenCriticConfig, "train": CriticTrainConfig})
    critic_cfg: TokenCriticConfig = cfg["model"]
    train: CriticTrainConfig = cfg["train"]
    if out:
        train.out = out
    if steps is not None:
        train.steps = steps
    torch.manual_seed(train.seed)
    rng = random.Random(train.seed)
    tok = mmtok.get_tokenizer(critic_cfg.image_tokenizer).eval()
    teacher = Teacher.from_pretrained(critic_cfg.teacher).eval()
    data = task_tokens(tok, "train", train.train_examples, train.image_size, train.seed)
    side = train.image_size // tok.config.downsample
    features = token_feature_table(tok, data["ids"], (side, side))  # (n, N, D)
    captions = caption_bank(teacher)  # (10, T, D)
    labels = data["labels"]
    critic = TokenCritic(critic_cfg, name=train.name)
    optimizer = torch.optim.Adam(critic.parameters(), lr=train.lr)
    out_dir = Path(train.out)
    log = TrainLog(out_dir, train.steps, 0, True, "train critic")
    b, k = train.images_per_step, train.tokens_per_image
    for step in range(train.steps):
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(step, train.steps, train.warmup_steps, train.lr)
        images = torch.tensor(rng.sample(range(len(features)), b))
        tokens = torch.randint(features.shape[1], (b, k))
        x = features[images[:, None], tokens].reshape(b * k, -1)  # (b*k, D)
        template = torch.randint(captions.shape[1], (b,))
        y = captions[labels[images], template]  # (b, D)
        joint = torch.zeros(b * k, b, dtype=torch.bool)
        joint[torch.arange(b * k), torch.arange(b).repeat_interleave(k)] = True
        result = mi.estimate(critic_cfg.estimator, critic.scores(x, y), joint)
        optimizer.zero_grad(set_to_none=True)
        (-result.value).backward()
        optimizer.step()
        if (step + 1) % train.log_every == 0:
            log.step(step + 1, {train_estimator_label(critic_cfg): result.value.item()})
        else:
            log.step(step + 1)
    log.close()
    critic.eval().save_pretrained(
        out_dir,
        trained_by=command or f"mmtok train critic {config_path}",
        training={"steps": train.steps, "train": dataclasses.asdict(train), "final_bound_nats": result.value.item()},
    )
    return out_dir


def train_estimator_label(cfg: TokenCriticConfig) -> str:
    return f"{cfg.estimator}_nats"
