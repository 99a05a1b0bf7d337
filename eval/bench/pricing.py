"""Benchmark: pricing a photo folder on three models, through the library and through the CLI.

Run: ``python -m mmtok.eval.bench.pricing [--files 2000] [--repeats 7]``.

In one run, over the same warm-cache folder of generated photos (``mmtok.eval.tools.corpus.photo_folder``):
the raw-read limit (open + read 4 KiB per file), Pillow's lazy open, ``mmtok.load`` + ``mmtok.price`` for three
current models (library), and ``mmtok price --json`` as a subprocess (end to end: interpreter start-up, imports, walk,
pricing and JSON output). The one-photo case, ``mmtok price one.jpg -m gpt-4o --json``, runs beside ``python -c pass``
(its anchor). Every price is checked against one computed from the fully decoded image's size. Rate cards come from
the warm on-disk cache, as on any call after the first of the day. mmtok's bytecode is compiled first, as ``make``
leaves an install.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import PIL.Image
import PIL.ImageOps

import mmtok
from mmtok.budgets.pricing import price
from mmtok.eval.bench import compile_package, machine, print_table, time_interleaved, write_json
from mmtok.eval.bench.inspect import pillow_lazy, raw_read
from mmtok.eval.tools.corpus import folder_files, photo_folder
from mmtok.media import Image

MODELS = ("gpt-5.2", "claude-opus-4-7", "gemini-3.1-pro-preview")


def library(files: list[Path]) -> list[list[Decimal]]:
    out = []
    for p in files:
        media = mmtok.load(p)
        out.append([price(media, m, detail="high").total_cost for m in MODELS])
    return out


def cli(folder: Path) -> list[str]:
    exe = Path(sys.executable).with_name("mmtok")
    args = [str(exe), "price", "--json", "--detail", "high", *[f"-m{m}" for m in MODELS], str(folder)]
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout.splitlines()


def decoded_costs(p: Path) -> list[Decimal]:
    """Cost from the fully decoded, EXIF-transposed image's size: the reference the fast path must equal."""
    with PIL.Image.open(p) as im:
        width, height = PIL.ImageOps.exif_transpose(im.convert("RGB") if im.mode == "P" else im).size
    return [price(Image(None, "decoded", width, height), m, detail="high").total_cost for m in MODELS]


TARGETS = {"library_files_per_s": 8000, "cli_files_per_s": 5000, "one_photo_vs_python_pass": 2.5}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--check", type=int, default=None, help="check prices on this many files (default all)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    compile_package()  # the CLI runs from bytecode, as after `make` (see compile_package)
    folder = photo_folder(args.files)
    files = folder_files(folder)
    raw_read(files)
    ours = library(files)  # warm: page cache, sheets, imports
    startup_exe = [str(Path(sys.executable).with_name("mmtok")), "price", "--json", "-m", "gpt-4o", str(files[0])]
    seconds = time_interleaved(
        {
            "python -c pass": lambda: subprocess.run([sys.executable, "-c", "pass"], check=True),
            "raw read 4 KiB": lambda: raw_read(files),
            "Pillow lazy open": lambda: pillow_lazy(files),
            "mmtok.price (library, 3 models)": lambda: library(files),
            "mmtok price --json (CLI, 3 models)": lambda: cli(folder),
            "CLI start-up (1 file)": lambda: subprocess.run(startup_exe, capture_output=True, check=True),
        },
        args.repeats,
    )
    rates = {name: len(files) / s for name, s in seconds.items() if not name.startswith(("CLI start-up", "python"))}
    startup = seconds["CLI start-up (1 file)"]
    cli_steady = len(files) / (seconds["mmtok price --json (CLI, 3 models)"] - startup)

    lines = [json.loads(line) for line in cli(folder)]
    cli_costs = [[Decimal(r["total_cost"]) for r in lines[i : i + len(MODELS)]] for i in range(0, len(lines), 3)]
    check = files if args.check is None else files[: args.check]
    start = time.perf_counter()
    mismatched = [
        p.name
        for p, mine, via_cli in zip(check, ours, cli_costs, strict=False)
        if not (mine == via_cli == decoded_costs(p))
    ]
    check_seconds = time.perf_counter() - start

    base = rates["raw read 4 KiB"]
    rows = [[name, rate, rate / base] for name, rate in rates.items()]
    print(
        f"bench_pricing: {len(files)} photos (JPEG/PNG/WebP, long side 256-4000 px), models {', '.join(MODELS)}; "
        f"warm cache, median of {args.repeats} interleaved runs. {machine()}"
    )
    print_table("files/s", ["path", "files/s", "x raw read"], rows)
    lib = rates["mmtok.price (library, 3 models)"]
    end_to_end = rates["mmtok price --json (CLI, 3 models)"]
    print(
        f"\nlibrary: {lib:,.0f} files/s (target >= {TARGETS['library_files_per_s']:,}); CLI end to end: "
        f"{end_to_end:,.0f} files/s (target >= {TARGETS['cli_files_per_s']:,}), of which start-up "
        f"{startup * 1000:.0f} ms; CLI after start-up {cli_steady:,.0f} files/s"
    )
    print(f"Pillow lazy open / mmtok library = 1/{lib / rates['Pillow lazy open']:.1f}")
    anchor = seconds["python -c pass"]
    print(
        f"one photo, `mmtok price one.jpg -m gpt-4o --json`: {startup * 1000:.0f} ms against `python -c pass` "
        f"{anchor * 1000:.0f} ms = {startup / anchor:.2f}x (target <= 2.5x)"
    )
    print(
        f"prices equal to those from fully decoded images (library and CLI): "
        f"{len(check) - len(mismatched)}/{len(check)} ({check_seconds:.0f} s of decoding)"
        + (f"; mismatches: {mismatched[:10]}" if mismatched else "")
    )
    write_json(
        args.json,
        {
            "files": len(files),
            "rates": rates,
            "startup_s": startup,
            "python_pass_s": seconds["python -c pass"],
            "one_photo_ratio": startup / seconds["python -c pass"],
            "models": list(MODELS),
            "cli_steady": cli_steady,
            "mismatches": mismatched,
            "targets": TARGETS,
            "machine": machine(),
        },
    )


if __name__ == "__main__":
    main()
