"""``mmtok train backbone CONFIG``: train the MoE backbone on the digits-QA task (``mmtok.models.digits_qa``: a
text prompt and the visual tokens of a handwritten digit on a photo crop; the answer is the digit).

Training for shorter inputs (``drop_fraction > 0``): that share of each batch's examples has its visual tokens
truncated before the backbone reads them, positions kept, at a keep ratio drawn uniformly from
``[keep_ratio_min, 1]``. From the start the tokens are dropped at random; from ``truncators_from`` (a fraction of
the steps) the truncators join in, in the shares ``drop_methods`` gives: ``mi`` keeps the critic's top tokens (its
relevance to the ten digit prompts; a threshold keeps exactly such a top set), ``divprune`` the greedy max-min
diverse set. Both orders are computed once per training image (a truncation at k tokens is the first k of them),
so the loop costs no more than random dropping.

The trainer is its spec (:class:`mmtok.models.training.TrainSpec`); schedule, checkpoints, ``--resume`` and
``torchrun`` (each rank draws its own examples; an expert only one rank's batch used gets the average of its
gradient with zeros) come from :class:`mmtok.models.training.Loop`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from mmtok.errors import ConfigError
from mmtok.models.backbone import Backbone, BackboneConfig
from mmtok.models.data import DIGIT_WORDS
from mmtok.models.digits_qa import CONTEXT_PROMPTS, PROMPT, accuracy, task_tokens
from mmtok.models.training import Job, LoopConfig, Part, Setup, TrainSpec, split_decay


@dataclass
class BackboneTrainConfig(LoopConfig):
    out: str = "models/weights/backbone-tiny"
    name: str = "backbone-tiny"
    steps: int = 1500
    batch_size: int = 48
    weight_decay: float = 0.05
    train_examples: int = 8000
    heldout_examples: int = 1000
    image_size: int = 128
    drop_fraction: float = 0.0  # share of training examples whose visual tokens are truncated
    keep_ratio_min: float = 0.1  # their keep ratio is drawn uniformly from [keep_ratio_min, 1]
    truncators_from: float = 0.5  # fraction of the steps after which the truncators pick the tokens of some
    drop_methods: dict[str, float] = field(default_factory=lambda: {"random": 1.0})  # shares once they have
    critic: str = "critic-vq-text"  # the critic behind the "mi" truncator (a registry name or a folder)


DROP_METHODS = ("random", "mi", "divprune")


def examples_from(ids: torch.Tensor, grid: tuple[int, int], prompt_seq: Any, tokenizer_name: str) -> list[list[Any]]:
    from mmtok.tokens import TokenSequence

    return [[prompt_seq, TokenSequence("image", ids=row, grid=grid, tokenizer=tokenizer_name)] for row in ids]


RECENT = 50  # final_train_loss averages the task loss of the last RECENT steps


@dataclass
class BackboneSteps:
    """One training step: a batch of examples (some shortened, see ``shortened``), the task loss plus the
    router's auxiliary loss, backpropagated; the task loss is also kept in ``recent`` (step i at i % RECENT)."""

    model: Backbone
    train: BackboneTrainConfig
    examples: list[list[Any]]
    labels: torch.Tensor
    orders: dict[str, torch.Tensor]
    generator: torch.Generator
    recent: torch.Tensor
    device: torch.device

    def __call__(self, index: int) -> dict[str, Any]:
        self.model.train()
        chosen = torch.randint(len(self.examples), (self.train.batch_size,), generator=self.generator)
        batch = [
            shortened(self.examples[i], int(i), index, self.train, self.orders, self.generator) for i in chosen.tolist()
        ]
        result = self.model(batch)
        task_loss = F.cross_entropy(result["logits"], self.labels[chosen].to(self.device))
        (task_loss + result["aux_loss"]).backward()
        self.recent[index % RECENT] = task_loss.item()
        return {
            "loss": task_loss.detach(),
            "aux": result["aux_loss"].detach(),
            "avg_k": result["average_k"],
            "dropped": result["dropped"],
        }


def heldout_check(model: Backbone, prompt: Any, held_examples: list[list[Any]], labels: torch.Tensor) -> dict[str, Any]:
    held_acc = accuracy(model, prompt, [image for _, image in held_examples], labels, batch=100)
    model.eval()
    with torch.no_grad():
        sample = model(held_examples[:200])
    return {
        "heldout_accuracy": round(held_acc, 4),
        "eval_average_k": round(sample["average_k"], 3),
        "active_flops_per_token": model.active_flops_per_token(),
        "expert_load_layer0": sample["router"][0]["load"].tolist(),
    }


def build_backbone(model_cfg: BackboneConfig, image_tok: Any, name: str) -> Backbone:
    """The backbone of ``model_cfg`` with the fields its image tokenizer fixes (vocabulary, code width) and the
    digit classes filled in."""
    model_cfg.visual_vocab = image_tok.codebook_size
    model_cfg.class_names = list(DIGIT_WORDS)
    model_cfg.num_classes = len(DIGIT_WORDS)
    model_cfg.code_dim = image_tok.config.code_dim
    model = Backbone(model_cfg, name=name)
    if model_cfg.visual_input == "codes":
        model.set_visual_codes(image_tok)
    return model


def backbone_job(run: Setup) -> Job:
    """The backbone on its image tokenizer (rank 0 fills the token caches), its AdamW, the step with this rank's
    generator and the recent task losses; the held-out check runs at the end."""
    import mmtok

    model_cfg, train, ctx, dev = run.model, run.train, run.ctx, run.device
    image_tok = mmtok.get_tokenizer(model_cfg.image_tokenizer).eval()
    grid = (train.image_size // image_tok.config.downsample,) * 2
    prompt = mmtok.get_tokenizer("text-bytes").encode(PROMPT)
    with ctx.main_first():  # rank 0 fills the token caches, the others read them
        data = task_tokens(image_tok, "train", train.train_examples, train.image_size, train.seed)
        held = task_tokens(image_tok, "heldout", train.heldout_examples, train.image_size, train.seed + 1)
    held_examples = examples_from(held["ids"], grid, prompt, image_tok.name)
    model = build_backbone(model_cfg, image_tok, train.name).to(dev)
    optimizer = torch.optim.AdamW(split_decay(model), lr=train.lr, weight_decay=train.weight_decay)
    generator = torch.Generator().manual_seed(train.seed + ctx.rank)
    recent = torch.full((RECENT,), math.nan, dtype=torch.float64)
    examples = examples_from(data["ids"], grid, prompt, image_tok.name)
    orders = truncation_orders(train, data["ids"], grid, image_tok)
    step = BackboneSteps(model, train, examples, data["labels"], orders, generator, recent, dev)
    return Job(
        Part(model, optimizer),
        step,
        record=lambda result: backbone_record(result.evaluation, recent, train),
        rngs={"data": generator},
        state={"recent_losses": recent},
        evaluate=lambda: heldout_check(model, prompt, held_examples, held["labels"]),
    )


def backbone_record(check: dict[str, Any], recent: torch.Tensor, train: BackboneTrainConfig) -> dict[str, Any]:
    """The held-out check and the task loss averaged over the last ``RECENT`` steps."""
    last = [float(recent[i % RECENT]) for i in range(max(0, train.steps - RECENT), train.steps)]
    return {**check, "final_train_loss": round(sum(last) / len(last), 4)}


train_backbone = TrainSpec("backbone", BackboneConfig, BackboneTrainConfig, backbone_job)


def truncation_orders(
    train: BackboneTrainConfig, ids: torch.Tensor, grid: tuple[int, int], tokenizer: Any
) -> dict[str, torch.Tensor]:
    """Per training image ``[n, N]``, the order in which each truncator in ``drop_methods`` keeps its tokens (its
    k-token selection is the first k): ``mi`` by the critic's score, highest first; ``divprune`` greedy max-min."""
    import mmtok
    from mmtok.tokens import TokenSequence
    from mmtok.truncation import context_embeddings, mi_scores_on_grids

    unknown = sorted(set(train.drop_methods) - set(DROP_METHODS))
    if unknown:
        raise ConfigError(f"drop_methods: unknown {', '.join(unknown)}; choose from {', '.join(DROP_METHODS)}")
    if train.drop_fraction <= 0:
        return {}
    seqs = [TokenSequence("image", ids=row, grid=grid, tokenizer=tokenizer.name) for row in ids]
    orders = {}
    if train.drop_methods.get("mi", 0) > 0:
        critic = mmtok.get_model(train.critic, kind="critic")
        context = context_embeddings(CONTEXT_PROMPTS, critic)
        scores = []
        for start in range(0, len(seqs), 500):
            scores += mi_scores_on_grids(seqs[start : start + 500], critic, context, tokenizer)
        orders["mi"] = torch.stack(scores).argsort(dim=1, descending=True, stable=True)
    if train.drop_methods.get("divprune", 0) > 0:
        parts = []
        with torch.no_grad():
            for start in range(0, len(ids), 500):
                codes = tokenizer.codes_from_ids(ids[start : start + 500].view(-1, *grid))  # (b, c, h, w)
                unit = tokenizer.aligned(codes)[0].float().cpu()  # (b, N, D): token_features' unit features
                parts.append(divprune_orders(unit))
        orders["divprune"] = torch.cat(parts)
    return orders


def divprune_orders(features_BND: torch.Tensor) -> torch.Tensor:
    """``mmtok.truncation``'s DivPrune greedy (start at the largest norm, then always the token farthest, in
    cosine distance, from those chosen) run to the end for a batch of images at once: ``[B, N]``."""
    B, N, _ = features_BND.shape
    unit = torch.nn.functional.normalize(features_BND, dim=-1)
    similarity = unit @ unit.transpose(1, 2)  # (B, N, N)
    rows = torch.arange(B)
    chosen = features_BND.norm(dim=-1).argmax(dim=1)
    order = [chosen]
    distance = 1 - similarity[rows, chosen]  # (B, N)
    taken = torch.zeros(B, N, dtype=torch.bool)
    for _ in range(N - 1):
        taken[rows, chosen] = True
        chosen = distance.masked_fill(taken, -1).argmax(dim=1)
        order.append(chosen)
        distance = torch.minimum(distance, 1 - similarity[rows, chosen])
    return torch.stack(order, dim=1)


def shortened(
    example: list[Any],
    index: int,
    step: int,
    train: BackboneTrainConfig,
    orders: dict[str, torch.Tensor],
    generator: torch.Generator,
) -> list[Any]:
    """The example as training sees it at ``step``: whole, or its image tokens truncated (positions kept)."""
    if train.drop_fraction <= 0 or float(torch.rand((), generator=generator)) >= train.drop_fraction:
        return example
    prompt, image = example
    n = len(image)
    ratio = train.keep_ratio_min + (1 - train.keep_ratio_min) * float(torch.rand((), generator=generator))
    keep = max(1, round(ratio * n))
    method = "random"
    if step >= train.truncators_from * train.steps:
        names = list(train.drop_methods)
        shares = torch.tensor([float(train.drop_methods[m]) for m in names])
        method = names[int(torch.multinomial(shares, 1, generator=generator))]
    kept = torch.randperm(n, generator=generator)[:keep] if method == "random" else orders[method][index, :keep]
    return [prompt, image.select(kept.sort().values, truncation=method)]
