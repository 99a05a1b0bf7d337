"""Evaluate a VQ image tokenizer on data it never trained on, with the protocol printed beside every number.

Run: ``python -m mmtok.eval.vq_eval [TOKENIZER ...] [--json FILE]`` (default: the shipped vq-clip-tiny).

Held-out data (``mmtok.models.data``): 256 fixed random crops of four real photos excluded from training (coffee,
rocket, china, flower) and the 1,000 held-out MNIST digits (100 per class), both at the tokenizer's resolution.

- codebook usage (% of codes used) and perplexity over all held-out tokens;
- PSNR and SSIM (torchmetrics, data range [-1, 1]) of reconstructions;
- FD-<teacher>: Fréchet distance between the teacher's pooled image features of originals and reconstructions
  (not FID: the extractor is the tokenizer's own CLIP teacher), and FD-efficientnet-lite0 with an ImageNet
  classifier's 1,280-d pooled features (independent of training; also not FID: not Inception-v3);
- zero-shot digit accuracy of the teacher on the originals, on the reconstructions, and through the tokens'
  aligned features (``tokenizer.features``) scored against the same class embeddings; their cosine similarity.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from mmtok.eval.metrics import feature_frechet, psnr, ssim
from mmtok.models.data import DIGIT_WORDS, heldout_digits, heldout_photo_crops
from mmtok.models.teacher import Teacher
from mmtok.models.train_clip import DIGIT_PROMPTS
from mmtok.models.train_vq import codebook_stats


@torch.no_grad()
def evaluate(tokenizer: Any, teacher: Teacher, batch: int = 128, extractor: Any = None) -> dict[str, Any]:
    size = tokenizer.config.image_size
    photos = heldout_photo_crops(size)
    digits, labels = heldout_digits(size)
    counts = torch.zeros(tokenizer.codebook_size, dtype=torch.long)

    def run(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        recons, pooled, ids_all = [], [], []
        for start in range(0, len(images), batch):
            x = images[start : start + batch]
            codes, ids, _ = tokenizer.quantize(x)
            recons.append(tokenizer.decoder(codes).clamp(-1, 1))
            pooled.append(tokenizer.aligned(codes)[1])
            ids_all.append(ids)
        ids = torch.cat(ids_all)
        counts.add_(torch.bincount(ids.flatten().long(), minlength=tokenizer.codebook_size))
        return torch.cat(recons), torch.cat(pooled), ids

    photo_recon, _, _ = run(photos)
    digit_recon, digit_token_features, _ = run(digits)
    usage, perplexity = codebook_stats(counts)

    weights = teacher.zero_shot_weights(list(DIGIT_WORDS), DIGIT_PROMPTS)
    original_features = torch.cat([teacher.encode_image(digits[i : i + batch]) for i in range(0, len(digits), batch)])
    recon_features = torch.cat([teacher.encode_image(digit_recon[i : i + batch]) for i in range(0, len(digits), batch)])

    def accuracy(features: torch.Tensor) -> float:
        return float((features @ weights.T).argmax(-1).eq(labels).float().mean())

    teacher_acc = accuracy(original_features)
    token_acc = accuracy(digit_token_features)
    photo_original_features = teacher.encode_image(photos)
    photo_recon_features = teacher.encode_image(photo_recon)
    fd_extractor = None
    if extractor is not None:
        fd_extractor = feature_frechet(extractor.features(photos), extractor.features(photo_recon))
    return {
        "tokenizer": tokenizer.name,
        "tokens_per_image": tokenizer.tokens_per_image(),
        "codebook_size": tokenizer.codebook_size,
        "codebook_usage": usage,
        "perplexity": perplexity,
        "psnr_photos_db": psnr(photo_recon, photos),
        "ssim_photos": ssim(photo_recon, photos),
        "psnr_digits_db": psnr(digit_recon, digits),
        "ssim_digits": ssim(digit_recon, digits),
        "fd_teacher_photos": feature_frechet(photo_original_features, photo_recon_features),
        "fd_extractor_photos": fd_extractor,
        "zero_shot_teacher_original": teacher_acc,
        "zero_shot_teacher_reconstruction": accuracy(recon_features),
        "zero_shot_through_tokens": token_acc,
        "retention": token_acc / teacher_acc if teacher_acc else 0.0,
        "token_teacher_cosine": float((digit_token_features * original_features).sum(-1).mean()),
        "protocol": {
            "data": f"held-out: {len(photos)} crops of coffee/rocket/china/flower + {len(digits)} MNIST digits, "
            f"{size} px",
            "fd": f"FD-{teacher.name}: pooled {teacher.embed_dim}-d features, photo crops, originals vs recon"
            + (f"; FD-{extractor.name}: its pooled features, same images" if extractor is not None else ""),
            "psnr_ssim": "torchmetrics, data range [-1, 1], SSIM Gaussian 11/1.5",
            "zero_shot": f"{teacher.name}, 10 digit classes, prompts {list(DIGIT_PROMPTS)}",
        },
    }


ROWS = [
    ("codebook usage", "codebook_usage", "{:.1%}"),
    ("perplexity", "perplexity", "{:.0f}"),
    ("PSNR photos (dB)", "psnr_photos_db", "{:.2f}"),
    ("SSIM photos", "ssim_photos", "{:.3f}"),
    ("PSNR digits (dB)", "psnr_digits_db", "{:.2f}"),
    ("FD-teacher photos", "fd_teacher_photos", "{:.4f}"),
    ("FD-efficientnet-lite0 photos", "fd_extractor_photos", "{:.2f}"),
    ("zero-shot: teacher on originals", "zero_shot_teacher_original", "{:.1%}"),
    ("zero-shot: teacher on reconstructions", "zero_shot_teacher_reconstruction", "{:.1%}"),
    ("zero-shot: through the tokens", "zero_shot_through_tokens", "{:.1%}"),
    ("retention (tokens / teacher)", "retention", "{:.1%}"),
    ("cosine(tokens, teacher)", "token_teacher_cosine", "{:.3f}"),
]


def main() -> None:
    import mmtok

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tokenizers", nargs="*", default=["vq-clip-tiny"])
    parser.add_argument("--teacher", default=None, help="default: the tokenizer's own teacher")
    parser.add_argument("--extractor", default="efficientnet-lite0", help="second FD extractor ('none' to skip)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.manual_seed(0)
    extractor = None
    if args.extractor != "none":
        from mmtok.eval.extractors import get_extractor

        extractor = get_extractor(args.extractor)
    results = []
    for name in args.tokenizers:
        tok = mmtok.get_tokenizer(name).eval()
        teacher = Teacher.from_pretrained(args.teacher or tok.config.teacher).eval()
        results.append(evaluate(tok, teacher, extractor=extractor))
    header = ["metric", *[r["tokenizer"] for r in results]]
    widths = [max(len(h), 38) for h in header]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for label, key, fmt in ROWS:
        cells = [label, *[("—" if r[key] is None else fmt.format(r[key])) for r in results]]
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)))
    for key, text in results[0]["protocol"].items():
        print(f"  {key}: {text}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
