"""Benchmark: MI dynamic truncation vs the full sequence and fixed-budget baselines, on a real task.

Run: ``python -m mmtok.eval.bench_truncation [--examples 1000] [--threshold 0.18] [--batch 128]``.

Task: the shipped MoE backbone (backbone-tiny) reads which handwritten digit is written on a held-out photo from
the canvas's vq-clip-tiny tokens (128 px: 256 visual tokens) and a text prompt. Conditions:
- full sequence (256 visual tokens);
- MI dynamic truncation: keep the tokens whose pmi with any digit prompt ("a photo of the digit zero" ... "nine")
  exceeds the threshold (critic-vq-text, nats); the count varies per image;
- at exactly the same per-image token counts: random, uniform stride ("fixed truncation"), largest feature norm,
  DivPrune (max-min diversity); and MI top-k.
Reported: accuracy, mean visual tokens, the backbone's forward latency (median, batch ``--batch``) and its peak
memory (CUDA: max allocated; CPU: peak resident memory of a fresh process running the batch), and the cost of
scoring (features + critic) against the backbone compute it saves.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import mmtok
from mmtok.eval.bench import machine, print_table, write_json
from mmtok.models.data import DIGIT_WORDS
from mmtok.models.train_backbone import PROMPT, task_tokens
from mmtok.tokens import TokenSequence
from mmtok.truncation import token_features, truncate

METHODS = ("random", "uniform", "norm", "divprune", "mi")

MEMORY_SCRIPT = """
import json, sys, torch, mmtok
from safetensors.torch import load_file
torch.set_num_threads(2)
from mmtok.tokens import TokenSequence
data = load_file(sys.argv[1])
model = mmtok.get_model("backbone-tiny", kind="backbone").eval()
prompt = mmtok.get_tokenizer("text-bytes").encode(sys.argv[2])
examples = []
for i in range(len(data["lengths"])):
    n = int(data["lengths"][i])
    examples.append([prompt, TokenSequence("image", ids=data["ids"][i, :n], positions=data["positions"][i, :n],
                                           grid=(16, 16))])
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


def cpu_peak_memory(batch: list[TokenSequence], tmp: Path) -> float:
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
        [sys.executable, "-c", MEMORY_SCRIPT, str(path), PROMPT], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])["peak_delta_mb"]


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--threshold", type=float, default=0.18)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sweep", default="0.1,0.18,0.3,0.45,0.6,0.8", help="thresholds for the sweep table")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    tok = mmtok.get_tokenizer("vq-clip-tiny").eval()
    model = mmtok.get_model("backbone-tiny", kind="backbone").eval().to(device)
    critic = mmtok.get_model("critic-vq-text", kind="critic")
    data = task_tokens(tok, "heldout", 1000, 128, 1)
    n = min(args.examples, len(data["labels"]))
    prompt = mmtok.get_tokenizer("text-bytes").encode(PROMPT)
    context = [f"a photo of the digit {w}" for w in DIGIT_WORDS]
    full = [TokenSequence("image", ids=data["ids"][i], grid=(16, 16), tokenizer=tok.name) for i in range(n)]
    labels = data["labels"][:n]

    truncate(full[0], context=context, critic=critic)  # one-time loading (the teacher that encodes the context)
    started = time.perf_counter()
    mi_features = [critic.token_features(seq, tok) for seq in full]  # what the critic reads: local code windows
    mi_runs = [
        truncate(seq, context=context, critic=critic, features=f, threshold=args.threshold)
        for seq, f in zip(full, mi_features, strict=True)
    ]
    scoring_seconds = time.perf_counter() - started
    unit = [token_features(seq, tok) for seq in full]  # the tokens' CLIP-space features, for the baselines
    raw = [token_features(seq, tok, normalized=False) for seq in full]  # "norm" ranks by their length

    def features_for(method: str) -> list[torch.Tensor]:
        return mi_features if method == "mi" else raw if method == "norm" else unit

    counts = [r[1].tokens_out for r in mi_runs]
    conditions = {"full sequence": full, f"MI dynamic (threshold {args.threshold})": [r[0] for r in mi_runs]}
    for method in METHODS:
        label = f"{method} at the MI counts" if method != "mi" else "MI top-k at the same counts"
        kwargs = {"critic": critic, "context": context} if method == "mi" else {}
        conditions[label] = [
            truncate(seq, method=method, keep=k, features=f, seed=i, **kwargs)[0]
            for i, (seq, f, k) in enumerate(zip(full, features_for(method), counts, strict=True))
        ]
    fixed = round(statistics.fmean(counts))
    conditions[f"fixed truncation (uniform, {fixed} tokens)"] = [
        truncate(s, method="uniform", keep=fixed, features=f)[0] for s, f in zip(full, unit, strict=True)
    ]

    def accuracy(seqs: list[TokenSequence]) -> float:
        correct = 0
        with torch.no_grad():
            for start in range(0, n, 200):
                chunk = [[prompt, s] for s in seqs[start : start + 200]]
                correct += int(model(chunk)["logits"].argmax(-1).cpu().eq(labels[start : start + 200]).sum())
        return correct / n

    def latency(seqs: list[TokenSequence]) -> float:
        batch = [[prompt, s] for s in seqs[: args.batch]]
        times = []
        with torch.no_grad():
            model(batch)
            for _ in range(args.repeats):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t = time.perf_counter()
                model(batch)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t)
        return statistics.median(times)

    rows, results = [], {}
    full_latency = None
    with tempfile.TemporaryDirectory() as tmp:
        for name, seqs in conditions.items():
            acc = accuracy(seqs)
            seconds = latency(seqs)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
                with torch.no_grad():
                    model([[prompt, s] for s in seqs[: args.batch]])
                memory = torch.cuda.max_memory_allocated() / 2**20
            else:
                memory = cpu_peak_memory(seqs[: args.batch], Path(tmp))
            tokens = statistics.fmean(len(s) for s in seqs)
            full_latency = full_latency or seconds
            results[name] = {
                "accuracy": acc,
                "visual_tokens": tokens,
                "latency_ms": seconds * 1000,
                "peak_memory_mb": memory,
            }
            rows.append([name, f"{acc:.1%}", f"{tokens:.1f}", f"{seconds * 1000:.1f}", f"{memory:.0f}"])
    full_acc = results["full sequence"]["accuracy"]
    sweep_rows, sweep = [], []
    for threshold in [float(t) for t in args.sweep.split(",") if t.strip()]:
        kept = [
            truncate(seq, context=context, critic=critic, features=f, threshold=threshold)[0]
            for seq, f in zip(full, mi_features, strict=True)
        ]
        sizes = [len(k) for k in kept]
        row = {"threshold": threshold, "visual_tokens": statistics.fmean(sizes), "mi": accuracy(kept)}
        for method in ("random", "uniform"):
            row[method] = accuracy(
                [
                    truncate(seq, method=method, keep=k, features=f, seed=i)[0]
                    for i, (seq, f, k) in enumerate(zip(full, unit, sizes, strict=True))
                ]
            )
        sweep.append(row)
        sweep_rows.append(
            [
                f"{threshold:g}",
                f"{row['visual_tokens']:.1f}",
                f"{1 - row['visual_tokens'] / 256:.0%}",
                f"{row['mi']:.1%}",
                f"{row['mi'] / full_acc:.1%}",
                f"{row['random']:.1%}",
                f"{row['uniform']:.1%}",
            ]
        )
    mi_name = f"MI dynamic (threshold {args.threshold})"
    mi = results[mi_name]
    saved_per_example = (full_latency - mi["latency_ms"] / 1000) / args.batch
    scoring_per_example = scoring_seconds / n
    print(
        f"bench_truncation: backbone-tiny on {n} held-out digits-on-photos (vq-clip-tiny, 128 px, 256 visual "
        f"tokens), critic-vq-text, device {device}, batch {args.batch}. {machine()}"
    )
    print_table(
        "accuracy, tokens, latency and memory",
        ["condition", "accuracy", "visual tokens", "latency ms/batch", "peak memory MB"],
        rows,
    )
    print_table(
        f"threshold sweep (full sequence: {full_acc:.1%}; baselines at the same per-image counts)",
        ["threshold", "visual tokens", "removed", "MI accuracy", "of full", "random", "uniform"],
        sweep_rows,
    )
    print(
        f"\nMI removes {1 - mi['visual_tokens'] / 256:.0%} of visual tokens and keeps "
        f"{mi['accuracy'] / full_acc:.1%} of the full sequence's accuracy (target: >= 50% removed, >= 97% kept)"
    )
    print(
        f"scoring: {n * 256 / scoring_seconds:,.0f} tokens/s; {scoring_per_example * 1000:.2f} ms per image vs "
        f"{saved_per_example * 1000:.2f} ms of backbone time saved per image "
        f"({scoring_per_example / saved_per_example:.0%} of the saving; target <= 10%)"
        if saved_per_example > 0
        else "scoring: no backbone time saved"
    )
    payload = {"results": results, "sweep": sweep, "scoring_seconds": scoring_seconds, "examples": n}
    critic_flops = 2 * sum(m.weight.numel() for m in critic.critic.g if isinstance(m, torch.nn.Linear))
    backbone_flops = model.active_flops_per_token()
    print(
        f"per token: the critic's token tower costs {critic_flops / 1e3:.0f} kFLOPs, backbone-tiny "
        f"{backbone_flops / 1e3:.0f} kFLOPs ({critic_flops / backbone_flops:.0%}); against a 7B-parameter "
        f"LLM's ~14 GFLOPs per token the scoring would be {critic_flops / 14e9:.4%} of the work it removes per token"
    )
    payload["flops_per_token"] = {"critic": critic_flops, "backbone": backbone_flops}
    write_json(args.json, {**payload, "threshold": args.threshold, "machine": machine()})


if __name__ == "__main__":
    main()
