"""Benchmark: MI dynamic truncation vs the full sequence and fixed-budget baselines, on a real task.

Run: ``python -m mmtok.eval.bench.truncation [--examples 1000] [--threshold -0.15] [--batch 128] [--threads 1]``
(the threshold defaults to ``mmtok.truncation.DEFAULT_THRESHOLD_NATS``).

Task: the shipped MoE backbone (backbone-tiny) reads which handwritten digit is written on a held-out photo from
the canvas's vq-clip-tiny tokens (128 px: 256 visual tokens) and a text prompt. Conditions:
- full sequence (256 visual tokens);
- MI dynamic truncation: keep the tokens whose pmi with any digit prompt ("a photo of the digit zero" ... "nine")
  exceeds the threshold (critic-vq-text, nats); the count varies per image (MI top-k at those counts is the same
  selection, so it is not a row of its own);
- at exactly the same per-image token counts: random, uniform stride, largest feature norm, DivPrune (max-min
  diversity); and fixed truncation (uniform stride, the MI mean count for every image).
Reported: accuracy on every held-out example; the backbone's forward latency on the first ``--batch`` examples
(median of ``--repeats`` runs, the conditions interleaved so machine noise hits all alike; wall and CPU time; of
which the visual embedding, conv stem included); its peak memory (CUDA: max allocated; CPU: the rise of the
resident set in a fresh process running the batch, with a fixed malloc mmap threshold); the cost of scoring (every
image's tokens scored in one critic pass, selections made: the median of ``--repeats`` calls, against the
backbone time it saves). The threshold sweep gives every method's accuracy at MI's per-image counts, and is
plotted (``--figure``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import mmtok
from mmtok.eval.bench import machine, print_table, write_json
from mmtok.models.digits_qa import CONTEXT_PROMPTS, PROMPT, accuracy, task_tokens
from mmtok.tokens import TokenSequence
from mmtok.truncation import DEFAULT_THRESHOLD_NATS, token_features, truncate, truncate_many

BASELINES = ("random", "uniform", "norm", "divprune")
VISUAL_TOKENS = 256
RESULTS = Path(__file__).resolve().parents[1] / "results"

MEMORY_SCRIPT = """
import json, sys, torch, mmtok
from safetensors.torch import load_file
torch.set_num_threads(int(sys.argv[3]))
from mmtok.tokens import TokenSequence
data = load_file(sys.argv[1])
model = mmtok.get_model("backbone-tiny", kind="backbone").eval()
prompt = mmtok.get_tokenizer("text-bytes").encode(sys.argv[2])
examples = []
for i in range(len(data["lengths"])):
    n = int(data["lengths"][i])
    examples.append([prompt, TokenSequence("image", ids=data["ids"][i, :n], positions=data["positions"][i, :n],
                                           grid=(16, 16))])
with torch.no_grad():
    model(examples[:2])  # first-call allocations (thread pools, kernels) are not the batch's
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])  # kB
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak resident set size (VmHWM) to the current one
before = status("VmRSS:")
with torch.no_grad():
    model(examples)
print(json.dumps({"peak_delta_mb": (status("VmHWM:") - before) / 1024}))
"""


# glibc serves large allocations from mmap only above a threshold that it raises as large blocks are freed, after
# which they come from the heap and their pages may stay resident: the resident-set peak of the same batch then
# varied from 63 to 95 MB between runs. A fixed threshold gives every tensor over 64 KiB its own mapping, returned
# when it is freed, so the peak tracks the live tensors (55.4-56.0 MB over the same three runs).
FIXED_MMAP = {"MALLOC_MMAP_THRESHOLD_": "65536"}


def cpu_peak_memory(batch: list[TokenSequence], tmp: Path, threads: int) -> float:
    from safetensors.torch import save_file

    longest = max(len(s) for s in batch)
    ids = torch.zeros(len(batch), longest, dtype=torch.long)
    positions = torch.zeros(len(batch), longest, dtype=torch.long)
    for i, s in enumerate(batch):
        ids[i, : len(s)] = s.ids
        positions[i, : len(s)] = s.token_positions
    path = tmp / "batch.safetensors"
    save_file({"ids": ids, "positions": positions, "lengths": torch.tensor([len(s) for s in batch])}, str(path))
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(path), PROMPT, str(threads)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **FIXED_MMAP},
    ).stdout
    return json.loads(out.strip().splitlines()[-1])["peak_delta_mb"]


def interleaved(cases: dict[str, Callable[[], Any]], repeats: int) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) seconds per case, the cases round-robin in each repeat, the order rotated by one from
    repeat to repeat, so that no case always runs right after the same other one (a large batch leaves the
    allocator and the caches in another state for whatever runs next)."""
    wall: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for repeat in range(repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            fn = cases[name]
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return {name: (statistics.median(wall[name]), statistics.median(cpu[name])) for name in cases}


def stem_flops_per_token(model: Any) -> float:
    """Multiply-adds x 2 of one kept token through the conv stem (3 x 3 convolutions at its site)."""
    convs = [m for m in model.visual_stem if isinstance(m, torch.nn.Conv2d)]
    return float(sum(2 * m.weight.numel() for m in convs))


def critic_flops_per_token(critic: Any, contexts: int) -> float:
    """One token's score from the window table: the window's lookups summed, the rest of the token tower, and a
    dot product per context item."""
    first = critic.critic.g[0]
    window = (2 * critic.config.radius + 1) ** 2
    rest = sum(2 * m.weight.numel() for m in critic.critic.g[1:] if isinstance(m, torch.nn.Linear))
    return float(window * first.out_features + rest + 2 * critic.config.embed * contexts)


def plot_sweep(sweep: list[dict[str, Any]], full_acc: float, threshold: float, methods: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mmtok.figures import save_png

    fig, ax = plt.subplots(figsize=(6.2, 4.6))  # 682 px at 110 dpi: the docs' column shows it at natural size
    tokens = [row["visual_tokens"] for row in sweep]
    for method in methods:
        style = {"linewidth": 2.5, "marker": "o"} if method == "mi" else {"linewidth": 1.2, "marker": "."}
        ax.plot(
            tokens, [100 * row[method] for row in sweep], label="MI (threshold)" if method == "mi" else method, **style
        )
    ax.axhline(100 * full_acc, color="black", linestyle="--", linewidth=1, label=f"full sequence ({VISUAL_TOKENS})")
    ax.axhline(97 * full_acc, color="grey", linestyle=":", linewidth=1, label="97% of full")
    for row in sweep:
        ax.annotate(f"{row['threshold']:g}", (row["visual_tokens"], 100 * row["mi"]), textcoords="offset points",
                    xytext=(0, 6), ha="center", fontsize=8)  # fmt: skip
    default = next((row for row in sweep if row["threshold"] == threshold), None)
    if default:
        ax.axvline(default["visual_tokens"], color="C0", alpha=0.3, linewidth=6, label=f"default threshold {threshold}")
    ax.set_xlabel("visual tokens kept (mean per image;\nMI's per-image counts for every method)")
    ax.set_ylabel("held-out accuracy (%)")
    ax.set_title("backbone-tiny, 1,000 held-out digits on photos:\naccuracy against tokens kept", fontsize=10)
    ax.set_xlim(0, VISUAL_TOKENS + 4)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_png(fig, path)  # its smallest text (8 pt, 12.2 px) recorded for the docs' legibility check
    plt.close(fig)


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD_NATS)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadiest on a shared machine)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--sweep", default="-2,-1.5,-1,-0.5,-0.15,0,0.18,0.5,1,1.5,2,2.5,3", help="thresholds for the sweep table"
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--figure", type=Path, default=None, help="the sweep plot (PNG)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    tok = mmtok.get_tokenizer("vq-clip-tiny").eval()
    model = mmtok.get_model("backbone-tiny", kind="backbone").eval().to(device)
    critic = mmtok.get_model("critic-vq-text", kind="critic").eval()
    data = task_tokens(tok, "heldout", 1000, 128, 1)
    n = min(args.examples, len(data["labels"]))
    prompt = mmtok.get_tokenizer("text-bytes").encode(PROMPT)
    context = CONTEXT_PROMPTS
    full = [TokenSequence("image", ids=data["ids"][i], grid=(16, 16), tokenizer=tok.name) for i in range(n)]
    labels = data["labels"][:n]

    truncate_many(full[:4], context=context, critic=critic, tokenizer=tok)  # loads the teacher, the window table
    scoring = interleaved(
        {"mi": lambda: truncate_many(full, context=context, threshold=args.threshold, critic=critic, tokenizer=tok)},
        args.repeats,
    )  # every image's tokens scored and selected, as one call: the median of --repeats
    scoring_seconds, scoring_cpu_seconds = scoring["mi"]
    mi_runs = truncate_many(full, context=context, threshold=args.threshold, critic=critic, tokenizer=tok)
    unit = [token_features(seq, tok) for seq in full]  # the tokens' CLIP-space features, for the baselines
    raw = [token_features(seq, tok, normalized=False) for seq in full]  # "norm" ranks by their length

    def baseline(method: str, counts: list[int]) -> list[TokenSequence]:
        features = raw if method == "norm" else unit
        return [
            truncate(seq, method=method, keep=k, features=f, seed=i)[0]
            for i, (seq, f, k) in enumerate(zip(full, features, counts, strict=True))
        ]

    counts = [r[1].tokens_out for r in mi_runs]
    mi_name = f"MI dynamic (threshold {args.threshold:g})"
    conditions = {"full sequence": full, mi_name: [r[0] for r in mi_runs]}
    for method in BASELINES:
        conditions[f"{method} at the MI counts"] = baseline(method, counts)
    fixed = round(statistics.fmean(counts))
    fixed_name = f"fixed truncation (uniform, {fixed} tokens)"
    conditions[fixed_name] = baseline("uniform", [fixed] * n)

    def forward(batch: list[list[Any]]) -> Callable[[], Any]:
        def run() -> None:
            with torch.no_grad():
                model(batch)
            if device.type == "cuda":
                torch.cuda.synchronize()

        return run

    def embed_images(batch: list[list[Any]]) -> Callable[[], Any]:
        def run() -> None:
            with torch.no_grad():
                model._batched_image_rows(batch)

        return run

    batches = {name: [[prompt, s] for s in seqs[: args.batch]] for name, seqs in conditions.items()}
    cases = {name: forward(batch) for name, batch in batches.items()}
    cases.update({f"{name} / stem": embed_images(batch) for name, batch in batches.items()})
    for fn in cases.values():
        fn()  # warm-up
    timings = interleaved(cases, args.repeats)

    rows, results = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, seqs in conditions.items():
            batch = batches[name]
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
                forward(batch)()
                memory = torch.cuda.max_memory_allocated() / 2**20
            else:
                memory = cpu_peak_memory(seqs[: args.batch], Path(tmp), args.threads)
            wall, cpu = timings[name]
            stem_wall, _ = timings[f"{name} / stem"]
            tokens = statistics.fmean(len(s) for s in seqs)
            batch_rows = sum(1 + len(prompt) + len(s) for _, s in batch)
            results[name] = {
                "accuracy": accuracy(model, prompt, seqs, labels, batch=200),
                "visual_tokens": tokens,
                "batch_rows": batch_rows,
                "latency_ms": wall * 1000,
                "cpu_ms": cpu * 1000,
                "image_embedding_ms": stem_wall * 1000,
                "peak_memory_mb": memory,
            }
    full_result = results["full sequence"]
    for name, r in results.items():
        r["of_full_accuracy"] = r["accuracy"] / full_result["accuracy"]
        r["tokens_removed"] = 1 - r["visual_tokens"] / VISUAL_TOKENS
        r["rows_removed"] = 1 - r["batch_rows"] / full_result["batch_rows"]
        r["latency_saving"] = 1 - r["latency_ms"] / full_result["latency_ms"]
        r["memory_saving"] = 1 - r["peak_memory_mb"] / full_result["peak_memory_mb"]
        r["stem_share"] = r["image_embedding_ms"] / r["latency_ms"]
        rows.append(
            [
                name,
                f"{r['accuracy']:.1%}",
                f"{r['visual_tokens']:.1f}",
                f"{r['latency_ms']:.1f}",
                f"{r['cpu_ms']:.1f}",
                f"{r['image_embedding_ms']:.1f}",
                f"{r['peak_memory_mb']:.0f}",
            ]
        )
    full_acc = full_result["accuracy"]

    sweep_methods = ["mi", *BASELINES]
    sweep_rows, sweep = [], []
    for threshold in [float(t) for t in args.sweep.split(",") if t.strip()]:
        runs = truncate_many(full, context=context, threshold=threshold, critic=critic, tokenizer=tok)
        sizes = [r[1].tokens_out for r in runs]
        row: dict[str, Any] = {"threshold": threshold, "visual_tokens": statistics.fmean(sizes)}
        row["removed"] = 1 - row["visual_tokens"] / VISUAL_TOKENS
        row["mi"] = accuracy(model, prompt, [r[0] for r in runs], labels, batch=200)
        for method in BASELINES:
            row[method] = accuracy(model, prompt, baseline(method, sizes), labels, batch=200)
        row["mi_of_full"] = row["mi"] / full_acc
        row["mi_minus_divprune"] = row["mi"] - row["divprune"]
        row["mi_minus_random"] = row["mi"] - row["random"]
        sweep.append(row)
        sweep_rows.append(
            [
                f"{threshold:g}",
                f"{row['visual_tokens']:.1f}",
                f"{row['removed']:.0%}",
                f"{row['mi']:.1%}",
                f"{row['mi_of_full']:.1%}",
                *[f"{row[m]:.1%}" for m in BASELINES],
            ]
        )

    mi = results[mi_name]
    per_image_saved_ms = (full_result["latency_ms"] - mi["latency_ms"]) / args.batch
    scoring_per_image_ms = scoring_seconds * 1000 / n
    critic_flops = critic_flops_per_token(critic, len(context))
    backbone_flops = model.active_flops_per_token() + stem_flops_per_token(model)
    removed_per_image = VISUAL_TOKENS - mi["visual_tokens"]
    targets = {
        "tokens_removed": mi["tokens_removed"],
        "of_full_accuracy": mi["of_full_accuracy"],
        "latency_of_proportional": mi["latency_saving"] / mi["tokens_removed"],
        "memory_of_proportional": mi["memory_saving"] / mi["tokens_removed"],
        "latency_of_rows_removed": mi["latency_saving"] / mi["rows_removed"],
        "memory_of_rows_removed": mi["memory_saving"] / mi["rows_removed"],
        "scoring_of_saved_time": scoring_per_image_ms / per_image_saved_ms if per_image_saved_ms > 0 else None,
        "scoring_of_saved_flops": VISUAL_TOKENS * critic_flops / (removed_per_image * backbone_flops),
        "min_mi_minus_divprune": min(r["mi_minus_divprune"] for r in sweep),
        "min_mi_minus_random": min(r["mi_minus_random"] for r in sweep),
    }

    print(
        f"bench_truncation: backbone-tiny on {n} held-out digits-on-photos (vq-clip-tiny, 128 px, {VISUAL_TOKENS} "
        f"visual tokens), critic-vq-text, device {device}, {args.threads} thread(s), batch {args.batch}, median of "
        f"{args.repeats} interleaved runs. {machine()}"
    )
    print_table(
        "accuracy, tokens, latency and memory (batches packed, no padding; the stem runs at kept sites)",
        ["condition", "accuracy", "visual tokens", "ms/batch", "CPU ms", "image embedding ms", "peak MB"],
        rows,
    )
    print_table(
        f"threshold sweep (full sequence: {full_acc:.1%}; baselines at MI's per-image counts)",
        ["threshold", "visual tokens", "removed", "MI", "of full", *BASELINES],
        sweep_rows,
    )
    print(
        f"\nMI removes {mi['tokens_removed']:.0%} of visual tokens and keeps {mi['of_full_accuracy']:.1%} of the full "
        "sequence's accuracy (target: >= 50% removed, >= 97% kept)"
    )
    print(
        f"latency {mi['latency_saving']:.0%} and peak memory {mi['memory_saving']:.0%} below the full sequence's, "
        f"for {mi['tokens_removed']:.0%} of the visual tokens ({mi['rows_removed']:.0%} of the rows, the prompt "
        f"included) removed: {targets['latency_of_proportional']:.0%} and {targets['memory_of_proportional']:.0%} of "
        "the proportional saving (target >= 80%)"
    )
    print(
        f"scoring: {n * VISUAL_TOKENS / scoring_seconds:,.0f} tokens/s; {scoring_per_image_ms:.3f} ms per image "
        f"(CPU {scoring_cpu_seconds * 1000 / n:.3f} ms) vs {per_image_saved_ms:.3f} ms of backbone time saved per "
        f"image: {targets['scoring_of_saved_time']:.1%} of the saving (target <= 10%)"
        if per_image_saved_ms > 0
        else "scoring: no backbone time saved"
    )
    print(
        f"per token: scoring {critic_flops / 1e3:.1f} kFLOPs (window-table lookups + the critic's last layer), the "
        f"backbone {backbone_flops / 1e3:.0f} kFLOPs (stem {stem_flops_per_token(model) / 1e3:.0f}); scoring all "
        f"{VISUAL_TOKENS} tokens costs {targets['scoring_of_saved_flops']:.1%} of the FLOPs removing "
        f"{removed_per_image:.0f} of them saves"
    )
    gaps = {m: ", ".join(f"{(r['mi'] - r[m]) * 100:+.1f}" for r in sweep) for m in ("divprune", "random")}
    print(f"MI minus DivPrune across the sweep: {gaps['divprune']} points (target >= +2)")
    print(f"MI minus random across the sweep: {gaps['random']} points (target >= +10)")
    if args.figure:
        plot_sweep(sweep, full_acc, args.threshold, sweep_methods, args.figure)
        print(f"figure: {args.figure}")
    payload = {
        "results": results,
        "sweep": sweep,
        "scoring_seconds": scoring_seconds,
        "scoring_cpu_seconds": scoring_cpu_seconds,
        "scoring_ms_per_image": scoring_per_image_ms,
        "saved_ms_per_image": per_image_saved_ms,
        "flops_per_token": {"critic": critic_flops, "backbone": backbone_flops, "stem": stem_flops_per_token(model)},
        "targets": targets,
        "examples": n,
        "threshold": args.threshold,
        "threads": args.threads,
        "batch": args.batch,
        "repeats": args.repeats,
        "torch": torch.__version__,
        "machine": machine(),
    }
    write_json(args.json, payload)


if __name__ == "__main__":
    main()
