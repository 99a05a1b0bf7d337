"""Evaluate a VQ image tokenizer on data it never trained on, with the protocol printed beside every number.

Run: ``python -m mmtok.eval.vq_eval [TOKENIZER ...] [--image-size S] [--json FILE]`` (default: the shipped
vq-photo-256 and vq-clip-tiny, each at its own default size).

Held-out data (``mmtok.models.data``), at the tokenizer's resolution:

- photos: ``--per-photo`` (64) fixed random crops (a quarter to all of the shorter side) of each wide held-out photo:
  coffee, rocket (scikit-image), china, flower (scikit-learn), grace_hopper (matplotlib) and motorcycle_left
  (scikit-image, bundled but read by no training config); PSNR is also given on the first four alone (the old
  protocol) and on each photo whole (its centre square, as ``mmtok tokenize`` sees it);
- digits: the held-out MNIST digits (100 per class; ``--digits`` takes every k-th to make a smaller set).

- codebook usage (% of codes used) and perplexity over all held-out tokens;
- PSNR and SSIM (torchmetrics, data range [-1, 1]; PSNR is the mean of per-image PSNRs) of reconstructions;
- colour: mean absolute error per channel (R, G, B, 0-255 scale), the mean signed error per channel, and the
  saturation ratio (mean HSV saturation of reconstructions / originals; < 1 is washed out);
- FD-<teacher>: Fréchet distance between the teacher's pooled image features of originals and reconstructions
  (not FID: the extractor is the tokenizer's own CLIP teacher), and FD-efficientnet-lite0 with an ImageNet
  classifier's 1,280-d pooled features (also not FID: not Inception-v3);
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
from mmtok.models.data import (
    DIGIT_PROMPTS,
    DIGIT_WORDS,
    HELD_OUT_PHOTOS,
    heldout_digits,
    heldout_photo_centres,
    heldout_photo_set,
)
from mmtok.models.teacher import Teacher
from mmtok.models.vq import codebook_stats

DEFAULT_TOKENIZERS = ("vq-photo-256", "vq-clip-tiny")


def colour_errors(recon: torch.Tensor, original: torch.Tensor) -> dict[str, Any]:
    """Per-channel mean absolute and signed errors (0-255 scale) and the saturation ratio of images in [-1, 1]."""
    diff = (recon.clamp(-1, 1) - original) * 127.5  # (B, 3, H, W)

    def saturation(x: torch.Tensor) -> torch.Tensor:
        x = (x.clamp(-1, 1) + 1) / 2
        high, low = x.amax(1), x.amin(1)
        return ((high - low) / high.clamp(min=1e-3)).mean()

    return {
        "mae_rgb": [float(v) for v in diff.abs().mean(dim=(0, 2, 3))],
        "bias_rgb": [float(v) for v in diff.mean(dim=(0, 2, 3))],
        "saturation_ratio": float(saturation(recon) / saturation(original)),
    }


@torch.no_grad()
def evaluate(
    tokenizer: Any,
    teacher: Teacher,
    batch: int = 64,
    extractor: Any = None,
    image_size: int | None = None,
    per_photo: int = 64,
    digit_stride: int = 1,
) -> dict[str, Any]:
    size = image_size or tokenizer.config.image_size
    photos, names = heldout_photo_set(size, per_photo)
    centres, centre_names = heldout_photo_centres(size)
    digits, labels = heldout_digits(size)
    digits, labels = digits[::digit_stride], labels[::digit_stride]
    counts = torch.zeros(tokenizer.codebook_size, dtype=torch.long)
    photo_recon, _ = _round_trip(tokenizer, photos, batch, counts)
    digit_recon, digit_token_features = _round_trip(tokenizer, digits, batch, counts)
    centre_recon, _ = _round_trip(tokenizer, centres, batch)
    usage, perplexity = codebook_stats(counts)
    fd_extractor = None
    if extractor is not None:
        fd_extractor = feature_frechet(extractor.features(photos), extractor.features(photo_recon))
    old_four = torch.tensor([n in HELD_OUT_PHOTOS for n in names])
    per_photo_psnr = {}
    for name in sorted(set(names)):
        pick = torch.tensor([n == name for n in names])
        per_photo_psnr[name] = psnr(photo_recon[pick], photos[pick])
    whole = {name: psnr(centre_recon[i : i + 1], centres[i : i + 1]) for i, name in enumerate(centre_names)}
    return {
        "tokenizer": tokenizer.name,
        "image_size": size,
        "tokens_per_image": tokenizer.tokens_per_image(size),
        "codebook_size": tokenizer.codebook_size,
        "codebook_usage": usage,
        "perplexity": perplexity,
        "psnr_photos_db": psnr(photo_recon, photos),
        "ssim_photos": ssim(photo_recon, photos),
        "psnr_photos_four_db": psnr(photo_recon[old_four], photos[old_four]),
        "psnr_per_photo_db": per_photo_psnr,
        "psnr_whole_photos_db": psnr(centre_recon, centres),
        "ssim_whole_photos": ssim(centre_recon, centres),
        "psnr_whole_per_photo_db": whole,
        **colour_errors(photo_recon, photos),
        "psnr_digits_db": psnr(digit_recon, digits),
        "ssim_digits": ssim(digit_recon, digits),
        "fd_teacher_photos": feature_frechet(teacher.encode_image(photos), teacher.encode_image(photo_recon)),
        "fd_extractor_photos": fd_extractor,
        **_zero_shot(teacher, digits, digit_recon, digit_token_features, labels, batch),
        "protocol": _protocol(teacher, extractor, names, per_photo, len(photos), len(centres), len(digits), size),
    }


def _round_trip(
    tokenizer: Any, images: torch.Tensor, batch: int, counts: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reconstructions through the tokens and the tokens' pooled aligned features; code use added to ``counts``."""
    recons, pooled = [], []
    for start in range(0, len(images), batch):
        codes, ids, _ = tokenizer.quantize(images[start : start + batch])
        recons.append(tokenizer.decoder(codes).clamp(-1, 1))
        pooled.append(tokenizer.aligned(codes)[1])
        if counts is not None:
            counts.add_(torch.bincount(ids.flatten().long(), minlength=tokenizer.codebook_size))
    return torch.cat(recons), torch.cat(pooled)


def _zero_shot(
    teacher: Teacher,
    digits: torch.Tensor,
    digit_recon: torch.Tensor,
    token_features: torch.Tensor,
    labels: torch.Tensor,
    batch: int,
) -> dict[str, float]:
    """The teacher's zero-shot digit accuracy on the originals, on the reconstructions and through the tokens."""
    weights = teacher.zero_shot_weights(list(DIGIT_WORDS), DIGIT_PROMPTS)
    original = torch.cat([teacher.encode_image(digits[i : i + batch]) for i in range(0, len(digits), batch)])
    recon = torch.cat([teacher.encode_image(digit_recon[i : i + batch]) for i in range(0, len(digits), batch)])

    def accuracy(features: torch.Tensor) -> float:
        return float((features @ weights.T).argmax(-1).eq(labels).float().mean())

    teacher_acc, token_acc = accuracy(original), accuracy(token_features)
    return {
        "zero_shot_teacher_original": teacher_acc,
        "zero_shot_teacher_reconstruction": accuracy(recon),
        "zero_shot_through_tokens": token_acc,
        "retention": token_acc / teacher_acc if teacher_acc else 0.0,
        "token_teacher_cosine": float((token_features * original).sum(-1).mean()),
    }


def _protocol(
    teacher: Teacher, extractor: Any, names: list[str], per_photo: int, crops: int, centres: int, digits: int, size: int
) -> dict[str, str]:
    return {
        "data": f"held-out: {crops} crops ({per_photo} per photo, 1/4 to all of the shorter side) of "
        f"{', '.join(sorted(set(names)))} + the {centres} photos whole (centre square) + {digits} "
        f"MNIST digits, {size} px",
        "fd": f"FD-{teacher.name}: pooled {teacher.embed_dim}-d features, photo crops, originals vs recon"
        + (f"; FD-{extractor.name}: its pooled features, same images" if extractor is not None else ""),
        "psnr_ssim": "torchmetrics, data range [-1, 1], mean of per-image PSNR, SSIM Gaussian 11/1.5",
        "colour": "photo crops: mean |error| and mean error per channel on the 0-255 scale; saturation ratio = "
        "mean HSV saturation of reconstructions / originals",
        "zero_shot": f"{teacher.name}, 10 digit classes, prompts {list(DIGIT_PROMPTS)}",
    }


ROWS = [
    ("tokens per image", "tokens_per_image", "{:d}"),
    ("codebook usage", "codebook_usage", "{:.1%}"),
    ("perplexity", "perplexity", "{:.0f}"),
    ("PSNR photo crops (dB)", "psnr_photos_db", "{:.2f}"),
    ("SSIM photo crops", "ssim_photos", "{:.3f}"),
    ("PSNR crops of the old four (dB)", "psnr_photos_four_db", "{:.2f}"),
    ("PSNR whole photos (dB)", "psnr_whole_photos_db", "{:.2f}"),
    ("SSIM whole photos", "ssim_whole_photos", "{:.3f}"),
    ("MAE R/G/B (0-255)", "mae_rgb", "{:.1f}"),
    ("mean error R/G/B (0-255)", "bias_rgb", "{:+.1f}"),
    ("saturation ratio", "saturation_ratio", "{:.3f}"),
    ("PSNR digits (dB)", "psnr_digits_db", "{:.2f}"),
    ("FD-teacher photos", "fd_teacher_photos", "{:.4f}"),
    ("FD-efficientnet-lite0 photos", "fd_extractor_photos", "{:.2f}"),
    ("zero-shot: teacher on originals", "zero_shot_teacher_original", "{:.1%}"),
    ("zero-shot: teacher on reconstructions", "zero_shot_teacher_reconstruction", "{:.1%}"),
    ("zero-shot: through the tokens", "zero_shot_through_tokens", "{:.1%}"),
    ("retention (tokens / teacher)", "retention", "{:.1%}"),
    ("cosine(tokens, teacher)", "token_teacher_cosine", "{:.3f}"),
]


def cell(value: Any, fmt: str) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return " / ".join(fmt.format(v) for v in value)
    return fmt.format(value)


@torch.no_grad()
def reconstruction_figure(tokenizers: list[Any], path: Path, image_size: int | None = None, show_px: int = 256) -> None:
    """Original | each tokenizer's reconstruction of every wide held-out photo whole (its centre square at the
    tokenizer's size, shown at ``show_px`` with nearest-neighbour upsampling), PSNR under each tile."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch.nn.functional as F

    from mmtok.figures import save_png

    originals, names = heldout_photo_centres(show_px)
    columns = [("original", originals, None)]
    for tok in tokenizers:
        size = image_size or tok.config.image_size
        x, _ = heldout_photo_centres(size)
        recon = tok.decoder(tok.quantize(x)[0]).clamp(-1, 1)
        scores = [psnr(recon[i : i + 1], x[i : i + 1]) for i in range(len(x))]
        shown = F.interpolate(recon, size=(show_px, show_px), mode="nearest")
        columns.append((f"{tok.name}, {size} px, {tok.tokens_per_image(size)} tokens", shown, scores))
    # A row per photo, a column per tokenizer: 3 columns fit the docs' 688-px column at natural size, so the labels
    # (9 pt, 13.75 px) are read as drawn.
    fig, axes = plt.subplots(len(names), len(columns), figsize=(0.3 + 1.95 * len(columns), 0.35 + 2.0 * len(names)),
                             squeeze=False, layout="constrained")  # fmt: skip
    for col, (title, images, scores) in enumerate(columns):
        for row, name in enumerate(names):
            ax = axes[row, col]
            ax.imshow(((images[row].permute(1, 2, 0) + 1) / 2).clamp(0, 1).numpy())
            ax.set_xticks([])
            ax.set_yticks([])
            if row == 0:
                ax.set_title(title.replace(", ", "\n", 1), fontsize=9.5)
            if scores is not None:
                ax.set_xlabel(f"PSNR {scores[row]:.1f} dB", fontsize=9, labelpad=2)
            if col == 0:
                ax.set_ylabel(name, fontsize=9.5)
    save_png(fig, path)
    plt.close(fig)


def merge_results(path: Path, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records already in ``path`` that this run did not re-measure (same tokenizer, size and data), then
    this run's: one file accumulates every tokenizer's evaluation."""
    old = json.loads(path.read_text()) if path.is_file() else []

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return r["tokenizer"], r.get("image_size"), r.get("protocol", {}).get("data")

    new = {key(r) for r in results}
    return [r for r in old if key(r) not in new] + results


def main() -> None:
    import mmtok

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tokenizers", nargs="*", default=list(DEFAULT_TOKENIZERS))
    parser.add_argument("--image-size", type=int, default=None, help="default: each tokenizer's own")
    parser.add_argument("--per-photo", type=int, default=64, help="random crops per held-out photo")
    parser.add_argument("--digits", type=int, default=1, help="use every k-th held-out digit")
    parser.add_argument("--teacher", default=None, help="default: the tokenizer's own teacher")
    parser.add_argument("--extractor", default="efficientnet-lite0", help="second FD extractor ('none' to skip)")
    parser.add_argument("--json", type=Path, default=None, help="results file (records of other runs are kept)")
    parser.add_argument("--figure", type=Path, default=None, help="write original | reconstruction figure (PNG)")
    args = parser.parse_args()
    torch.manual_seed(0)
    extractor = None
    if args.extractor != "none":
        from mmtok.eval.extractors import get_extractor

        extractor = get_extractor(args.extractor)
    results, loaded = [], []
    for name in args.tokenizers:
        tok = mmtok.get_tokenizer(name).eval()
        loaded.append(tok)
        teacher = Teacher.from_pretrained(args.teacher or tok.config.teacher).eval()
        results.append(
            evaluate(
                tok,
                teacher,
                extractor=extractor,
                image_size=args.image_size,
                per_photo=args.per_photo,
                digit_stride=args.digits,
            )
        )
    header = ["metric", *[f"{r['tokenizer']} @{r['image_size']}" for r in results]]
    widths = [max(len(h), 38) for h in header]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for label, key, fmt in ROWS:
        cells = [label, *[cell(r[key], fmt) for r in results]]
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)))
    for r in results:
        print(
            f"  {r['tokenizer']} PSNR per photo (crops): "
            + ", ".join(f"{k} {v:.2f}" for k, v in r["psnr_per_photo_db"].items())
        )
        print(
            f"  {r['tokenizer']} PSNR per photo (whole): "
            + ", ".join(f"{k} {v:.2f}" for k, v in r["psnr_whole_per_photo_db"].items())
        )
    for key, text in results[0]["protocol"].items():
        print(f"  {key}: {text}")
    if args.json:
        args.json.write_text(json.dumps(merge_results(args.json, results), indent=2) + "\n")
    if args.figure:
        reconstruction_figure(loaded, args.figure, args.image_size)


if __name__ == "__main__":
    main()
