"""Codebook usage against the number of held-out tokens it is counted on.

Usage (the share of codes that at least one token picks) grows with the sample: vq_eval counts it on its held-out
protocol (64 crops of each of the six held-out photos + 1,000 held-out digits, 354,304 tokens at 128 px for 4,096
codes), LlamaGen on ImageNet's 50,000 validation images. This measures, for one tokenizer, usage on held-out photo
crops alone at 16 to 256 crops per photo (fresh crops, another seed than vq_eval's), on the held-out digits alone, on
vq_eval's protocol set, on that set plus the larger crop sample, and on procedural images (dead-leaves and
fractal noise, drawn with a seed no training run uses). Every image is held out from training.

Run: ``python -m mmtok.eval.tools.vq_usage [TOKENIZER] --json eval/results/vq_usage_sample_size.json``.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

import torch

PER_PHOTO = (16, 64, 128, 256)
PROCEDURAL_IMAGES = 400
PROCEDURAL_SEED = 777  # PhotoMix seeds its procedural images from the training seed (0)
CROP_SEED = 99  # vq_eval's crops use 1234


def ids_of(tokenizer: Any, images: torch.Tensor, batch: int = 64) -> torch.Tensor:
    """Every token's code id, flattened: ``[n * tokens_per_image]``."""
    with torch.no_grad():
        return torch.cat(
            [tokenizer.encode_batch(images[i : i + batch]).flatten() for i in range(0, len(images), batch)]
        )


def usage(tokenizer: Any, ids: torch.Tensor) -> dict[str, Any]:
    return {"tokens": len(ids), "codebook_usage": len(torch.unique(ids)) / tokenizer.codebook_size}


def measure(tokenizer: Any) -> dict[str, Any]:
    from mmtok.models.data import dead_leaves, fractal_noise, heldout_digits, heldout_photo_set

    size = tokenizer.config.image_size
    protocol_photos = ids_of(tokenizer, heldout_photo_set(size, 64)[0])
    digits = ids_of(tokenizer, heldout_digits(size)[0])
    rows = {"digits (1,000 held-out MNIST)": usage(tokenizer, digits)}
    largest = None
    for per_photo in PER_PHOTO:
        largest = ids_of(tokenizer, heldout_photo_set(size, per_photo, seed=CROP_SEED)[0])
        rows[f"photo crops, {per_photo} per photo"] = usage(tokenizer, largest)
    rows["vq_eval's protocol set (64 crops per photo + digits)"] = usage(
        tokenizer, torch.cat([protocol_photos, digits])
    )
    both = torch.cat([protocol_photos, digits, largest])
    rows[f"protocol set + {PER_PHOTO[-1]} more crops per photo"] = usage(tokenizer, both)
    rng = random.Random(PROCEDURAL_SEED)
    procedural = torch.stack(
        [dead_leaves(size, rng) if i % 2 else fractal_noise(size, rng) for i in range(PROCEDURAL_IMAGES)]
    )
    procedural_ids = ids_of(tokenizer, procedural)
    rows[f"procedural ({PROCEDURAL_IMAGES} dead-leaves / fractal noise)"] = usage(tokenizer, procedural_ids)
    rows["all of the above"] = usage(tokenizer, torch.cat([both, procedural_ids]))
    return {
        "tokenizer": tokenizer.name,
        "image_size": size,
        "codebook_size": tokenizer.codebook_size,
        "rows": rows,
        "protocol": (
            "held-out photos: crops of a quarter to all of the shorter side of coffee, rocket, motorcycle_left, china, "
            f"flower, grace_hopper (seed {CROP_SEED}; vq_eval's set uses 1234); usage = distinct ids / codebook size"
        ),
    }


def main() -> None:
    import mmtok

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tokenizer", nargs="?", default="vq-photo-256")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = measure(mmtok.get_tokenizer(args.tokenizer).eval())
    for name, row in result["rows"].items():
        print(f"{name:60s} {row['tokens']:>9,} tokens  usage {row['codebook_usage']:.1%}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
