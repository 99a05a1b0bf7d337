"""WER of speech after audio tokenisation, at several token rates, with and without the codebook.

Run: ``python -m mmtok.eval.av_eval [--tokenizer av-tiny] [--rates 12.5 16 25 50] [--asr whisper] [--json FILE]``.

Protocol: the 40 held-out Harvard sentences in ``eval/data/speech/heldout`` (espeak-ng en-us, 16 kHz FLAC, never
seen in training) are transcribed as they are (the baseline) and after encode -> decode (log-mel -> InverseMelScale
-> GriffinLim) at each token rate, with the residual codebook (discrete ids, the first 1, 2, 4 or 8 levels: 10 bits
each) and without it (continuous embeddings). WER is
corpus-level, jiwer on normalised text (see ``mmtok.eval.asr.NORMALISER``); the ASR backend is printed.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from mmtok.eval.asr import NORMALISER, get_asr, wer
from mmtok.models.data import heldout_speech


def evaluate(
    tokenizer: Any,
    rates: list[float],
    asr_name: str = "whisper",
    limit: int | None = None,
    levels: list[int] | None = None,
) -> dict[str, Any]:
    import mmtok

    asr = get_asr(asr_name)
    items = heldout_speech()[:limit]
    audio = [mmtok.load(p, kind="audio") for p, _ in items]
    texts = [t for _, t in items]
    started = time.perf_counter()
    rows = [
        {
            "condition": "original audio",
            "tokens_per_second": None,
            "codebook": None,
            "wer": wer(texts, [asr.transcribe(a) for a in audio]),
        }
    ]
    levels = levels or [tokenizer.config.num_quantizers]
    bits = (tokenizer.config.codebook_size - 1).bit_length()
    for rate in rates:
        for level in [*levels, None]:
            hyps = []
            tokens = 0
            for a in audio:
                seq = tokenizer.encode(a, tokens_per_second=rate, quantize=level is not None, codebook_levels=level)
                tokens += len(seq)
                hyps.append(asr.transcribe(tokenizer.decode(seq)))
            seconds = sum(a.duration_s for a in audio)
            rows.append(
                {
                    "condition": f"{rate:g} tokens/s, "
                    + (f"{level} codebook level{'s' if level > 1 else ''}" if level else "continuous"),
                    "tokens_per_second": rate,
                    "codebook_levels": level,
                    "wer": wer(texts, hyps),
                    "tokens": tokens,
                    "audio_seconds": round(seconds, 2),
                    "bits_per_second": round(tokens * level * bits / seconds, 1) if level else None,
                }
            )
    return {
        "tokenizer": tokenizer.name,
        "asr": asr.name,
        "normaliser": NORMALISER,
        "sentences": len(items),
        "rows": rows,
        "seconds": round(time.perf_counter() - started, 1),
        "data": "eval/data/speech/heldout: 40 Harvard sentences, espeak-ng en-us 150 wpm, 16 kHz",
    }


def main() -> None:
    import mmtok

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", default="av-tiny")
    parser.add_argument("--rates", type=float, nargs="+", default=[12.5, 16.0, 25.0, 50.0])
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4, 8], help="residual codebook levels")
    parser.add_argument("--asr", default="whisper")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None, help="PNG of WER against token rate")
    args = parser.parse_args()
    tok = mmtok.get_tokenizer(args.tokenizer).eval()
    result = evaluate(tok, args.rates, args.asr, args.limit, args.levels)
    print(
        f"WER after tokenisation — {result['tokenizer']}; ASR {result['asr']}; {result['normaliser']}; "
        f"{result['sentences']} held-out sentences"
    )
    for row in result["rows"]:
        extra = f"  ({row['bits_per_second']:.0f} bit/s)" if row.get("bits_per_second") else ""
        print(f"  {row['condition']:<36} WER {row['wer']:.1%}{extra}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.plot:
        plot(result, args.plot)


def plot(result: dict, path: Path) -> Path:
    """WER against token rate, one line per codebook setting, the original audio as a reference line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mmtok.figures import save_png

    lines: dict[str, list[tuple[float, float]]] = {}
    original = None
    for row in result["rows"]:
        if row["tokens_per_second"] is None:
            original = row["wer"]
            continue
        levels = row.get("codebook_levels")
        label = f"{levels} codebook level{'s' if levels != 1 else ''}" if levels else "continuous (no codebook)"
        lines.setdefault(label, []).append((row["tokens_per_second"], row["wer"]))
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, points in lines.items():
        points.sort()
        ax.plot([p[0] for p in points], [100 * p[1] for p in points], marker="o", label=label)
    if original is not None:
        ax.axhline(100 * original, color="black", linestyle="--", label="original audio")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r for pts in lines.values() for r, _ in pts}))
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("audio tokens per second")
    ax.set_ylabel("WER (%)")
    ax.set_title(f"{result['tokenizer']}: WER of reconstructed speech ({result['sentences']} held-out sentences)")
    ax.title.set_fontsize(9.5)
    ax.legend(fontsize=9)
    fig.tight_layout()
    save_png(fig, path)  # 110 dpi, its smallest text (9 pt) recorded for the docs' legibility check
    plt.close(fig)
    return path


if __name__ == "__main__":
    main()
