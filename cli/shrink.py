"""``mmtok shrink``: the cheapest version of each input that keeps what the user needs, per model."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mmtok.cli.common import console, err_console, flushes_json_lines, fmt_num, print_error, print_json_line, progress
from mmtok.errors import MediaError, MmtokError

if TYPE_CHECKING:
    from mmtok.budgets.shrink import ShrinkResult


@flushes_json_lines
def shrink(
    paths: list[Path] = typer.Argument(..., help="Images, recordings, videos or folders (walked recursively)."),
    model: list[str] = typer.Option(..., "--model", "-m", help="Model to shrink for (repeatable)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for the outputs (never inside an input folder)."),
    keep: list[str] = typer.Option(
        [],
        "--keep",
        help="A quality bar, e.g. ocr>=0.98, ssim>=0.95, wer<=0.05 (repeatable; replaces that "
        "modality's defaults: ssim>=0.90 and ocr>=0.98 for images, wer<=0.05 for audio).",
    ),
    lossless: bool = typer.Option(False, "--lossless", help="Only changes that leave what the model sees unchanged."),
    speed: float = typer.Option(1.0, "--speed", help="Also try speech sped up by this factor (1 to 2)."),
    min_silence: float = typer.Option(0.8, "--min-silence", help="Cut silences longer than this (seconds).", min=0.1),
    detail: str | None = typer.Option(None, help="The detail / media_resolution the originals would be sent with."),
    no_crop: bool = typer.Option(False, "--no-crop", help="Never cut uniform borders."),
    prices: list[Path] = typer.Option([], "--prices", help="Your own price sheet (TOML)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per input and model on stdout."),
) -> None:
    """For each input and model, write the cheapest version that meets every bar to --out, with tokens and cost
    before and after, what was done, and each measure. Outputs are priced again from the written file and never
    cost more than the original; where no cheaper version meets the bars the original is copied and said so."""
    from mmtok.budgets.shrink import shrink_models
    from mmtok.media import iter_files

    bars = _checked_bars(keep, speed, detail)
    out = out.expanduser()
    problem = _out_problem(out, paths)
    if problem:
        print_error(problem)
        raise typer.Exit(2)
    usable = _usable_models(model, prices, json_out)
    failures = len(usable) != len(model)
    files = list(iter_files(paths))
    names = _output_names([f for f in files if not isinstance(f, MediaError)], paths)
    inputs = frozenset(Path(os.path.realpath(p)) for p in names)
    results: list[ShrinkResult] = []
    warned: set[str] = set()
    folders = any(p.is_dir() for p in paths)
    for item in progress(files, "shrinking", min_items=1 if folders else 2):
        if isinstance(item, MediaError):
            failures = True
            _error(item, json_out, {"input": item.source})
            continue
        made = 0
        options = {"lossless": lossless, "detail": detail, "speed": speed, "min_silence_s": min_silence}
        for result in shrink_models(
            item, usable, bars, out / names[item].parent, names[item].name,
            crop=not no_crop, prices=prices, protect=inputs, **options,
        ):  # fmt: skip
            written, failed = _report(item, result, json_out, warned, results)
            made += written
            failures = failures or failed
        failures = failures or made == 0
    if not json_out and results:
        _print_table(results)
    if failures:
        raise typer.Exit(1)


def _checked_bars(keep: list[str], speed: float, detail: str | None) -> list:
    """The quality bars from ``--keep``; a bad bar, ``--speed`` or ``--detail`` is a usage error (exit 2)."""
    from mmtok.budgets.shrink import make_bars
    from mmtok.budgets.shrink.audio import check_speed

    try:
        bars = make_bars(keep)
        check_speed(speed)
        if detail is not None:
            from mmtok.budgets.pricing import Options

            Options.of(detail=detail)
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(2) from None
    return bars


def _usable_models(model: list[str], prices: list[Path], json_out: bool) -> list[str]:
    """The models that can be priced; each other is one line (closest names). None usable: exit 2."""
    from mmtok.budgets.pricing import rate_card, resolve

    usable = []
    for name in model:
        try:
            rate_card(resolve(name, prices))  # an unknown name fails here, naming the closest models
            usable.append(name)
        except MmtokError as e:
            print_error(f"{name}: {e}")
            if json_out:
                print_json_line({"model": name, "error": str(e)})
    if not usable:
        raise typer.Exit(2)
    return usable


def _report(item: Path, result: object, json_out: bool, warned: set[str], results: list) -> tuple[int, bool]:
    """Say one model's outcome for ``item`` (a skip, an error, or a result with its warnings); (written, failed)."""
    from mmtok.budgets.shrink import Skipped

    if isinstance(result, Skipped):
        sys.stderr.write(f"skipped: {item}: {result}\n")
        if json_out:
            print_json_line({"input": str(item), "skipped": str(result)})
        return 0, False
    if isinstance(result, MmtokError):
        _error(result if isinstance(result, MediaError) else f"{item}: {result}", json_out, {"input": str(item)})
        return 0, True
    for warning in result.warnings:
        sys.stderr.write(f"warning: {item}: {warning}\n")
    for warning in result.before.warnings:  # the price's own (a retired model ...): said once
        if warning not in warned:
            warned.add(warning)
            sys.stderr.write(f"warning: {warning}\n")
    if json_out:
        print_json_line(result.to_dict())
    else:
        results.append(result)
    return 1, False


def _error(error: object, json_out: bool, row: dict) -> None:
    print_error(error)  # type: ignore[arg-type]
    if json_out:
        print_json_line({**row, "error": str(error)})


def _out_problem(out: Path, paths: list[Path]) -> str | None:
    """Why ``out`` cannot take the outputs: a file, inside (or equal to) a folder being read, or a folder that
    cannot be created (else it is created here)."""
    if out.exists() and not out.is_dir():
        return f"--out {out}: is a file, not a folder"
    target = Path(os.path.realpath(out))
    for path in paths:
        if path.is_dir():
            folder = Path(os.path.realpath(path))
            if target == folder or folder in target.parents:
                return (
                    f"--out {out} is inside the input folder {path}: choose a folder outside it "
                    "(inputs are never overwritten)"
                )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"--out {out}: cannot create it: {e.strerror or e}"
    return None


def _output_names(files: list[Path], roots: list[Path]) -> dict[Path, Path]:
    """Each input's output stem, relative to --out: its path under the folder it was found in (files named alone:
    their own name), made unique."""
    names: dict[Path, Path] = {}
    used: set[str] = set()
    folders = [Path(os.path.realpath(r)) for r in roots if r.is_dir()]
    for f in files:
        real = Path(os.path.realpath(f))
        relative = next((real.relative_to(d) for d in folders if d in real.parents), Path(f.name))
        stem = relative.with_suffix("") if relative.suffix else relative
        candidate, n = stem, 2
        while str(candidate).lower() in used:
            candidate = stem.with_name(f"{stem.name}-{n}")
            n += 1
        used.add(str(candidate).lower())
        names[f] = candidate
    return names


def _print_table(results: list[ShrinkResult]) -> None:
    from rich.table import Table

    from mmtok.cli.price import money

    table = Table(show_edge=False, header_style="bold")
    for column, justify in (
        ("input", "left"),
        ("model", "left"),
        ("tokens", "right"),
        ("cost USD", "right"),
        ("saving", "right"),
        ("done", "left"),
        ("measures", "left"),
    ):
        table.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for r in results:
        seconds = ""
        if r.seconds_before is not None and r.kind == "audio":
            seconds = f"\n{r.seconds_before:.2f} -> {r.seconds_after:.2f} s billed"
        measures = ", ".join(f"{k} {v:.3f}" for k, v in r.measures.items() if v is not None)
        done = r.action
        if r.status == "lossless" or (r.kind == "image" and r.bytes_after != r.bytes_before):
            done += f"\n{fmt_num(r.bytes_before)} -> {fmt_num(r.bytes_after)} bytes"
        table.add_row(
            _short(r.source),
            r.model,
            f"{fmt_num(r.tokens_before)} -> {fmt_num(r.tokens_after)}{seconds}",
            f"{money(r.before.total_cost)} -> {money(r.after.total_cost)}",
            f"{r.saving:.0%}",
            done + (f"\nsend with {r.detail_name}={r.detail}" if r.detail and r.status != "kept" else ""),
            measures,
        )
    console().print(table)
    folders = sorted({str(r.path.parent) for r in results})
    bars = sorted({b for r in results for b in r.bars.values()})
    console().print(f"[dim]bars: {', '.join(bars) or 'none'}; written to {', '.join(folders)}[/]")
    kept = sum(r.status == "kept" for r in results)
    if kept:
        err_console().print(f"[dim]{kept} of {len(results)} kept as they were (see 'done')[/]")
    converted = sum(r.status == "converted" for r in results)
    if converted:
        err_console().print(f"[dim]{converted} of {len(results)} converted to a file format the provider takes[/]")


def _short(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except (ValueError, OSError):
        return str(path)
