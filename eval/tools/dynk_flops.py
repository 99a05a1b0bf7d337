"""Dynamic-k vs top-2 routing: training FLOPs spent to reach equal training loss, from the two runs' logs.

Run: ``python -m mmtok.eval.tools.dynk_flops [--top2 models/weights/backbone-tiny]
[--dynk .cache/ablation/backbone-tiny-dynk] [--json PATH]`` after
``mmtok train backbone models/configs/train/backbone-tiny-dynk.toml`` (the top-2 run is the shipped backbone).

Both runs train on the same data, batch and steps. Per logged interval, the active FLOPs per token follow the
interval's logged average k (attention projections + k SwiGLU experts + router, as ``Backbone.active_flops_per_token``);
the loss is a running mean of four logged points (100 steps). For each loss target: the first step and the cumulative
FLOPs per token position at which each run's smoothed loss reaches it, and their ratio. Held-out accuracy and
FLOPs per token at evaluation come from each checkpoint's own record.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mmtok.eval.bench import print_table, write_json

ROOT = Path(__file__).resolve().parents[2]
TARGETS = (1.0, 0.6, 0.4, 0.3)


def flops_per_token(config: dict, k: float) -> float:
    dim, layers = config["dim"], config["layers"]
    moe = config["moe"]
    return layers * (2 * 4 * dim * dim + 2 * 3 * dim * moe["hidden_dim"] * k + 2 * dim * moe["num_experts"])


def curve(folder: Path) -> tuple[dict, list[tuple[int, float, float]]]:
    """(checkpoint record, [(step, smoothed loss, cumulative FLOPs per token position)])."""
    record = json.loads((folder / "config.json").read_text())
    logs = [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines() if '"loss"' in line]
    points, cumulative, previous = [], 0.0, 0
    for i, entry in enumerate(logs):
        cumulative += flops_per_token(record["config"], entry["avg_k"]) * (entry["step"] - previous)
        previous = entry["step"]
        window = logs[max(0, i - 3) : i + 1]
        points.append((entry["step"], sum(e["loss"] for e in window) / len(window), cumulative))
    return record, points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--top2", type=Path, default=ROOT / "models" / "weights" / "backbone-tiny")
    parser.add_argument("--dynk", type=Path, default=ROOT / ".cache" / "ablation" / "backbone-tiny-dynk")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    runs = {"top-2": curve(args.top2), "dynamic k": curve(args.dynk)}
    rows, payload = [], {"targets": {}, "runs": {}}
    for target in TARGETS:
        reached = {}
        for name, (_, points) in runs.items():
            hit = next(((s, f) for s, loss, f in points[3:] if loss <= target), None)
            reached[name] = hit
        top, dyn = reached["top-2"], reached["dynamic k"]
        ratio = dyn[1] / top[1] if top and dyn else None
        payload["targets"][str(target)] = {"top-2": top, "dynamic k": dyn, "flops_ratio": ratio}
        rows.append(
            [
                f"{target:g}",
                f"{top[0]}" if top else "not reached",
                f"{top[1] / 1e6:.0f}" if top else "-",
                f"{dyn[0]}" if dyn else "not reached",
                f"{dyn[1] / 1e6:.0f}" if dyn else "-",
                f"{ratio:.2f}" if ratio else "-",
            ]
        )
    print_table(
        "training FLOPs to reach a training loss (MFLOPs per token position, cumulative over steps)",
        ["loss", "top-2 step", "top-2 MFLOPs", "dyn-k step", "dyn-k MFLOPs", "dyn-k / top-2"],
        rows,
    )
    summary = []
    for name, (record, _) in runs.items():
        training = record["training"]
        keys = ("heldout_accuracy", "eval_average_k", "active_flops_per_token")
        payload["runs"][name] = {k: training[k] for k in keys}
        summary.append(
            [
                name,
                f"{training['eval_average_k']:.2f}",
                f"{training['active_flops_per_token'] / 1e3:.0f}",
                f"{training['heldout_accuracy']:.1%}",
            ]
        )
    print_table(
        "evaluation (held-out digits on photos, 1,000 canvases)",
        ["routing", "average k", "kFLOPs/token", "held-out accuracy"],
        summary,
    )
    write_json(args.json, payload)


if __name__ == "__main__":
    main()
