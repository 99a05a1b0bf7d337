"""``mmtok train backbone CONFIG``: train the MoE backbone on a small multimodal task.

Task: each example is a text prompt (UTF-8 bytes) and the visual tokens (vq-clip-tiny, 128 px -> 16 x 16 = 256
tokens) of a handwritten digit pasted at a random place and scale on a photo crop; the answer is the digit. Most
visual tokens show only background, which is what the truncation experiments need. Train and held-out canvases use
disjoint digits and disjoint photos (``mmtok.models.data.digit_canvases``); their token ids are cached on disk.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from mmtok.models.backbone import Backbone, BackboneConfig
from mmtok.models.data import DIGIT_WORDS, digit_canvases
from mmtok.models.training import TrainLog, cosine_lr, read_toml_config, select_device, split_decay

PROMPT = "which digit is written in the picture?"


@dataclass
class BackboneTrainConfig:
    steps: int = 1500
    batch_size: int = 48
    lr: float = 1e-3
    weight_decay: float = 0.05
    warmup_steps: int = 100
    train_examples: int = 8000
    heldout_examples: int = 1000
    image_size: int = 128
    seed: int = 0
    log_every: int = 25
    out: str = "models/weights/backbone-tiny"
    name: str = "backbone-tiny"


def task_tokens(tokenizer: Any, split: str, count: int, size: int, seed: int) -> dict[str, torch.Tensor]:
    """Token ids, labels and digit boxes of ``count`` canvases, cached by tokenizer, split, size and seed."""
    from safetensors.torch import load_file, save_file

    from mmtok.cache import cache_dir

    name = f"{tokenizer.name}-{weights_fingerprint(tokenizer)}-{split}-{count}-{size}-{seed}.safetensors"
    path = cache_dir("backbone-data") / name
    if path.is_file():
        return load_file(str(path))
    images, labels, boxes = digit_canvases(split, count, size, seed)
    ids = []
    with torch.no_grad():
        for start in range(0, count, 64):
            x = images[start : start + 64].float() / 127.5 - 1
            ids.append(tokenizer.encode_batch(x).cpu())
    data = {"ids": torch.cat(ids).flatten(1).long(), "labels": labels, "boxes": boxes}  # ids (n, h*w)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(data, str(path))
    return data


def weights_fingerprint(model: torch.nn.Module) -> str:
    """A short hash of a model's weights (the first values of every tensor), so caches follow retraining."""
    import hashlib

    digest = hashlib.sha1()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().flatten()[:256].float().cpu().numpy().tobytes())
    return digest.hexdigest()[:10]


def examples_from(ids: torch.Tensor, grid: tuple[int, int], prompt_seq: Any, tokenizer_name: str) -> list[list[Any]]:
    from mmtok.tokens import TokenSequence

    return [[prompt_seq, TokenSequence("image", ids=row, grid=grid, tokenizer=tokenizer_name)] for row in ids]


@torch.no_grad()
def accuracy(model: Backbone, examples: list[list[Any]], labels: torch.Tensor, batch: int = 100) -> float:
    model.eval()
    correct = 0
    for start in range(0, len(examples), batch):
        logits = model(examples[start : start + batch])["logits"]
        correct += int(logits.argmax(-1).cpu().eq(labels[start : start + batch]).sum())
    return correct / len(examples)


def train_backbone(
    config_path: str | os.PathLike[str],
    *,
    out: str | None = None,
    steps: int | None = None,
    device: str = "auto",
    command: str = "",
) -> Path:
    import mmtok

    cfg = read_toml_config(config_path, {"model": BackboneConfig, "train": BackboneTrainConfig})
    model_cfg: BackboneConfig = cfg["model"]
    train: BackboneTrainConfig = cfg["train"]
    if out:
        train.out = out
    if steps is not None:
        train.steps = steps
    dev = select_device(device)
    torch.manual_seed(train.seed)
    image_tok = mmtok.get_tokenizer(model_cfg.image_tokenizer).eval()
    model_cfg.visual_vocab = image_tok.codebook_size
    model_cfg.class_names = list(DIGIT_WORDS)
    model_cfg.num_classes = len(DIGIT_WORDS)
    side = train.image_size // image_tok.config.downsample
    prompt = mmtok.get_tokenizer("text-bytes").encode(PROMPT)
    data = task_tokens(image_tok, "train", train.train_examples, train.image_size, train.seed)
    held = task_tokens(image_tok, "heldout", train.heldout_examples, train.image_size, train.seed + 1)
    train_examples = examples_from(data["ids"], (side, side), prompt, image_tok.name)
    held_examples = examples_from(held["ids"], (side, side), prompt, image_tok.name)

    model_cfg.code_dim = image_tok.config.code_dim
    model = Backbone(model_cfg, name=train.name)
    if model_cfg.visual_input == "codes":
        model.set_visual_codes(image_tok)
    model = model.to(dev)
    optimizer = torch.optim.AdamW(split_decay(model), lr=train.lr, weight_decay=train.weight_decay)
    out_dir = Path(train.out)
    log = TrainLog(out_dir, train.steps, 0, True, "train backbone")
    generator = torch.Generator().manual_seed(train.seed)
    labels = data["labels"]
    recent: list[float] = []
    for step in range(train.steps):
        model.train()
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(step, train.steps, train.warmup_steps, train.lr)
        index = torch.randint(len(train_examples), (train.batch_size,), generator=generator)
        result = model([train_examples[i] for i in index])
        task_loss = F.cross_entropy(result["logits"], labels[index].to(dev))
        loss = task_loss + result["aux_loss"]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        recent = [*recent[-49:], task_loss.item()]
        if (step + 1) % train.log_every == 0:
            log.step(
                step + 1,
                {
                    "loss": task_loss.item(),
                    "aux": float(result["aux_loss"].detach()),
                    "avg_k": result["average_k"],
                    "dropped": result["dropped"],
                },
            )
        else:
            log.step(step + 1)
    log.close()
    held_acc = accuracy(model, held_examples, held["labels"])
    model.eval()
    sample = model(held_examples[:200])
    stats = {
        "steps": train.steps,
        "heldout_accuracy": round(held_acc, 4),
        "final_train_loss": round(sum(recent) / len(recent), 4),
        "eval_average_k": round(sample["average_k"], 3),
        "active_flops_per_token": model.active_flops_per_token(),
        "expert_load_layer0": sample["router"][0]["load"].tolist(),
        "train": dataclasses.asdict(train),
    }
    model.cpu().save_pretrained(out_dir, trained_by=command or f"mmtok train backbone {config_path}", training=stats)
    return out_dir
