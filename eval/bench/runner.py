"""Benchmark: an evaluation suite with 1 worker vs 2 workers on this machine.

Run: ``python -m mmtok.eval.bench.runner [--suite speech-heldout] [--limit 24]``.

Each run starts from an empty run folder (model loading included: a user's wall-clock time). With N workers each
process uses cpu_count / N threads. Target: 2 workers >= 1.6x faster than 1 on a 2-core machine.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tomllib
from pathlib import Path

from mmtok.eval.bench import machine, print_table, write_json
from mmtok.eval.runner import run
from mmtok.eval.suite import load_suite


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="speech-heldout")
    parser.add_argument("--limit", type=int, default=24)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    suite = load_suite(args.suite)
    text = suite.path.read_text()
    data = tomllib.loads(text)
    seconds = {}
    with tempfile.TemporaryDirectory() as tmp:
        limited = Path(tmp) / "suite.toml"
        limited.write_text(
            text.replace("[dataset]", f"[dataset]\nlimit = {args.limit}", 1)
            if "limit" not in data.get("dataset", {})
            else text
        )
        summaries = {}
        for workers in (1, 2):
            out = Path(tmp) / f"run-{workers}"
            started = time.perf_counter()
            summaries[workers] = run(limited, out, workers=workers)
            seconds[workers] = time.perf_counter() - started
    same = {k: round(v, 6) for k, v in summaries[1]["metrics"].items()} == {
        k: round(v, 6) for k, v in summaries[2]["metrics"].items()
    }
    rows = [[f"{w} worker{'s' if w > 1 else ''}", f"{s:.1f}", f"{seconds[1] / s:.2f}x"] for w, s in seconds.items()]
    print(f"bench_runner: suite {suite.name}, {args.limit} items, from an empty run folder. {machine()}")
    print_table("wall-clock", ["workers", "seconds", "speed-up"], rows)
    print(f"\n2 workers are {seconds[1] / seconds[2]:.2f}x faster than 1 (target >= 1.6x); identical metrics: {same}")
    write_json(args.json, {"seconds": seconds, "same_metrics": same, "machine": machine()})


if __name__ == "__main__":
    main()
