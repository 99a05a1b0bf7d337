"""vq-photo-256's second training stage: each arm continued from stage 1, on the full held-out protocol.

Run: ``python -m mmtok.eval.tools.vq_stage2 [ARM ...] [--collect] [--json eval/results/vq_photo_stage2.json]``.

Stage 1 (``models/configs/train/vq-photo-256-stage1.toml``, output in ``runs/vq-photo-256-stage1``) is where every
arm starts; each arm is a config in ``models/configs/train/vq-photo-256-stage2/<arm>.toml`` (its first comment line
says what it changes) with its output in ``runs/vq-photo-256-stage2/<arm>``. For each arm not yet evaluated, this
trains it on one thread (``mmtok train vq CONFIG``, the child's wall time from its log), evaluates it with
``mmtok.eval.vq_eval`` on the full held-out protocol (as the shipped tokenizer's figures) and counts its codebook
usage on held-out photo crops and digits apart (``mmtok.eval.tools.vq_usage``): usage on vq_eval's set can rise
because digits take more codes (72% of its tokens are digits) while photos take fewer, so both are shown.
``stage1`` is the starting point itself, evaluated the same way (nothing trained). ``--collect`` only gathers the
arms already evaluated.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mmtok.eval.tools.vq_ablation import COLUMNS, _child, markdown_table, metric_cells

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "models" / "configs" / "train" / "vq-photo-256-stage2"
RUNS = ROOT / "runs" / "vq-photo-256-stage2"
STAGE1 = ROOT / "runs" / "vq-photo-256-stage1"
DEFAULT_JSON = ROOT / "eval" / "results" / "vq_photo_stage2.json"
USAGE_ROWS = {
    "usage_photo_crops": "photo crops, 64 per photo",
    "usage_digits": "digits (1,000 held-out MNIST)",
}
EXTRA_COLUMNS = (
    ("usage_photo_crops", "usage, photo crops alone", "{:.1%}"),
    ("usage_digits", "usage, digits alone", "{:.1%}"),
)


def arms() -> list[str]:
    return ["stage1", *sorted(p.stem for p in CONFIGS.glob("*.toml"))]


def folder(arm: str) -> Path:
    return STAGE1 if arm == "stage1" else RUNS / arm


def what_it_changes(arm: str) -> str:
    if arm == "stage1":
        return "the starting point: stage 1 itself (models/configs/train/vq-photo-256-stage1.toml)"
    return (CONFIGS / f"{arm}.toml").read_text(encoding="utf-8").splitlines()[0].lstrip("# ")


def run_arm(arm: str) -> dict[str, Any] | None:
    logs = RUNS / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    if not (folder(arm) / "model.safetensors").is_file():
        if arm == "stage1":
            raise SystemExit(f"{STAGE1} is missing: run mmtok train vq models/configs/train/vq-photo-256-stage1.toml")
        cmd = [sys.executable, "-m", "mmtok.cli.main", "train", "vq", str(CONFIGS / f"{arm}.toml"), "--device", "cpu"]
        _child(cmd, logs / f"{arm}.train.log")
    evaluated, usage = logs / f"{arm}.eval.json", logs / f"{arm}.usage.json"
    for out, module in ((evaluated, "mmtok.eval.vq_eval"), (usage, "mmtok.eval.tools.vq_usage")):
        out.unlink(missing_ok=True)
        _child([sys.executable, "-m", module, str(folder(arm)), "--json", str(out)], logs / f"{out.stem}.log")
    return collect_arm(arm)


def collect_arm(arm: str) -> dict[str, Any] | None:
    logs = RUNS / "logs"
    evaluated, usage = logs / f"{arm}.eval.json", logs / f"{arm}.usage.json"
    if not (evaluated.is_file() and usage.is_file()):
        return None
    record = json.loads(evaluated.read_text(encoding="utf-8"))[0]
    counted = json.loads(usage.read_text(encoding="utf-8"))["rows"]
    row: dict[str, Any] = {"arm": arm, "changes": what_it_changes(arm)}
    row.update({key: counted[label]["codebook_usage"] for key, label in USAGE_ROWS.items()})
    log = folder(arm) / "train_log.jsonl"
    if arm != "stage1" and log.is_file():
        last = json.loads(log.read_text(encoding="utf-8").splitlines()[-1])
        row.update(train_steps=last["step"], train_wall_s=last["seconds"])
    return {**row, **record}


def table(rows: list[dict[str, Any]]) -> str:
    columns = (*COLUMNS, *EXTRA_COLUMNS)
    head = ["arm", *(label for _, label, _ in columns)]
    return markdown_table(head, [[row["arm"], *metric_cells(row, columns)] for row in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arms", nargs="*", help=f"default: every arm ({', '.join(arms())})")
    parser.add_argument("--collect", action="store_true", help="only gather the arms already evaluated")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args()
    kept = {}  # naming arms updates their rows in the results file; the others stay
    if args.arms and args.json.is_file():
        kept = {row["arm"]: row for row in json.loads(args.json.read_text(encoding="utf-8"))["arms"]}
    rows = []
    for arm in args.arms or arms():
        row = collect_arm(arm)
        if row is None and not args.collect:
            print(f"training and evaluating {arm} ...", file=sys.stderr, flush=True)
            row = run_arm(arm)
        if row is not None:
            kept[arm] = row
            rows.append(row)
    rows = [kept[arm] for arm in arms() if arm in kept] if args.arms else rows
    print(table(rows))
    protocol = {
        "start": "runs/vq-photo-256-stage1 (models/configs/train/vq-photo-256-stage1.toml)",
        "configs": str(CONFIGS.relative_to(ROOT)),
        "eval": "python -m mmtok.eval.vq_eval (full held-out protocol); python -m mmtok.eval.tools.vq_usage",
        "threads": 1,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"protocol": protocol, "arms": rows}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
