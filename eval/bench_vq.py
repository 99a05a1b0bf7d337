"""Benchmark: VQ tokenizer throughput, against open_clip's ViT-B-32 image encoder and the decode-only limit.

Run: ``python -m mmtok.eval.bench_vq [--device cpu|cuda] [--files 1000] [--repeats 5]``.

In one run: (1) ``encode`` and ``decode`` images/s at the default setting (64 px, 64 tokens), batch 32, against the
forward pass of open_clip's ViT-B-32 image encoder (random weights; speed only) on the same batch at its 224 px;
(2) tokenizing a folder of 1,000 JPEG photos (long side 256-4000 px) with ``mmtok.pipeline.tokenize_folder``
against decoding and resizing the same folder with the same DataLoader and no model (the limit for a folder job).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

import mmtok
from mmtok.eval.bench import machine, print_table, time_interleaved, write_json
from mmtok.eval.corpus import folder_files, photo_folder
from mmtok.models.training import select_device
from mmtok.pipeline import _collate, _Preprocessed, tokenize_folder


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", default="vq-clip-tiny")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import open_clip

    device = select_device(args.device)
    torch.manual_seed(0)
    tok = mmtok.get_tokenizer(args.tokenizer).to(device).eval()
    vit = open_clip.create_model("ViT-B-32", pretrained=None).visual.to(device).eval()
    x = torch.rand(args.batch, 3, tok.config.image_size, tok.config.image_size, device=device) * 2 - 1
    x224 = F.interpolate(x, size=(224, 224), mode="bilinear", align_corners=False)
    ids = tok.encode_batch(x)

    def run(fn):
        def timed():
            with torch.no_grad():
                fn()
            sync(device)

        return timed

    seconds = time_interleaved(
        {
            "encode": run(lambda: tok.encode_batch(x)),
            "decode": run(lambda: tok.decoder(tok.codes_from_ids(ids))),
            "open_clip ViT-B-32 image forward (224 px)": run(lambda: vit(x224)),
        },
        args.repeats,
    )
    model_rows = [
        [name, args.batch / s, (args.batch / s) / (args.batch / seconds["open_clip ViT-B-32 image forward (224 px)"])]
        for name, s in seconds.items()
    ]

    folder = photo_folder(args.files, formats=("jpeg",))
    files = folder_files(folder)

    def decode_only() -> None:
        loader = DataLoader(
            _Preprocessed(files, lambda p: tok.preprocess(p)),
            batch_size=args.batch,
            num_workers=args.workers,
            collate_fn=_collate,
        )
        for _ in loader:
            pass

    def tokenize() -> None:
        with tempfile.TemporaryDirectory() as out:
            tokenize_folder([folder], tok, out, batch_size=args.batch, workers=args.workers)

    decode_only()  # warm the page cache
    folder_seconds = time_interleaved(
        {"decode + resize only (limit)": decode_only, "tokenize_folder": tokenize}, max(1, args.repeats // 2)
    )
    folder_rates = {name: len(files) / s for name, s in folder_seconds.items()}
    ratio = folder_rates["tokenize_folder"] / folder_rates["decode + resize only (limit)"]

    print(
        f"bench_vq: {args.tokenizer} ({tok.tokens_per_image()} tokens at {tok.config.image_size} px), "
        f"device {device}, batch {args.batch}, median of {args.repeats}. {machine()}"
    )
    print_table("model throughput (images/s)", ["pass", "images/s", "x ViT-B-32"], model_rows)
    print_table(
        f"folder of {len(files)} JPEG photos, {args.workers} DataLoader workers",
        ["path", "images/s"],
        [[k, v] for k, v in folder_rates.items()],
    )
    print(f"\nfolder tokenization = {ratio:.0%} of the decode-only rate (target >= 60% on CPU)")
    write_json(
        args.json,
        {
            "device": str(device),
            "model": {r[0]: r[1] for r in model_rows},
            "folder": folder_rates,
            "ratio": ratio,
            "machine": machine(),
        },
    )


if __name__ == "__main__":
    main()
