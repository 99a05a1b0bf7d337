"""Benchmark: pricing API request bodies with inline base64 images, against ``json.loads`` of the same bodies.

Run: ``python -m mmtok.eval.bench.requests [--bodies 300] [--repeats 7] [--json FILE]``.

The corpus: ``--bodies`` bodies in each of two corpora (photos fit in 1,024 px and saved again, as clients send
them; and the camera originals), in OpenAI Chat Completions, Anthropic Messages and Gemini generateContent shapes
(a third each), each with a sentence of text and 1 to 8 photos from the photo corpus
(``mmtok.eval.tools.corpus.photo_folder``: JPEG, PNG and WebP, long side 256-4000 px) inline as base64, held in memory
as the bytes a client would send. In one run, interleaved, median of ``--repeats``: ``json.loads`` of every body
(the anchor: the least any reader of these bodies does), and ``price_request`` of every body on its own model (Gemini
bodies on gemini-3-flash-preview): parse, measure each image from its first and last bytes, count, cost. Every image's
count is checked against the count of its size read from the decoded file. Targets (issue 27): >= 1,000 bodies/s and
within 3x of ``json.loads``.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import random
from pathlib import Path

import PIL.Image
import PIL.ImageOps

from mmtok.budgets.pricing import image_tokens, price_request
from mmtok.eval.bench import machine, print_table, time_interleaved, write_json
from mmtok.eval.tools.corpus import folder_files, photo_folder

MIME = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp"}
SHAPES = ("openai-chat", "anthropic-messages", "gemini-generate")
MODELS = {"openai-chat": "gpt-4o", "anthropic-messages": "claude-opus-4-7", "gemini-generate": "gemini-3-flash-preview"}
TARGETS = {"bodies_per_s": 1000, "vs_json_loads": 3.0}


def corpus(
    n: int, photos: list[Path], max_side: int | None, seed: int = 0
) -> list[tuple[str, bytes, list[tuple[int, int]]]]:
    """(shape, body bytes, the displayed size of each image) of ``n`` bodies; with ``max_side``, each photo is
    resized to fit it and saved again in its own format, as clients do before they send images."""
    rng = random.Random(seed)
    encoded = {}
    bodies = []
    for i in range(n):
        shape = SHAPES[i % len(SHAPES)]
        chosen = rng.sample(photos, rng.randint(1, 8))
        images = []
        for path in chosen:
            if path not in encoded:
                encoded[path] = _encoded(path, max_side)
            images.append(encoded[path])
        bodies.append((shape, json.dumps(_body(shape, images)).encode(), [size for _, _, size in images]))
    return bodies


def _encoded(path: Path, max_side: int | None) -> tuple[str, str, tuple[int, int]]:
    with PIL.Image.open(path) as im:
        fmt = im.format
        shown = PIL.ImageOps.exif_transpose(im) if max_side else im
        if max_side is None:
            orientation = im.getexif().get(0x0112, 1)
            size = (im.height, im.width) if orientation in (5, 6, 7, 8) else im.size
            return MIME[fmt], base64.b64encode(path.read_bytes()).decode(), size
        shown.thumbnail((max_side, max_side))
        out = io.BytesIO()
        shown.convert("RGB").save(out, fmt, quality=85)
        return MIME[fmt], base64.b64encode(out.getvalue()).decode(), shown.size


def _body(shape: str, images: list[tuple[str, str, tuple[int, int]]]) -> dict:
    text = "Describe each picture in one sentence."
    if shape == "openai-chat":
        parts = [
            {"type": "image_url", "image_url": {"url": f"data:{m};base64,{d}", "detail": "high"}} for m, d, _ in images
        ]
        return {"model": MODELS[shape], "max_tokens": 300, "messages": [{"role": "user", "content": [
            {"type": "text", "text": text}, *parts]}]}  # fmt: skip
    if shape == "anthropic-messages":
        parts = [{"type": "image", "source": {"type": "base64", "media_type": m, "data": d}} for m, d, _ in images]
        return {"model": MODELS[shape], "max_tokens": 300, "messages": [{"role": "user", "content": [
            *parts, {"type": "text", "text": text}]}]}  # fmt: skip
    parts = [{"inlineData": {"mimeType": m, "data": d}} for m, d, _ in images]
    return {"contents": [{"role": "user", "parts": [{"text": text}, *parts]}]}


def price_all(bodies: list[tuple[str, bytes, list]]) -> list:
    return [price_request(body, MODELS[shape], at="2026-12-01") for shape, body, _ in bodies]


def loads_all(bodies: list[tuple[str, bytes, list]]) -> list:
    return [json.loads(body) for _, body, _ in bodies]


def check(bodies: list[tuple[str, bytes, list]], quotes: list) -> list[str]:
    """Bodies whose image lines differ from the counts of the decoded images' sizes."""
    wrong = []
    for n, ((shape, _, sizes), quote) in enumerate(zip(bodies, quotes, strict=True)):
        got = [ln.tokens for ln in quote.lines if ln.modality == "image"]
        want = [image_tokens(w, h, MODELS[shape], "high" if shape == "openai-chat" else None) for w, h in sizes]
        if got != want or not quote.complete:
            wrong.append(f"body {n} ({shape})")
    return wrong


CORPORA = {"as clients send them (fit in 1024 px)": 1024, "camera originals (256-4000 px)": None}


def measure(name: str, bodies: list, repeats: int) -> dict:
    quotes = price_all(bodies)  # warm: imports, rate cards, tiktoken
    seconds = time_interleaved(
        {"json.loads": lambda: loads_all(bodies), "mmtok price_request": lambda: price_all(bodies)}, repeats
    )
    wrong = check(bodies, quotes)
    images = sum(len(sizes) for _, _, sizes in bodies)
    megabytes = sum(len(body) for _, body, _ in bodies) / 1e6
    rates = {path: len(bodies) / s for path, s in seconds.items()}
    ratio = seconds["mmtok price_request"] / seconds["json.loads"]
    print(f"\n{name}: {len(bodies)} bodies, {images} inline images, {megabytes:.0f} MB of JSON")
    print_table("bodies/s", ["path", "bodies/s", "ms per body"], [[k, v, 1000 / v] for k, v in rates.items()])
    print(
        f"mmtok: {rates['mmtok price_request']:,.0f} bodies/s (target >= {TARGETS['bodies_per_s']:,}); "
        f"{ratio:.2f}x the time of json.loads alone (target <= {TARGETS['vs_json_loads']:g}x); image counts equal "
        f"to the decoded images' sizes in {len(bodies) - len(wrong)}/{len(bodies)} bodies"
    )
    return {"bodies": len(bodies), "images": images, "json_megabytes": megabytes, "rates": rates,
            "ratio_vs_json_loads": ratio, "mismatches": wrong}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bodies", type=int, default=300)
    parser.add_argument("--photos", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    photos = folder_files(photo_folder(args.photos))
    print(
        f"bench_requests: bodies in {', '.join(SHAPES)} shapes, 1-8 inline base64 photos each; median of "
        f"{args.repeats} interleaved runs. {machine()}"
    )
    results = {name: measure(name, corpus(args.bodies, photos, side), args.repeats) for name, side in CORPORA.items()}
    write_json(args.json, {"corpora": results, "targets": TARGETS, "repeats": args.repeats, "machine": machine()})


if __name__ == "__main__":
    main()
