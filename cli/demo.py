"""``mmtok demo``: the main job on the shipped defaults and sample media, step by step.

1. inspect the sample media (headers only);  2. price them on three providers;  3. tokenize them with the shipped
tokenizers (vq-clip-tiny for images, av-tiny for speech and video) and measure what the tokens keep;
4. ask the shipped MoE backbone about held-out digit photos, with and without mutual-information truncation;
5. plan a token budget (NSGA-II over measured quality) and write its report.

The steps are named inspect, price, tokenize, ask and plan everywhere (``--steps``, the headings, the JSON).
With ``--json`` each step prints one JSON object when it is done (``{"step": name, ...}``) and nothing else goes to
stdout, so a script reads five lines.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer

from mmtok.cli.common import check_out_folder, console, flushes_json_lines, print_json_line

DEMO_MODELS = ("gpt-5.2", "claude-opus-4-7", "gemini-3.1-pro-preview")

STEPS = ("inspect", "price", "tokenize", "ask", "plan")
TITLES = {
    "inspect": "1. inspect (headers only)",
    "price": "2. price on three providers",
    "tokenize": "3. tokenize with the shipped tokenizers",
    "ask": "4. ask the MoE backbone, with and without MI truncation",
    "plan": "5. plan a token budget (NSGA-II over measured quality)",
}


@flushes_json_lines
def demo(
    out: Path = typer.Option(Path("mmtok-demo"), "--out", "-o", help="Folder for the demo's tokens and plan report."),
    steps: str = typer.Option(
        ",".join(STEPS), "--steps", help=f"Comma-separated steps to run, in order: {', '.join(STEPS)}."
    ),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per step, as each step ends."),
) -> None:
    """Run mmtok's main job on the shipped sample media: inspect, price, tokenize, ask, plan."""
    import mmtok
    from mmtok.samples import MANIFEST, samples_dir

    chosen = [s.strip() for s in steps.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in STEPS]
    if unknown or not chosen:
        raise typer.BadParameter(
            f"unknown step(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(STEPS)}", param_hint="--steps"
        )
    check_out_folder(out)
    show = not json_out
    start = time.perf_counter()
    if show:
        console().rule("[bold]mmtok demo")
        console().print(f"sample media: {samples_dir()}  ->  output: {out}/", markup=False)
    out.mkdir(parents=True, exist_ok=True)
    media = [m for m in mmtok.scan([samples_dir()]) if not isinstance(m, mmtok.MediaError) and m.path.name != MANIFEST]
    run = {
        "inspect": lambda: _inspect_step(media, show),
        "price": lambda: _price_step(media, show),
        "tokenize": lambda: _tokenize_step(media, out / "tokens", show),
        "ask": lambda: _ask_step(show),
        "plan": lambda: _plan_step(out / "plan", show),
    }
    for step in STEPS:
        if step in chosen:
            if show:
                console().rule(TITLES[step])
            record = run[step]()
            if json_out:
                print_json_line({"step": step, **record})
    if show:
        console().rule(f"done in {time.perf_counter() - start:.0f} s")


def _inspect_step(media: list, show: bool) -> dict[str, Any]:
    from mmtok.cli.inspect import print_media_table
    from mmtok.samples import manifest, samples_dir

    rows = [m.info() for m in media]
    speech = [name for name, item in manifest().items() if "transcript" in item]
    if show:
        print_media_table(rows, root=samples_dir())
        console().print(f"{len(media)} media files; {len(speech)} speech samples with known transcripts.")
    return {"media": rows, "speech_samples": len(speech)}


def _price_step(media: list, show: bool) -> dict[str, Any]:
    from decimal import Decimal

    from mmtok.budgets.pricing import price, resolve

    rows = []
    totals = dict.fromkeys(DEMO_MODELS, Decimal(0))
    sources = {}
    for item in media:
        for name in DEMO_MODELS:
            if not resolve(name).accepts(item.kind):
                rows.append({"sample": item.path.name, "model": name, "accepted": False})
                continue
            quote = price(item, name)
            totals[name] += quote.total_cost
            sources[name] = {"as_of": quote.as_of.isoformat(), "source": quote.source}
            rows.append(
                {
                    "sample": item.path.name,
                    "model": name,
                    "accepted": True,
                    "input_tokens": quote.input_tokens,
                    "cost_usd": str(quote.total_cost),
                    "exact": quote.exact,
                    "warnings": [w.replace(f"{item.path}: ", "", 1) for w in quote.warnings],
                }
            )
    if show:
        _print_prices(media, rows, totals, sources)
    return {
        "models": list(DEMO_MODELS),
        "quotes": rows,
        "totals_usd": {k: str(v) for k, v in totals.items()},
        "sources": sources,
    }


def _print_prices(media: list, rows: list[dict], totals: dict, sources: dict) -> None:
    from rich.table import Table

    table = Table(show_edge=False, header_style="bold")
    table.add_column("sample", no_wrap=True)  # file names whole; a cell's tokens over its cost keeps 80 columns
    for name in DEMO_MODELS:
        table.add_column(f"{name}\ntokens, USD", justify="right", no_wrap=True)
    cells: dict[str, list[str]] = {}
    for row in rows:
        if not row["accepted"]:
            cell = "[dim]not accepted[/]"
        else:
            cell = f"{row['input_tokens']:,} tok" + ("" if row["exact"] else " ~") + (" !" if row["warnings"] else "")
            cell += f"\n{_usd(row['cost_usd'])}"
        cells.setdefault(row["sample"], []).append(cell)
    for sample, line in cells.items():
        table.add_row(sample, *line)
    table.add_section()
    table.add_row("total USD", *[f"{totals[name]:.6f}" for name in DEMO_MODELS])
    console().print(table)
    for name, source in sources.items():
        console().print(f"[dim]{name}: prices of {source['as_of']} from {source['source']}[/]")
    console().print("[dim]~ not exact: a documented count, an upper bound or an estimate (see `mmtok price`)[/]")
    console().print("[dim]! the quote has a warning, said below[/]")
    said: dict[tuple[str, str], list[str]] = {}  # (model, warning) -> the samples it was given for
    for row in rows:
        for warning in row.get("warnings", []):
            said.setdefault((row["model"], warning), []).append(row["sample"])
    for (model, warning), samples in said.items():
        console().print(f"! {', '.join(samples)} on {model}: {warning}", markup=False, highlight=False)


def _usd(value: str) -> str:
    from decimal import Decimal

    return f"{Decimal(value):.6f}"


def _tokenize_step(media: list, out: Path, show: bool) -> dict[str, Any]:
    """Every image through vq-clip-tiny (tokens, reconstruction PSNR); speech and video through av-tiny."""
    import torch

    import mmtok
    from mmtok.media import Audio, Image, Video

    vq = mmtok.get_tokenizer("vq-clip-tiny").eval()
    av = mmtok.get_tokenizer("av-tiny").eval()
    out.mkdir(parents=True, exist_ok=True)
    records = []
    with torch.no_grad():
        for item in media:
            if isinstance(item, Image):
                records.append(_image_record(vq, item, out))
            elif isinstance(item, (Audio, Video)):
                records += _av_records(av, item, out)
    if show:
        _show_records(records, out)
    return {"out": str(out), "sequences": records}


def _image_record(vq: Any, image: Any, out: Path) -> dict[str, Any]:
    from mmtok.eval.metrics import psnr

    seq = vq.encode(image)
    target = seq.save(out / f"{image.path.stem}.safetensors")
    original, _ = vq.preprocess(image)
    recon, _ = vq.preprocess(vq.decode(seq))
    return {
        "sample": image.path.name,
        "tokenizer": vq.name,
        "stream": "image",
        "tokens": len(seq),
        "grid": list(seq.grid),
        "codebook_size": vq.codebook_size,
        "psnr_db": round(float(psnr(original[None], recon[None])), 2),
        "image_size": int(original.shape[-1]),
        "file": str(target),
    }


def _av_records(av: Any, item: Any, out: Path) -> list[dict[str, Any]]:
    import mmtok

    streams = av.encode_streams(item)
    target = mmtok.save_sequences(out / f"{item.path.name}.safetensors", streams)  # a key per stream
    return [
        {
            "sample": item.path.name,
            "tokenizer": av.name,
            "stream": stream,
            "tokens": len(seq),
            "tokens_per_second": seq.meta["tokens_per_second"],
            "codebook_levels": seq.ids.shape[1] if seq.ids is not None and seq.ids.ndim == 2 else 1,
            "file": str(target),
        }
        for stream, seq in streams.items()
    ]


def _show_records(records: list[dict[str, Any]], out: Path) -> None:
    from rich.table import Table

    table = Table(show_edge=False, header_style="bold")
    for column in ("sample", "tokenizer", "tokens", "detail"):
        table.add_column(column, justify="right" if column == "tokens" else "left")
    for r in records:
        if r["stream"] == "image":
            detail = (
                f"grid {r['grid'][0]}x{r['grid'][1]} of {r['codebook_size']} codes; "
                f"reconstruction PSNR {r['psnr_db']:.1f} dB at {r['image_size']} px"
            )
        else:
            detail = f"{r['stream']}: {r['tokens_per_second']:g} tokens/s, {r['codebook_levels']} codebook levels"
        table.add_row(r["sample"], r["tokenizer"], str(r["tokens"]), detail)
    console().print(table)
    console().print(f"[dim]token files: {out}/ (mmtok detokenize turns image and audio tokens back into media)[/]")


def _ask_step(show: bool, count: int = 8) -> dict[str, Any]:
    """Held-out digit photos -> vq-clip-tiny tokens -> MI truncation given the question -> MoE backbone answer."""
    import torch
    from rich.table import Table

    import mmtok
    from mmtok.models.data import DIGIT_WORDS, digit_canvases
    from mmtok.models.digits_qa import CONTEXT_PROMPTS, PROMPT
    from mmtok.truncation import truncate

    vq = mmtok.get_tokenizer("vq-clip-tiny").eval()
    backbone = mmtok.get_model("backbone-tiny", kind="backbone").eval()
    prompt = mmtok.get_tokenizer("text-bytes").encode(PROMPT)
    images, labels, _ = digit_canvases("heldout", count, 128, seed=7)
    photos = []
    with torch.no_grad():
        for i in range(count):
            seq = vq.encode(images[i], image_size=128)
            short, report = truncate(seq, context=CONTEXT_PROMPTS, method="mi", tokenizer=vq)  # the same ten prompts
            answers = backbone([[prompt, seq], [prompt, short]])["logits"].argmax(-1).tolist()
            photos.append(
                {
                    "digit": DIGIT_WORDS[int(labels[i])],
                    "answer_all_tokens": DIGIT_WORDS[answers[0]],
                    "answer_truncated": DIGIT_WORDS[answers[1]],
                    "tokens": report.tokens_in,
                    "tokens_kept": report.tokens_out,
                }
            )
    record = {
        "photos": photos,
        "correct_all_tokens": sum(p["answer_all_tokens"] == p["digit"] for p in photos),
        "correct_truncated": sum(p["answer_truncated"] == p["digit"] for p in photos),
        "kept_ratio": round(sum(p["tokens_kept"] for p in photos) / sum(p["tokens"] for p in photos), 4),
        "critic": "critic-vq-text",
        "threshold_nats": report.threshold,
    }
    if show:
        table = Table(show_edge=False, header_style="bold")
        for column in ("photo", "digit", "answer (all tokens)", "answer (MI-truncated)", "tokens kept"):
            table.add_column(column, justify="right")
        for i, p in enumerate(photos):
            table.add_row(
                f"#{i}",
                p["digit"],
                _mark(p["answer_all_tokens"], p["answer_all_tokens"] == p["digit"]),
                _mark(p["answer_truncated"], p["answer_truncated"] == p["digit"]),
                f"{p['tokens_kept']}/{p['tokens']}",
            )
        console().print(table)
        console().print(
            f"correct: {record['correct_all_tokens']}/{count} with all tokens, {record['correct_truncated']}/{count} "
            f"with {record['kept_ratio']:.0%} of them (critic-vq-text, threshold {report.threshold} nats). "
            "The full held-out figures are in the README."
        )
    return record


def _mark(text: str, ok: bool) -> str:
    return f"[green]{text}[/]" if ok else f"[red]{text}[/]"


def _plan_step(out: Path, show: bool) -> dict[str, Any]:
    from importlib.resources import files

    from mmtok.budgets.planner import load_spec, plan
    from mmtok.budgets.planner.report import write_report
    from mmtok.cli.plan import print_summary

    spec_path = Path(str(files("mmtok.budgets") / "examples" / "demo.toml"))
    spec = load_spec(spec_path)

    def generation(r: dict[str, Any]) -> None:
        if show:
            console().print(
                f"  generation {r['generation']}: {r['evaluations']} settings measured, "
                f"hypervolume {r['hypervolume']:.4g}"
            )

    if show:
        console().print(f"spec: {spec_path.name} (calibration results are cached: a second run is fast)")
    result = plan(spec, on_generation=generation)
    report = write_report(result, out)
    if show:
        print_summary(result, report)
    return {**result.to_dict(), "spec_file": spec_path.name, "report": {k: str(v) for k, v in report.items()}}
