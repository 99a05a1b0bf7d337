"""The digits-QA task that the backbone trains on and that evaluation, the planner and the demo measure.

Task: each example is a text prompt (UTF-8 bytes, :data:`PROMPT`) and the visual tokens (vq-clip-tiny, 128 px ->
16 x 16 = 256 tokens) of a handwritten digit pasted at a random place and scale on a photo crop; the answer is the
digit. Most visual tokens show only background, which is what the truncation experiments need. Train and held-out
canvases use disjoint digits and disjoint photos (``mmtok.models.data.digit_canvases``); their token ids are cached
on disk (:func:`task_tokens`). MI truncation reads the question as the ten digit prompts
(:data:`CONTEXT_PROMPTS`, "a photo of the digit zero" ... "nine"), the same for every image.

Used by ``mmtok train backbone`` (``mmtok.models.train_backbone``), the qa eval suites (``mmtok.eval.runner``), the
truncation benchmark, the planner's qa calibration and ``mmtok demo``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from mmtok.models.checkpoint import weights_fingerprint
from mmtok.models.data import DIGIT_WORDS, digit_canvases

PROMPT = "which digit is written in the picture?"
CONTEXT_PROMPTS = tuple(f"a photo of the digit {w}" for w in DIGIT_WORDS)  # MI truncation's context, in label order


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


@torch.no_grad()
def accuracy(model: Any, prompt_seq: Any, seqs: Sequence[Any], labels: torch.Tensor, batch: int = 200) -> float:
    """The share of ``seqs`` (image token sequences) for which ``model`` (a backbone, put in eval mode) answers
    ``labels``, each asked with ``prompt_seq`` (the encoded :data:`PROMPT`), ``batch`` examples per forward pass."""
    model.eval()
    correct = 0
    for start in range(0, len(seqs), batch):
        logits = model([[prompt_seq, s] for s in seqs[start : start + batch]])["logits"]
        correct += int(logits.argmax(-1).cpu().eq(labels[start : start + batch]).sum())
    return correct / len(seqs)
