"""``mmtok train critic CONFIG``: train the token-relevance critic used by MI truncation.

Pairs: a visual token (vq-clip-tiny at 128 px; the critic reads its code and its 3 x 3 neighbours' codes) and the
teacher's text embedding of its image's caption. Half the images are the digits-on-photos training canvases,
captioned "a photo of the digit seven" (and other templates); half are the same kind of photo crops with no digit,
captioned plainly ("a photo", "an image": naming the subject would teach the critic to recognise the 16 training
photos instead of strokes). Joint samples pair a token with its own image's caption;
the other captions of the batch stand for the product of marginals. Trained with SMILE (Jensen-Shannon gradient),
the critic's logit estimates pmi(token; caption) in nats: a stroke of a digit says "a digit is here" (and a little
about which), so it scores high against every digit caption; a patch of background says nothing about the digit.

With ``pairing = "region"`` a token is paired with the caption of the region it lies in: the digit's caption
inside the digit's box, a digit-free caption outside it (and everywhere on the digit-free canvases). The image
pairing above lets every token of a digit canvas claim the digit: the tokenizer's encoder normalises over the whole
image, so a background token's code already says a bright digit is somewhere, and that leak is most of what an
image-paired critic learns (background tokens score 0.12 nats above those of digit-free photos, held-out stroke AUC
0.73). Region pairing contrasts tokens of the same canvases, so the leak cancels and the strokes remain.

The trained critic records its digit captions (``known_contexts``), so MI truncation can warn about a context
far from them.

The log ends with a held-out check on canvases of held-out digits and photos: how well the score separates stroke
tokens (>= 10% stroke cover) and digit-box tokens from background (ROC AUC), and what the default threshold keeps.

The trainer is its spec (:class:`mmtok.models.training.TrainSpec`); schedule, checkpoints, ``--resume`` and
``torchrun`` (each rank samples its own canvases) come from :class:`mmtok.models.training.Loop`; it trains on the
CPU.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from mmtok import mi
from mmtok.cache import cache_dir
from mmtok.models.checkpoint import weights_fingerprint
from mmtok.models.critics import TokenCritic, TokenCriticConfig
from mmtok.models.data import DIGIT_TEMPLATES, DIGIT_WORDS, PHOTO_CAPTIONS, digit_canvases, photo_canvases
from mmtok.models.digits_qa import task_tokens
from mmtok.models.teacher import Teacher
from mmtok.models.training import Job, LoopConfig, LoopResult, Part, Setup, TrainSpec
from mmtok.models.vq import neighbourhoods


@dataclass
class CriticTrainConfig(LoopConfig):
    steps: int = 2000
    images_per_step: int = 64
    tokens_per_image: int = 32
    lr: float = 5e-4
    train_examples: int = 8000
    photo_examples: int = 4000
    heldout_examples: int = 500
    image_size: int = 128
    log_every: int = 50
    photo_share: float = 0.5  # share of each step's images that are digit-free canvases
    pairing: str = "image"  # "image": a token with its image's caption; "region": with its region's (see above)
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


PLAIN_CAPTIONS = ("a photo", "a picture", "an image", "a photo of a scene")


def plain_caption_bank(teacher: Teacher) -> torch.Tensor:
    """Teacher text embeddings ``[templates, D]`` of the captions of digit-free canvases."""
    with torch.no_grad():
        return teacher.encode_text(list(PLAIN_CAPTIONS))


def photo_tokens(tokenizer: Any, split: str, count: int, size: int, seed: int) -> dict[str, torch.Tensor]:
    """Token ids of ``count`` digit-free photo canvases and their photo index (into sorted ``PHOTO_CAPTIONS``)."""
    from safetensors.torch import load_file, save_file

    name = f"{tokenizer.name}-{weights_fingerprint(tokenizer)}-photos-{split}-{count}-{size}-{seed}.safetensors"
    path = cache_dir("backbone-data") / name
    if path.is_file():
        return load_file(str(path))
    images, names = photo_canvases(split, count, size, seed)
    order = sorted(PHOTO_CAPTIONS)
    ids = []
    with torch.no_grad():
        for start in range(0, count, 64):
            ids.append(tokenizer.encode_batch(images[start : start + 64].float() / 127.5 - 1).cpu())
    data = {"ids": torch.cat(ids).flatten(1).long(), "photo": torch.tensor([order.index(n) for n in names])}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    save_file(data, str(partial))
    os.replace(partial, path)
    return data


@torch.no_grad()
def local_table(tokenizer: Any, ids: torch.Tensor, grid: tuple[int, int], radius: int) -> torch.Tensor:
    """Local code features ``[n, N, (2r+1)^2 c]`` of canvases given as ids ``[n, N]``."""
    codes = tokenizer.codes_from_ids(ids.reshape(-1, *grid))  # (n, c, h, w)
    return neighbourhoods(codes, radius)


def box_mask(boxes: torch.Tensor, size: int, side: int) -> torch.Tensor:
    """``[n, side*side]``: tokens whose centre lies in the digit's box (top, left, height, width in pixels)."""
    cell = size / side
    centre = torch.arange(side) * cell + cell / 2
    top, left, h, w = (boxes[:, i, None] for i in range(4))
    rows = (centre[None] >= top) & (centre[None] < top + h)  # (n, side)
    cols = (centre[None] >= left) & (centre[None] < left + w)
    return (rows[:, :, None] & cols[:, None, :]).flatten(1)


def smile_over_captions(scores_NU: torch.Tensor, caption_N: torch.Tensor, tau: float = 5.0) -> torch.Tensor:
    """``mmtok.mi.smile`` on N tokens each paired with its own caption (joint: the diagonal of the N x N matrix;
    the product of marginals: every token with every other token's caption), computed from the scores against
    the U distinct captions ``[N, U]``: each (token, caption) score stands for as many pairs as other tokens carry
    that caption, so the N x N matrix is never made."""
    n = len(caption_N)
    rows = torch.arange(n)
    weights_NU = torch.bincount(caption_N, minlength=scores_NU.shape[1]).float().expand(n, -1).clone()
    weights_NU[rows, caption_N] -= 1  # the token's own pair is the joint one
    pairs = n * (n - 1)
    positive = scores_NU[rows, caption_N]
    partition = torch.logsumexp((scores_NU.clamp(-tau, tau) + weights_NU.log()).flatten(), 0) - math.log(pairs)
    dv_value = positive.mean() - partition
    js = -F.softplus(-positive).mean() - (weights_NU * F.softplus(scores_NU)).sum() / pairs
    return js + (dv_value - js).detach()


def roc_auc(positive: torch.Tensor, negative: torch.Tensor) -> float:
    """Probability that a random positive outscores a random negative (ties count half)."""
    scores = torch.cat([positive, negative])
    ranks = scores.argsort().argsort().float() + 1
    n_pos, n_neg = len(positive), len(negative)
    return float((ranks[:n_pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


@dataclass
class CriticSteps:
    """One training step of the critic: sample canvases and tokens, pair each token with a caption, and return the
    bound (the loss is its negative, already backpropagated)."""

    critic: TokenCritic
    tok: Any
    train: CriticTrainConfig
    digits: dict[str, torch.Tensor]
    photos: dict[str, torch.Tensor]
    digit_captions: torch.Tensor  # (10, T, Dc)
    plain_captions: torch.Tensor  # (T', Dc)
    rng: random.Random
    side: int = field(init=False)  # the token grid's side
    half: int = field(init=False)  # digit canvases per step
    joint: torch.Tensor = field(init=False)  # (b*k, b): token i is paired with image j
    bank: torch.Tensor = field(init=False)  # (10 T + T', Dc): every caption once
    label: str = field(init=False)  # the logged bound's name

    def __post_init__(self) -> None:
        b, k = self.train.images_per_step, self.train.tokens_per_image
        self.side = self.train.image_size // self.tok.config.downsample
        self.half = b - round(b * self.train.photo_share)
        self.joint = torch.zeros(b * k, b, dtype=torch.bool)
        self.joint[torch.arange(b * k), torch.arange(b).repeat_interleave(k)] = True
        self.bank = torch.cat([self.digit_captions.flatten(0, 1), self.plain_captions])
        self.label = train_estimator_label(self.critic.config)

    def __call__(self, index: int) -> dict[str, torch.Tensor]:
        b, k, half = self.train.images_per_step, self.train.tokens_per_image, self.half
        d = torch.tensor(self.rng.sample(range(len(self.digits["ids"])), half), dtype=torch.long)
        p = torch.tensor(self.rng.sample(range(len(self.photos["ids"])), b - half), dtype=torch.long)
        ids = torch.cat([self.digits["ids"][d], self.photos["ids"][p]])
        table = local_table(self.tok, ids, (self.side, self.side), self.critic.config.radius)
        tokens = torch.randint(table.shape[1], (b, k))
        x = table[torch.arange(b)[:, None], tokens].reshape(b * k, -1)  # (b*k, Dt)
        template = torch.randint(self.digit_captions.shape[1], (half,))
        if self.train.pairing == "region":
            value = smile_over_captions(self.critic.scores(x, self.bank), self.region_captions(d, tokens, template))
        else:
            y = torch.cat(
                [
                    self.digit_captions[self.digits["labels"][d], template],
                    self.plain_captions[torch.randint(len(self.plain_captions), (b - half,))],
                ]
            )  # (b, Dc)
            value = mi.estimate(self.critic.config.estimator, self.critic.scores(x, y), self.joint).value
        (-value).backward()
        return {self.label: value.detach()}

    def region_captions(self, d: torch.Tensor, tokens: torch.Tensor, template: torch.Tensor) -> torch.Tensor:
        """``[b*k]`` index into the bank: a token inside its canvas's digit box gets that digit's caption (of the
        drawn template), every other token a random plain caption."""
        b, k, half = self.train.images_per_step, self.train.tokens_per_image, self.half
        inside = torch.zeros(b, self.side * self.side, dtype=torch.bool)
        inside[:half] = box_mask(self.digits["boxes"][d], self.train.image_size, self.side)
        inside = inside[torch.arange(b)[:, None], tokens].reshape(-1)  # (b*k,)
        caption = torch.zeros(b * k, dtype=torch.long)
        caption[: half * k] = (self.digits["labels"][d] * self.digit_captions.shape[1] + template).repeat_interleave(k)
        first_plain = self.bank.shape[0] - len(self.plain_captions)
        caption[~inside] = first_plain + torch.randint(len(self.plain_captions), (int((~inside).sum()),))
        return caption


def check_pairing(critic_cfg: TokenCriticConfig, train: CriticTrainConfig) -> None:
    if critic_cfg.token_features != "local":
        raise ValueError("train critic builds local-code critics (token_features = 'local')")
    if train.pairing not in ("image", "region"):
        raise ValueError(f"pairing must be 'image' or 'region', got {train.pairing!r}")
    if train.pairing == "region" and critic_cfg.estimator != "smile":
        raise ValueError("region pairing trains with the smile estimator")


def critic_job(run: Setup) -> Job:
    """The critic on the tokenizer's codes of the digit and photo canvases (rank 0 fills the token caches), the
    teacher's caption banks, its Adam and the step; the held-out check runs and is logged at the end."""
    import mmtok

    critic_cfg, train, ctx = run.model, run.train, run.ctx
    check_pairing(critic_cfg, train)
    rng = random.Random(train.seed + ctx.rank)
    tok = mmtok.get_tokenizer(critic_cfg.image_tokenizer).eval()
    teacher = Teacher.from_pretrained(critic_cfg.teacher).eval()
    with ctx.main_first():  # rank 0 fills the token caches, the others read them
        digits = task_tokens(tok, "train", train.train_examples, train.image_size, train.seed)
        photos = photo_tokens(tok, "train", train.photo_examples, train.image_size, train.seed)
    critic_cfg.known_contexts = [
        t.format(word=w, digit=d) for d, w in enumerate(DIGIT_WORDS) for t in DIGIT_TEMPLATES
    ]  # caption_bank's texts, in its order
    critic = TokenCritic(critic_cfg, name=train.name)
    step = CriticSteps(critic, tok, train, digits, photos, caption_bank(teacher), plain_caption_bank(teacher), rng)
    optimizer = torch.optim.Adam(critic.parameters(), lr=train.lr)
    return Job(
        Part(critic, optimizer),
        step,
        record=lambda result: critic_record(critic, result),
        rngs={"pairs": rng},
        evaluate=lambda: heldout_check(critic.eval(), tok, teacher, train),
        log_evaluation=True,
    )


def critic_record(critic: TokenCritic, result: LoopResult) -> dict[str, Any]:
    """The held-out check (also printed in one line) and the last step's bound."""
    check = result.evaluation
    print(
        f"held-out ROC AUC: stroke tokens vs background {check['heldout_stroke_auc']:.3f}, digit box vs "
        f"background {check['heldout_box_auc']:.3f}; threshold {check['threshold']} keeps "
        f"{check['kept_ratio']:.1%} of tokens, {check['stroke_recall']:.1%} of stroke tokens"
    )
    return {"final_bound_nats": result.last[train_estimator_label(critic.config)], **check}


train_critic = TrainSpec("critic", TokenCriticConfig, CriticTrainConfig, critic_job, device="cpu")


@torch.no_grad()
def heldout_check(critic: TokenCritic, tok: Any, teacher: Teacher, train: CriticTrainConfig) -> dict[str, Any]:
    from mmtok.truncation import DEFAULT_THRESHOLD_NATS

    side = train.image_size // tok.config.downsample
    held = task_tokens(tok, "heldout", train.heldout_examples, train.image_size, train.seed + 1)
    table = local_table(tok, held["ids"], (side, side), critic.config.radius)  # (n, N, Dt)
    context = caption_bank(teacher)[:, 0]  # "a photo of the digit ..." for the 10 digits
    scores = critic.pmi(table.flatten(0, 1), context).max(dim=1).values.reshape(len(table), -1)
    inside = box_mask(held["boxes"], train.image_size, side)
    _, _, _, opacity = digit_canvases("heldout", len(table), train.image_size, train.seed + 1, strokes=True)
    cell = train.image_size // side
    stroke = torch.nn.functional.avg_pool2d(opacity[:, None], cell).flatten(1) >= 0.1  # (n, N)
    kept = scores > DEFAULT_THRESHOLD_NATS
    return {
        "heldout_stroke_auc": roc_auc(scores[stroke], scores[~inside]),
        "heldout_box_auc": roc_auc(scores[inside], scores[~inside]),
        "threshold": DEFAULT_THRESHOLD_NATS,
        "kept_ratio": float(kept.float().mean()),
        "stroke_recall": float(kept[stroke].float().mean()),
        "box_recall": float(kept[inside].float().mean()),
        "heldout_images": len(table),
    }


def train_estimator_label(cfg: TokenCriticConfig) -> str:
    return f"{cfg.estimator}_nats"
