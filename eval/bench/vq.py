"""Benchmark: VQ tokenizer throughput, against open_clip's ViT-B-32 image encoder and the decode-only limit.

Run: ``python -m mmtok.eval.bench.vq [--tokenizer NAME ...] [--device cpu|cuda] [--files 1000] [--repeats 5]``.

In one run: (1) for each tokenizer (default: vq-photo-256 at 128 px = 256 tokens, and vq-clip-tiny at 64 px = 64
tokens), ``encode`` and ``decode`` images/s at its default setting, batch 32, interleaved with the forward pass of
open_clip's ViT-B-32 image encoder (random weights; speed only) on the same batch at its 224 px; (2) tokenizing a
folder of 1,000 JPEG photos (long side 256-4000 px) with the first tokenizer and ``mmtok.pipeline.tokenize_folder``
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
from mmtok.eval.tools.corpus import folder_files, photo_folder
from mmtok.models.training import select_device
from mmtok.pipeline import _collate, _Preprocessed, tokenize_folder


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", action="append", default=None, help="repeat for several")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import open_clip

    device = select_device(args.device)
    names = args.tokenizer or ["vq-photo-256", "vq-clip-tiny"]
    torch.manual_seed(0)
    toks = {name: mmtok.get_tokenizer(name).to(device).eval() for name in names}
    vit = open_clip.create_model("ViT-B-32", pretrained=None).visual.to(device).eval()
    x224 = torch.rand(args.batch, 3, 224, 224, device=device) * 2 - 1

    def run(fn):
        def timed():
            with torch.no_grad():
                fn()
            sync(device)

        return timed

    vit_name = "open_clip ViT-B-32 image forward (224 px)"
    passes = {vit_name: run(lambda: vit(x224))}
    for name, tok in toks.items():
        size = tok.config.image_size
        x = F.interpolate(x224, size=(size, size), mode="bilinear", align_corners=False)
        ids = tok.encode_batch(x)
        label = f"{name} ({size} px, {tok.tokens_per_image()} tokens)"
        passes[f"{label} encode"] = run(lambda tok=tok, x=x: tok.encode_batch(x))
        passes[f"{label} decode"] = run(lambda tok=tok, ids=ids: tok.decoder(tok.codes_from_ids(ids)))
    seconds = time_interleaved(passes, args.repeats)
    vit_rate = args.batch / seconds[vit_name]
    model_rows = [[name, args.batch / s, (args.batch / s) / vit_rate] for name, s in seconds.items()]
    tok = toks[names[0]]

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
        f"bench_vq: {', '.join(names)}; device {device}, batch {args.batch}, median of {args.repeats}, "
        f"torch threads {torch.get_num_threads()}. {machine()}"
    )
    print_table("model throughput (images/s)", ["pass", "images/s", "x ViT-B-32"], model_rows)
    print_table(
        f"folder of {len(files)} JPEG photos, {names[0]}, {args.workers} DataLoader workers",
        ["path", "images/s"],
        [[k, v] for k, v in folder_rates.items()],
    )
    print(f"\nfolder tokenization = {ratio:.0%} of the decode-only rate (target >= 60% on CPU)")
    write_json(
        args.json,
        {
            "device": str(device),
            "tokenizers": {
                name: {"image_size": t.config.image_size, "tokens": t.tokens_per_image()} for name, t in toks.items()
            },
            "batch": args.batch,
            "model": {r[0]: r[1] for r in model_rows},
            "x_vit_b_32": {r[0]: r[2] for r in model_rows},
            "folder": folder_rates,
            "ratio": ratio,
            "machine": machine(),
        },
    )


if __name__ == "__main__":
    main()
