"""``mmtok demo``: the main job on the shipped defaults and sample media, step by step.

1. inspect the sample media (headers only);  2. price them on three providers;  3. tokenize them with the shipped
tokenizers (vq-clip-tiny for images, av-tiny for speech and video) and measure what the tokens keep;
4. ask the shipped MoE backbone about held-out digit photos, with and without mutual-information truncation;
5. plan a token budget (NSGA-II over measured quality) and write its report.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from mmtok.cli.common import console

DEMO_MODELS = ("gpt-5.2", "claude-opus-4-7", "gemini-3.1-pro-preview")


STEPS = ("inspect", "price", "tokenize", "backbone", "plan")


def demo(
    out: Path = typer.Option(Path("mmtok-demo"), "--out", "-o", help="Folder for the demo's tokens and plan report."),
    steps: str = typer.Option(",".join(STEPS), "--steps", help="Comma-separated steps to run, in order."),
) -> None:
    """Run mmtok's main job on the shipped sample media: inspect, price, tokenize, truncate, plan."""
    import mmtok
    from mmtok.samples import samples_dir

    chosen = [s.strip() for s in steps.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in STEPS]
    if unknown or not chosen:
        raise typer.BadParameter(f"unknown step(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(STEPS)}")
    start = time.perf_counter()
    console().rule("[bold]mmtok demo")
    console().print(f"sample media: {samples_dir()}  ->  output: {out}/")
    out.mkdir(parents=True, exist_ok=True)
    media = [m for m in mmtok.scan([samples_dir()]) if not isinstance(m, mmtok.MediaError)]
    run = {
        "inspect": lambda: _inspect_step(media),
        "price": lambda: _price_step(media),
        "tokenize": lambda: _tokenize_step(media, out / "tokens"),
        "backbone": _backbone_step,
        "plan": lambda: _plan_step(out / "plan"),
    }
    for step in STEPS:
        if step in chosen:
            run[step]()
    console().rule(f"done in {time.perf_counter() - start:.0f} s")


def _inspect_step(media: list) -> None:
    from mmtok.cli.inspect import inspect_table
    from mmtok.samples import manifest, samples_dir

    console().rule("1. inspect (headers only)")
    console().print(inspect_table([m.info() for m in media], root=samples_dir()))
    speech = [name for name, item in manifest().items() if "transcript" in item]
    console().print(f"{len(media)} media files; {len(speech)} speech samples with known transcripts.")


def _price_step(media: list) -> None:
    from decimal import Decimal

    from rich.table import Table

    from mmtok.budgets.pricing import price, resolve

    console().rule("2. price on three providers")
    table = Table(show_edge=False, header_style="bold")
    table.add_column("sample")
    for name in DEMO_MODELS:
        table.add_column(f"{name}\ntokens / USD", justify="right")
    totals = dict.fromkeys(DEMO_MODELS, Decimal(0))
    sources = {}
    for item in media:
        cells = []
        for name in DEMO_MODELS:
            if not resolve(name).accepts(item.kind):
                cells.append("[dim]not accepted[/]")
                continue
            quote = price(item, name)
            totals[name] += quote.total_cost
            sources[name] = quote
            cells.append(f"{quote.input_tokens:,} / {quote.total_cost:.6f}" + ("" if quote.exact else " ~"))
        table.add_row(item.path.name, *cells)
    table.add_section()
    table.add_row("total USD", *[f"{totals[name]:.6f}" for name in DEMO_MODELS])
    console().print(table)
    for name, quote in sources.items():
        console().print(f"[dim]{name}: prices of {quote.as_of} from {quote.source}[/]")
    console().print("[dim]~ not exact: a documented count, an upper bound or an estimate (see `mmtok price`)[/]")


def _tokenize_step(media: list, out: Path) -> None:
    """Every image through vq-clip-tiny (tokens, reconstruction PSNR); speech and video through av-tiny."""
    import torch
    from rich.table import Table

    import mmtok
    from mmtok.eval.metrics import psnr
    from mmtok.media import Audio, Image, Video

    console().rule("3. tokenize with the shipped tokenizers")
    vq = mmtok.get_tokenizer("vq-clip-tiny").eval()
    av = mmtok.get_tokenizer("av-tiny").eval()
    out.mkdir(parents=True, exist_ok=True)
    table = Table(show_edge=False, header_style="bold")
    for column in ("sample", "tokenizer", "tokens", "detail"):
        table.add_column(column, justify="left" if column in ("sample", "tokenizer", "detail") else "right")
    with torch.no_grad():
        for item in media:
            if isinstance(item, Image):
                seq = vq.encode(item)
                original, _ = vq.preprocess(item)
                recon, _ = vq.preprocess(vq.decode(seq))
                detail = (
                    f"grid {seq.grid[0]}x{seq.grid[1]} of {vq.codebook_size} codes; "
                    f"reconstruction PSNR {psnr(original[None], recon[None]):.1f} dB at {original.shape[-1]} px"
                )
                table.add_row(item.path.name, vq.name, str(len(seq)), detail)
                seq.save(out / f"{item.path.stem}.safetensors")
            elif isinstance(item, (Audio, Video)):
                streams = av.encode_streams(item)
                for stream, seq in streams.items():
                    levels = seq.ids.shape[1] if seq.ids is not None and seq.ids.ndim == 2 else 1
                    detail = f"{stream}: {seq.meta['tokens_per_second']:g} tokens/s, {levels} codebook levels"
                    table.add_row(item.path.name, av.name, str(len(seq)), detail)
                mmtok.save_sequences(out / f"{item.path.name}.safetensors", streams)  # one file, a key per stream
    console().print(table)
    console().print(f"[dim]token files: {out}/ (mmtok detokenize turns image and audio tokens back into media)[/]")


def _backbone_step(count: int = 8) -> None:
    """Held-out digit photos -> vq-clip-tiny tokens -> MI truncation given the question -> MoE backbone answer."""
    import torch
    from rich.table import Table

    import mmtok
    from mmtok.models.data import DIGIT_WORDS, digit_canvases
    from mmtok.models.train_backbone import PROMPT
    from mmtok.truncation import truncate

    console().rule("4. ask the MoE backbone, with and without MI truncation")
    vq = mmtok.get_tokenizer("vq-clip-tiny").eval()
    backbone = mmtok.get_model("backbone-tiny", kind="backbone").eval()
    prompt = mmtok.get_tokenizer("text-bytes").encode(PROMPT)
    images, labels, _ = digit_canvases("heldout", count, 128, seed=7)
    context = [f"a photo of the digit {w}" for w in DIGIT_WORDS]  # the same ten prompts for every photo
    table = Table(show_edge=False, header_style="bold")
    for column in ("photo", "digit", "answer (all tokens)", "answer (MI-truncated)", "tokens kept"):
        table.add_column(column, justify="right")
    right = {"all": 0, "cut": 0}
    kept_total = all_total = 0
    with torch.no_grad():
        for i in range(count):
            seq = vq.encode(images[i], image_size=128)
            short, report = truncate(seq, context=context, method="mi", tokenizer=vq)
            answers = backbone([[prompt, seq], [prompt, short]])["logits"].argmax(-1).tolist()
            truth = int(labels[i])
            right["all"] += answers[0] == truth
            right["cut"] += answers[1] == truth
            kept_total += report.tokens_out
            all_total += report.tokens_in
            table.add_row(
                f"#{i}",
                DIGIT_WORDS[truth],
                _mark(DIGIT_WORDS[answers[0]], answers[0] == truth),
                _mark(DIGIT_WORDS[answers[1]], answers[1] == truth),
                f"{report.tokens_out}/{report.tokens_in}",
            )
    console().print(table)
    console().print(
        f"correct: {right['all']}/{count} with all tokens, {right['cut']}/{count} with "
        f"{kept_total / all_total:.0%} of them (critic-vq-text, threshold {report.threshold} nats). "
        "The full held-out figures are in the README."
    )


def _mark(text: str, ok: bool) -> str:
    return f"[green]{text}[/]" if ok else f"[red]{text}[/]"


def _plan_step(out: Path) -> None:
    from importlib.resources import files

    from mmtok.budgets.planner import load_spec, plan
    from mmtok.budgets.report import write_report
    from mmtok.cli.plan import print_summary

    console().rule("5. plan a token budget (NSGA-II over measured quality)")
    spec_path = Path(str(files("mmtok.budgets") / "examples" / "demo.toml"))
    spec = load_spec(spec_path)
    console().print(f"spec: {spec_path.name} (calibration results are cached: a second run is fast)")
    result = plan(
        spec,
        on_generation=lambda r: console().print(
            f"  generation {r['generation']}: {r['evaluations']} settings measured, hypervolume {r['hypervolume']:.4g}"
        ),
    )
    print_summary(result, write_report(result, out))
