"""The vq-photo-256 ablations: train each arm, evaluate it on the held-out set, and gather one results table.

Run: ``python -m mmtok.eval.tools.vq_ablation [ARM ...] [--collect] [--json eval/results/vq_photo_ablation.json]``.

Each arm is a config in ``models/configs/train/ablation/vq-photo-<arm>.toml`` (its first comment line says what it
changes). For each arm not yet evaluated, this trains it on one thread (``mmtok train vq CONFIG``, in a child
process timed with ``resource``: CPU seconds of training) and evaluates it with ``mmtok.eval.vq_eval`` on the
reduced held-out protocol (24 crops per held-out photo, every 5th held-out digit). ``--collect`` only gathers
the arms already evaluated. Work files live in ``.cache/ablation/`` (the configs' ``out``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "models" / "configs" / "train" / "ablation"
WORK = ROOT / ".cache" / "ablation"
DEFAULT_JSON = ROOT / "eval" / "results" / "vq_photo_ablation.json"
EVAL_ARGS = ["--per-photo", "24", "--digits", "5"]
COLUMNS = (
    ("psnr_photos_db", "PSNR crops (dB)", "{:.2f}"),
    ("psnr_whole_photos_db", "PSNR whole (dB)", "{:.2f}"),
    ("ssim_photos", "SSIM", "{:.3f}"),
    ("saturation_ratio", "saturation ratio", "{:.3f}"),
    ("fd_teacher_photos", "FD-clip-tiny", "{:.4f}"),
    ("fd_extractor_photos", "FD-effnet", "{:.1f}"),
    ("codebook_usage", "usage", "{:.1%}"),
    ("retention", "retention", "{:.1%}"),
)


def arms() -> list[str]:
    return sorted(p.stem.removeprefix("vq-photo-") for p in CONFIGS.glob("vq-photo-*.toml"))


def what_it_changes(arm: str) -> str:
    first = (CONFIGS / f"vq-photo-{arm}.toml").read_text(encoding="utf-8").splitlines()[0]
    return first.lstrip("# ").removeprefix("vq-photo-256 ablation ").rstrip(":")


def _child(cmd: list[str], log: Path) -> tuple[float, float]:
    """Run ``cmd`` (one thread) with its output in ``log``; (CPU seconds, wall seconds) of the child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as out:
        subprocess.run(
            cmd, stdout=out, stderr=subprocess.STDOUT, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=ROOT
        )  # the configs' relative paths (init, out) are the repository's
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, time.perf_counter() - started


def run_arm(arm: str) -> dict[str, Any]:
    name = f"vq-photo-{arm}"
    (WORK / "logs").mkdir(parents=True, exist_ok=True)
    cpu, wall = _child(
        [sys.executable, "-m", "mmtok.cli.main", "train", "vq", str(CONFIGS / f"{name}.toml"), "--device", "cpu"],
        WORK / "logs" / f"{name}.train.log",
    )
    result = WORK / "evals" / f"{name}.json"
    result.parent.mkdir(parents=True, exist_ok=True)
    result.unlink(missing_ok=True)
    _child(
        [sys.executable, "-m", "mmtok.eval.vq_eval", str(WORK / name), *EVAL_ARGS, "--json", str(result)],
        WORK / "logs" / f"{name}.eval.log",
    )
    (WORK / "logs" / f"{name}.cpu.json").write_text(json.dumps({"train_cpu_s": cpu, "train_wall_s": wall}))
    return collect_arm(arm)


def collect_arm(arm: str) -> dict[str, Any] | None:
    name = f"vq-photo-{arm}"
    result = WORK / "evals" / f"{name}.json"
    if not result.is_file():
        return None
    record = json.loads(result.read_text(encoding="utf-8"))[-1]
    timing = WORK / "logs" / f"{name}.cpu.json"
    cpu = json.loads(timing.read_text(encoding="utf-8")) if timing.is_file() else {}
    if "train_cpu_s" in cpu:
        cpu["train_cpu_min"] = round(cpu["train_cpu_s"] / 60, 1)
    return {"arm": arm, "changes": what_it_changes(arm), **cpu, **record}


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    """A Markdown table: the first column left-aligned (names), the others right-aligned (figures)."""
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in rows])


def metric_cells(row: dict[str, Any], columns: tuple[tuple[str, str, str], ...] = COLUMNS) -> list[str]:
    return [fmt.format(row[key]) for key, _, fmt in columns]


def table(rows: list[dict[str, Any]]) -> str:
    head = ["arm", *(label for _, label, _ in COLUMNS), "train CPU min"]
    cpu = [f"{row['train_cpu_min']:.1f}" if "train_cpu_min" in row else "n/a" for row in rows]
    return markdown_table(head, [[row["arm"], *metric_cells(row), c] for row, c in zip(rows, cpu, strict=True)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arms", nargs="*", help=f"default: every arm ({', '.join(arms())})")
    parser.add_argument("--collect", action="store_true", help="only gather the arms already evaluated")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args()
    chosen = args.arms or arms()
    rows = []
    for arm in chosen:
        row = collect_arm(arm)
        if row is None and not args.collect:
            print(f"training and evaluating {arm} ...", file=sys.stderr, flush=True)
            row = run_arm(arm)
        if row is not None:
            rows.append(row)
    print(table(rows))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    protocol = {
        "eval": ["python -m mmtok.eval.vq_eval", *EVAL_ARGS],
        "threads": 1,
        "configs": str(CONFIGS.relative_to(ROOT)),
    }
    args.json.write_text(json.dumps({"protocol": protocol, "arms": rows}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
