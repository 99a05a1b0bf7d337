"""Benchmark: how long ``mmtok price photo.jpg`` takes to start and answer on the core install, against
``python -c pass`` (the anchor: the interpreter's own start-up) in the same venv, in the same run.

Run: ``python -m mmtok.eval.bench.startup [--runs 31] [--venv .venv-bench-core]`` (writes
``eval/results/bench_startup.json`` and ``.txt``).

The venv is the core as a user gets it: ``pip install <this checkout>`` with no extras and not editable (an editable
install adds its own import hook to every start); it is made once at ``--venv`` (PyPI, or pip's cache) and reused.
Whole processes are timed from outside: wall seconds from just before the start to just after the exit, and the
child's user + system CPU seconds from the operating system; the two commands run in turn (A B A B ...), one warm-up
each first, and the ratio is taken pair by pair, so that a drift in the machine's speed hits both. Medians.
Beside the times: the top-level packages the command imports (what it loads that it may not use), and Python's own
``-X importtime`` account of the slowest imports.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mmtok.eval.bench import machine, write_json

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "eval" / "results"
NEUTRAL = tempfile.gettempdir()  # the commands run here: in the checkout, ``python -c`` would import its mmtok/
TARGET_RATIO = 7.0  # issue 40: mmtok price photo.jpg <= 7x python -c pass
STACK = "import typer, typer.main, rich.console, rich.table, rich.markup"  # what the CLI draws with
IMPORTS = """
import sys
sys.argv = ["mmtok", *sys.argv[1:]]
from mmtok.cli.main import app
try:
    app()
except SystemExit:
    pass
print("\\n".join(sorted({m.partition(".")[0] for m in sys.modules if not m.startswith("_")})), file=sys.stderr)
"""


def core_venv(folder: Path) -> Path:
    """The core venv's python, made at ``folder`` (``pip install`` of this checkout, no extras) if missing."""
    python = folder / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps", str(ROOT)], check=True
    )  # fmt: skip  -- this checkout's code, as a wheel
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(ROOT)], check=True)  # its dependencies
    return python


def timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one run of ``command``, its output thrown away."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, check=True,
                   cwd=NEUTRAL)  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def alternate(a: list[str], b: list[str], runs: int) -> dict[str, Any]:
    """A and B in turn, ``runs`` pairs after one warm-up each: medians and the median of the paired ratios."""
    timed(a), timed(b)
    pairs = [(timed(a), timed(b)) for _ in range(runs)]
    wall_a, cpu_a = zip(*(p[0] for p in pairs), strict=True)
    wall_b, cpu_b = zip(*(p[1] for p in pairs), strict=True)
    return {
        "runs": runs,
        "a_wall_s": statistics.median(wall_a),
        "b_wall_s": statistics.median(wall_b),
        "a_cpu_s": statistics.median(cpu_a),
        "b_cpu_s": statistics.median(cpu_b),
        "ratio_wall": statistics.median(x[0][0] / x[1][0] for x in pairs),
        "ratio_cpu": statistics.median(x[0][1] / x[1][1] for x in pairs),
        "a_wall_spread_s": [min(wall_a), max(wall_a)],
        "b_wall_spread_s": [min(wall_b), max(wall_b)],
    }


def imported(python: Path, args: list[str]) -> list[str]:
    """The top-level packages a run of ``mmtok args`` has imported when it ends."""
    done = subprocess.run([str(python), "-c", IMPORTS, *args], capture_output=True, text=True, check=True, cwd=NEUTRAL)
    return done.stderr.split()


def slowest_imports(python: Path, args: list[str], top: int = 15) -> list[dict[str, Any]]:
    """``-X importtime``'s cumulative microseconds of the slowest top-level imports (one run: an account, not a
    measurement)."""
    code = f"import sys; sys.argv = ['mmtok', *{args!r}]\nfrom mmtok.cli.main import app\napp()"
    done = subprocess.run([str(python), "-X", "importtime", "-c", code], capture_output=True, text=True, cwd=NEUTRAL)
    rows = []
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "self [us]" not in line:
            _, cumulative, name = (part.strip() for part in line.split(":", 1)[1].split("|"))
            if not name.startswith(" ") and "." not in name:
                rows.append({"module": name, "cumulative_ms": int(cumulative) / 1000})
    return sorted(rows, key=lambda r: -r["cumulative_ms"])[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-bench-core")
    parser.add_argument("--json", type=Path, default=RESULTS / "bench_startup.json")
    parser.add_argument("--txt", type=Path, default=RESULTS / "bench_startup.txt")
    args = parser.parse_args()
    python = core_venv(args.venv)
    photo = ROOT / "mmtok" / "samples" / "media" / "chelsea.jpg"
    command = [str(args.venv / "bin" / "mmtok"), "price", str(photo)]
    anchor = [str(python), "-c", "pass"]
    result = alternate(command, anchor, args.runs)
    stack = alternate([str(python), "-c", STACK], anchor, args.runs)  # the CLI's own libraries, before any of mmtok
    packages = imported(python, ["price", str(photo)])
    heavy = sorted(set(packages) & {"torch", "numpy", "PIL", "scipy", "matplotlib", "onnxruntime", "cv2", "av"})
    payload = {
        "bench": "startup",
        "machine": machine(),
        "command": "mmtok price mmtok/samples/media/chelsea.jpg",
        "anchor": "python -c pass",
        "install": "pip install of this checkout, no extras, not editable (the core); the same venv's python",
        "protocol": "whole processes from outside; A (mmtok) and B (python -c pass) in turn after a warm-up each; "
        "medians; the ratio is the median of the per-pair ratios",
        "target_ratio": TARGET_RATIO,
        **result,
        "cli_stack": {"command": f"python -c {STACK!r}", **stack},
        "imported_packages": packages,
        "heavy_packages_imported": heavy,
        "slowest_imports": slowest_imports(python, ["price", str(photo)]),
        "os_cpus": os.cpu_count(),
    }
    write_json(args.json, payload)
    text = report(payload)
    args.txt.parent.mkdir(parents=True, exist_ok=True)
    args.txt.write_text(text)
    print(text, end="")


def report(p: dict[str, Any]) -> str:
    lines = [
        f"bench_startup: {p['command']} against {p['anchor']}, core install ({p['install']}); "
        f"{p['runs']} alternating pairs, medians. {p['machine']}",
        "",
        f"  {'command':<44} {'wall ms':>8} {'cpu ms':>8}",
        f"  {p['command']:<44} {p['a_wall_s'] * 1000:8.1f} {p['a_cpu_s'] * 1000:8.1f}",
        f"  {p['anchor']:<44} {p['b_wall_s'] * 1000:8.1f} {p['b_cpu_s'] * 1000:8.1f}",
        f"  {'import typer + rich (the CLI stack alone)':<44} {p['cli_stack']['a_wall_s'] * 1000:8.1f} "
        f"{p['cli_stack']['a_cpu_s'] * 1000:8.1f}",
        "",
        f"ratio (median of pairs): wall {p['ratio_wall']:.2f}x, cpu {p['ratio_cpu']:.2f}x "
        f"(target <= {TARGET_RATIO:g}x); the CLI stack alone: wall {p['cli_stack']['ratio_wall']:.2f}x, "
        f"cpu {p['cli_stack']['ratio_cpu']:.2f}x",
        f"heavy packages imported: {', '.join(p['heavy_packages_imported']) or 'none'}",
        "slowest top-level imports (-X importtime, one run): "
        + ", ".join(f"{r['module']} {r['cumulative_ms']:.1f} ms" for r in p["slowest_imports"][:8]),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
