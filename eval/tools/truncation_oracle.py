"""How far MI truncation is from the best any critic could do on bench_truncation's task.

The oracle knows where the digit is drawn: at MI's own per-image token counts it keeps the tokens with the most
stroke ink first (each token's mean stroke opacity over its 8 x 8 pixels, from the canvas generator), then the
critic's order for the rest. If the oracle also falls short of the full sequence's accuracy, what is missing is
not in the critic's choice but in how the backbone reads a shortened input.

Run: ``python -m mmtok.eval.tools.truncation_oracle [--thresholds -1,-0.5,-0.15,0,0.18,0.5] [--backbone NAME|FOLDER]
[--seed 1] --json eval/results/truncation_oracle.json`` (seed 1: the same 1,000 held-out canvases, backbone and critic
as bench_truncation; seed 2: the validation canvases the default threshold was chosen on, with
``--json eval/results/truncation_threshold_validation.json``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import torch

STROKE_TOKEN = 0.1  # a token with at least this mean stroke opacity is a stroke token (as the critic's check)


def measure(
    thresholds: list[float], examples: int = 1000, backbone: str = "backbone-tiny", seed: int = 1
) -> dict[str, Any]:
    import mmtok
    from mmtok.models.data import digit_canvases
    from mmtok.models.digits_qa import CONTEXT_PROMPTS, PROMPT, accuracy, task_tokens
    from mmtok.tokens import TokenSequence
    from mmtok.truncation import truncate_many

    tok = mmtok.get_tokenizer("vq-clip-tiny").eval()
    model = mmtok.get_model(backbone, kind="backbone").eval()
    critic = mmtok.get_model("critic-vq-text", kind="critic").eval()
    data = task_tokens(tok, "heldout", examples, 128, seed)  # seed 1: bench_truncation's canvases
    _, labels, _, opacity = digit_canvases("heldout", examples, 128, seed, strokes=True)
    if not torch.equal(labels, data["labels"]):
        raise RuntimeError("the canvas generator no longer matches the cached held-out tokens")
    ink = torch.nn.functional.avg_pool2d(opacity[:, None], 128 // 16).flatten(1)  # (n, 256) per token
    prompt = mmtok.get_tokenizer("text-bytes").encode(PROMPT)
    full = [TokenSequence("image", ids=row, grid=(16, 16), tokenizer=tok.name) for row in data["ids"]]

    def score(seqs: list[Any]) -> float:
        return accuracy(model, prompt, seqs, data["labels"], batch=100)

    full_accuracy = score(full)
    rows = []
    for threshold in thresholds:
        runs = truncate_many(full, context=CONTEXT_PROMPTS, threshold=threshold, critic=critic, tokenizer=tok)
        oracle, recall = [], []
        for i, (seq, (_, report)) in enumerate(zip(full, runs, strict=True)):
            order = torch.argsort(ink[i] * 1000 + report.scores, descending=True)[: report.tokens_out]
            oracle.append(seq.select(torch.sort(order).values, truncation="oracle"))
            strokes = ink[i] >= STROKE_TOKEN
            kept = torch.zeros(len(seq), dtype=torch.bool)
            kept[report.kept] = True
            recall.append(float(kept[strokes].float().mean()))
        mi_accuracy, oracle_accuracy = score([r[0] for r in runs]), score(oracle)
        rows.append(
            {
                "threshold": threshold,
                "visual_tokens": statistics.fmean(r[1].tokens_out for r in runs),
                "removed": 1 - statistics.fmean(r[1].tokens_out for r in runs) / len(full[0]),
                "mi_accuracy": mi_accuracy,
                "oracle_accuracy": oracle_accuracy,
                "mi_of_full": mi_accuracy / full_accuracy,
                "oracle_of_full": oracle_accuracy / full_accuracy,
                "mi_stroke_recall": statistics.fmean(recall),
            }
        )
    return {
        "backbone": model.name,
        "full_accuracy": full_accuracy,
        "examples": examples,
        "canvas_seed": seed,
        "rows": rows,
        "protocol": (
            f"{model.name}, critic-vq-text, vq-clip-tiny at 128 px (256 tokens), held-out digits-on-photos canvases "
            f"(task_tokens heldout, seed {seed}); oracle: stroke-ink tokens first, then the critic's order, at MI's "
            f"per-image counts; stroke token: mean opacity >= {STROKE_TOKEN}"
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--thresholds", default="-1,-0.5,-0.15,0,0.18,0.5")
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--backbone", default="backbone-tiny", help="a registered backbone or a trained folder")
    parser.add_argument(
        "--seed", type=int, default=1, help="held-out canvases: 1 is bench_truncation's set, others a validation set"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = measure([float(t) for t in args.thresholds.split(",")], args.examples, args.backbone, args.seed)
    print(f"full sequence: {result['full_accuracy']:.1%}")
    print("threshold  tokens  removed  MI acc (of full)  oracle acc (of full)  MI stroke recall")
    for r in result["rows"]:
        print(
            f"{r['threshold']:>9g}  {r['visual_tokens']:6.1f}  {r['removed']:7.0%}  "
            f"{r['mi_accuracy']:6.1%} ({r['mi_of_full']:.1%})    "
            f"{r['oracle_accuracy']:6.1%} ({r['oracle_of_full']:.1%})       {r['mi_stroke_recall']:.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
