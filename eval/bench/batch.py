"""Benchmark: pricing a batch file against ``json.loads`` of the same lines, and its peak memory against its size.

Run: ``python -m mmtok.eval.bench.batch [--lines 50000] [--mb 200] [--repeats 3] [--workers N]``
(``--lines 2000 --mb 8 --repeats 1`` for a quick check).

The file: OpenAI Batch input (``{"custom_id", "method", "url", "body"}`` per line) of ``--lines`` Chat Completions
requests on gpt-4o-mini filling ``--mb`` MiB, each with its own prompt (a caption request naming its row, padded with
words to the average line size) and its own small image inline as base64 (noise, 16-40 px, JPEG or PNG, as thumbnails
in a captioning set are): no two requests share a quote. In one run, side by side,
median of ``--repeats``, each in a fresh process: ``json.loads`` of every line read from the file line by line (the
anchor: the least any reader of the lines does), and ``mmtok.price_batch`` of the file (read, parse every body,
measure each image from its first and last bytes, quote at batch and standard rates, per-model totals; lines not
kept). Peak memory is the process's maximum resident set, measured for the full file and for a tenth of it: memory
that does not grow with the file is the same for both. Targets (issue 38): within 3x of ``json.loads``, memory that
does not grow with the file.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mmtok.eval.bench import machine, print_table, write_json

TARGET_VS_JSON = 3.0


def thumbnail(rng: Any, index: int) -> tuple[str, str]:
    """(mime, base64) of a small noise image of its own size and pixels (JPEG or PNG)."""
    import numpy as np
    from PIL import Image

    w, h = int(rng.integers(16, 41)), int(rng.integers(16, 41))
    out = io.BytesIO()
    fmt = "PNG" if index % 4 == 0 else "JPEG"
    Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(
        out, fmt, **({"quality": 70} if fmt == "JPEG" else {})
    )
    return f"image/{fmt.lower()}", base64.b64encode(out.getvalue()).decode()


WORDS = ["describe", "the", "main", "subject", "its", "colours", "setting", "and", "mood", "in", "plain", "words"]


def write_batch(path: Path, lines: int, size_mib: float, seed: int = 0) -> int:
    """The benchmark's batch file (every line its own prompt and image); its size in bytes."""
    import numpy as np

    rng, pick = np.random.default_rng(seed), random.Random(seed)
    target = int(size_mib * 2**20 / lines)
    with path.open("w", encoding="utf-8") as f:
        for row in range(lines):
            mime, data = thumbnail(rng, row)
            pad = max(0, target - len(_line(row, mime, data, "")) - 1)
            text = " ".join(pick.choice(WORDS) for _ in range(pad // 5 + 1))[:pad]
            f.write(_line(row, mime, data, text) + "\n")
    return path.stat().st_size


def _line(row: int, mime: str, data: str, text: str) -> str:
    content = [{"type": "text", "text": f"Caption row {row} of the set. {text}"},
               {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}", "detail": "low"}}]  # fmt: skip
    body = {"model": "gpt-4o-mini", "max_tokens": 60, "messages": [{"role": "user", "content": content}]}
    return json.dumps({"custom_id": f"row-{row}", "method": "POST", "url": "/v1/chat/completions", "body": body})


def _measure(kind: str, path: str, workers: int) -> dict[str, Any]:
    """Run in a fresh process: the seconds and peak resident memory of one pass of ``kind`` over ``path``."""
    import resource

    start = time.perf_counter()
    if kind == "json.loads":
        count = 0
        with open(path, "rb") as f:
            for line in f:
                json.loads(line)
                count += 1
        result: dict[str, Any] = {"lines": count}
    else:
        from mmtok.budgets.pricing.batch import price_batch

        quote = price_batch(path, keep_lines=False, workers=workers)
        result = {"lines": quote.requests, "errors": len(quote.errors), "cost": str(quote.total_cost)}
    result["seconds"] = time.perf_counter() - start
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["worker_peak_rss_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # 0: none
    return result


def measure(kind: str, path: Path, workers: int) -> dict[str, Any]:
    code = f"import json, sys; from mmtok.eval.bench.batch import _measure; print(json.dumps(_measure({kind!r}, " \
           f"{str(path)!r}, {workers})))"  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=50_000)
    parser.add_argument("--mb", type=float, default=200.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0, help="pricing processes (0: mmtok's default)")
    parser.add_argument("--scratch", type=Path, default=Path("eval/results/.bench_batch"))
    parser.add_argument("--out", type=Path, default=Path("eval/results"))
    args = parser.parse_args(argv)
    args.scratch.mkdir(parents=True, exist_ok=True)
    full, tenth = args.scratch / "batch.jsonl", args.scratch / "tenth.jsonl"
    sizes = {
        "full": write_batch(full, args.lines, args.mb),
        "tenth": write_batch(tenth, args.lines // 10, args.mb / 10),
    }
    runs: dict[str, list[dict[str, Any]]] = {"json.loads": [], "mmtok": []}
    for _ in range(args.repeats):  # side by side: each repeat runs both
        for kind in runs:
            runs[kind].append(measure("json.loads" if kind == "json.loads" else "price", full, args.workers))
    small = measure("price", tenth, args.workers)
    for path in (full, tenth):
        path.unlink()
    args.scratch.rmdir()
    result = _summary(args, sizes, runs, small)
    write_json(args.out / "bench_batch.json", result)
    (args.out / "bench_batch.txt").write_text(result["text"] + "\n")
    print(result["text"])
    return result


def _summary(args: Any, sizes: dict[str, int], runs: dict[str, list[dict]], small: dict[str, Any]) -> dict[str, Any]:
    seconds = {kind: statistics.median(r["seconds"] for r in found) for kind, found in runs.items()}
    ratio = seconds["mmtok"] / seconds["json.loads"]
    peak_full = statistics.median(r["peak_rss_mib"] for r in runs["mmtok"])
    worker_peak = statistics.median(r["worker_peak_rss_mib"] for r in runs["mmtok"])
    peaks = {kind: statistics.median(r["peak_rss_mib"] for r in found) for kind, found in runs.items()}
    rows = [[kind, f"{args.lines / s:,.0f}", f"{s:.2f}", f"{peaks[kind]:.0f}"] for kind, s in seconds.items()]
    table = [f"  {'path':<12} {'lines/s':>9} {'seconds':>8} {'peak MiB':>9}"]
    table += [f"  {a:<12} {b:>9} {c:>8} {d:>9}" for a, b, c, d in rows]
    text = "\n".join([
        f"bench_batch: OpenAI Batch input, {args.lines:,} lines, {sizes['full'] / 2**20:.1f} MiB; median of "
        f"{args.repeats} side-by-side runs, each in a fresh process; workers {args.workers or 'default'}. {machine()}",
        "", *table, "",
        f"mmtok: {ratio:.2f}x the time of json.loads (target <= {TARGET_VS_JSON}x); peak memory {peak_full:.0f} MiB "
        f"(each worker process {worker_peak:.0f} MiB) for {sizes['full'] / 2**20:.0f} MiB, {small['peak_rss_mib']:.0f}"
        f" MiB (workers {small['worker_peak_rss_mib']:.0f}) for a tenth of it ({sizes['tenth'] / 2**20:.0f} MiB, "
        f"{args.lines // 10:,} lines)",
    ])  # fmt: skip
    print_table("batch", ["path", "lines/s", "seconds", "peak MiB"], rows)
    return {"machine": machine(), "lines": args.lines, "bytes": sizes["full"], "repeats": args.repeats,
            "mib": sizes["full"] / 2**20, "tenth_mib": sizes["tenth"] / 2**20,
            "lines_per_s": {kind: args.lines / s for kind, s in seconds.items()},
            "workers": args.workers, "seconds": seconds, "vs_json_loads": ratio, "target_vs_json_loads":
            TARGET_VS_JSON, "peak_rss_mib": {"full": peak_full, "tenth": small["peak_rss_mib"]},
            "worker_peak_rss_mib": {"full": worker_peak, "tenth": small["worker_peak_rss_mib"]},
            "tenth_bytes": sizes["tenth"], "runs": runs, "tenth_run": small, "text": text}  # fmt: skip


if __name__ == "__main__":
    main()
